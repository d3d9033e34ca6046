// fuzz_chat.cpp — chat-template rendering: a template text and vocabulary markers, a
// conversation of arbitrary roles and contents, detection and every forced template.
// Input: <template> 0xFF <flags> then pieces alternating role, content (0xFF-separated).
#include "fuzz_util.h"
#include "text/chat.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzReader r(data, size);
  knot::TokenizerData td;
  td.model = "gpt2";
  td.chat_template = std::string(r.piece());
  const uint8_t flags = r.u8();
  // vocab markers steer detection when the template says nothing
  static const char* markers[] = {"<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|eot_id|>", "<s>", "</s>", "<|user|>"};
  for (int i = 0; i < 7; i++)
    if (flags & (1 << i)) td.tokens.push_back(markers[i]);
  td.bos_id = td.tokens.empty() ? -1 : (int32_t)(r.u8() % td.tokens.size());
  td.eos_id = td.tokens.empty() ? -1 : (int32_t)(r.u8() % (td.tokens.size() + 1)) - 1;
  std::vector<knot::ChatMessage> msgs;
  while (r.n && msgs.size() < 64) {
    std::string role(r.piece()), content(r.piece());
    msgs.push_back({role, content});
  }
  const bool gen = flags & 0x80;
  refuse_ok([&] { (void)knot::detect_chat_template(td); });
  refuse_ok([&] { (void)knot::apply_chat_template(td, msgs, gen); });
  for (const std::string& name : knot::chat_template_names())
    refuse_ok([&] { (void)knot::apply_chat_template(td, msgs, gen, name); });
  refuse_ok([&] { (void)knot::apply_chat_template(td, msgs, gen, "no-such-template"); });
  return 0;
}
