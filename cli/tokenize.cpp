// tokenize.cpp — `knot tokenize MODEL (-p TEXT | --prompt-file FILE) [--ids] [--no-bos]
// [--no-special]`, as llama.cpp's llama-tokenize: one "<id> -> '<piece>'" line per token
// (pieces as raw bytes, control tokens as their text), or with --ids one line
// "[id, id, ...]". Special-token text is parsed by default, as `generate` does;
// --no-special encodes it as plain text (--special is accepted: the default).
// Byte-identical to `node bin/knotwork.mjs tokenize` (tested).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "container/loader.h"
#include "kernels/common.h"
#include "text/vocab.h"

using namespace knot;

static const char* TOK_USAGE =
    "usage: knot tokenize MODEL (-p TEXT | --prompt-file FILE) [--ids] [--no-bos] [--no-special]\n"
    "  -p, --prompt TEXT    text to tokenize\n"
    "  --prompt-file FILE   text from a file, bytes as they are\n"
    "  --ids                print only the ids, as [1, 2, 3]\n"
    "  --no-bos             do not add BOS (added only when the vocab asks for it)\n"
    "  --no-special         special-token text (<|im_start|>) is plain text\n"
    "  --special            parse special-token text (the default)\n";

int cmd_tokenize(int argc, char** argv) {
  std::string model, prompt;
  bool have_prompt = false, ids_only = false, add_bos = true, special = true;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) fail("option " + a + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(TOK_USAGE, stdout);
      return 0;
    } else if (a == "-p" || a == "--prompt" || a == "--prompt-file") {
      if (have_prompt) fail("give the prompt once (-p or --prompt-file)");
      prompt = a == "--prompt-file" ? knot::read_file(val()) : val();
      have_prompt = true;
    } else if (a == "--ids") {
      ids_only = true;
    } else if (a == "--no-bos") {
      add_bos = false;
    } else if (a == "--no-special") {
      special = false;
    } else if (a == "--special") {
      special = true;
    } else if (a.size() > 1 && a[0] == '-') {
      fail("unknown option " + a + " (see knot tokenize --help)");
    } else {
      if (!model.empty()) fail("unexpected argument '" + a + "'");
      model = a;
    }
  }
  if (model.empty()) {
    std::fputs(TOK_USAGE, stderr);
    return 2;
  }
  if (!have_prompt) fail("no prompt: pass -p TEXT or --prompt-file FILE");

  LoadOptions lo;
  lo.load_tensors = false;  // the tokenizer is all this needs
  const Model m = load_model_file(model, lo);
  const Tokenizer tok(m.tokenizer);
  const std::vector<int32_t> ids = tok.encode(prompt, add_bos, special);

  std::string out;
  if (ids_only) {
    out += '[';
    for (size_t i = 0; i < ids.size(); i++) out += (i ? ", " : "") + std::to_string(ids[i]);
    out += "]\n";
  } else {
    char head[32];
    for (int32_t id : ids) {
      std::snprintf(head, sizeof head, "%6d -> '", id);
      out += head;
      out += tok.token_to_piece(id, true);
      out += "'\n";
    }
  }
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
    if (errno == EPIPE) return 0;  // `| head`: the reader is gone, not an error
    fail(std::string("stdout: ") + std::strerror(errno));
  }
  return 0;
}
