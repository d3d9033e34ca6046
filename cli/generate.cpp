// knot generate — run a model locally and stream the continuation of a prompt.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "kernels/common.h"
#include "infer/draft_model.h"
#include "infer/generate.h"
#include "container/loader.h"
#include "infer/options.h"
#include "text/vocab.h"

int cmd_generate(int argc, char** argv) {
  bool stdout_closed = false;
  try {
    // The one option spec (core/infer/options.h) that the node CLI reads through wasm.
    int exit_code = 0;
    const nlohmann::json cl = parse_cli_or_usage("generate", argc, argv, &exit_code);
    if (cl.is_null()) return exit_code;
    const std::string path = cl["args"][0];
    const nlohmann::json& cli = cl["cli"];
    knot::RunOptions run;
    nlohmann::json options = cl["options"];
    // --grammar FILE / --json-schema FILE: their text, as the options object takes it
    if (cl["cli"].contains("grammar_file")) options["grammar"] = knot::read_file(cl["cli"]["grammar_file"]);
    if (cl["cli"].contains("json_schema_file")) options["json_schema"] = knot::read_file(cl["cli"]["json_schema_file"]);
    knot::apply_options(options, run);
    const knot::EngineOptions& eo = run.engine;
    const knot::GenerateParams& gp = run.gen;
    const bool ids_only = cli.value("ids", false), parse_special = cli.value("parse_special", true);
    const std::string prompt = cli.contains("prompt_file") ? knot::read_file(cli["prompt_file"]) : cli["prompt"].get<std::string>();

    knot::Model model = knot::load_model_file(path);
    if (eo.n_ctx > 0 && model.config.n_ctx_train > 0 && eo.n_ctx > model.config.n_ctx_train)
      std::fprintf(stderr, "knot: warning: --ctx %d is larger than the model's trained context (%d)\n", eo.n_ctx,
                   model.config.n_ctx_train);
    knot::Tokenizer tok(model.tokenizer);
    knot::Engine engine(model, eo);
    // --draft MODEL: its own Engine (own KV cache) with the target's context
    std::optional<knot::Model> draft_model;
    std::optional<knot::Engine> draft_engine;
    std::optional<knot::DraftModel> draft;
    if (cli.contains("draft")) {
      const std::string dpath = cli["draft"];
      draft_model.emplace(knot::load_model_file(dpath));
      knot::check_same_vocab(model.tokenizer, draft_model->tokenizer, path, dpath);
      knot::EngineOptions deo = eo;
      deo.n_ctx = engine.n_ctx();
      deo.kv_budget = SIZE_MAX;
      draft_engine.emplace(*draft_model, deo);
      draft.emplace(*draft_engine, cli.value("draft_n", 4), cli.value("draft_one_hot", false));
    }
    knot::DraftModel* dm = draft ? &*draft : nullptr;
    // BOS when the vocab asks for it (encode checks tokenizer.ggml.add_bos_token); special-token
    // text such as <|im_start|> becomes its token unless --no-special, as in llama.cpp's CLI
    const std::vector<int32_t> ids = tok.encode(prompt, true, parse_special);
    if (ids.empty()) knot::fail("the prompt encodes to no tokens and the vocab adds no BOS");

    knot::GenerateResult r;
    if (ids_only) {
      r = engine.generate(tok, ids, gp, {}, dm);
      std::string out = "[";
      for (size_t i = 0; i < r.ids.size(); i++) out += (i ? "," : "") + std::to_string(r.ids[i]);
      out += "]\n";
      if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) stdout_closed = true;
    } else {
      // a write error (EPIPE: `| head -c 20`, SIGPIPE ignored in main) stops generation
      r = engine.generate(tok, ids, gp, [&](const std::string& piece) {
        if (std::fwrite(piece.data(), 1, piece.size(), stdout) != piece.size() || std::fflush(stdout) != 0)
          stdout_closed = true;
        return !stdout_closed;
      }, dm);
      if (!stdout_closed) std::fputc('\n', stdout);
    }
    // text before the stats on a shared terminal
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) stdout_closed = true;
    // the reader went away: exit quietly with success, as coreutils do
    if (stdout_closed) return 0;
    const knot::Telemetry& t = engine.telemetry();
    std::fprintf(stderr,
                 "knot: %s mode (%s kernels, %s KV), ctx %d, chunk %d\n"
                 "knot: prefill %d tokens in %.3f s (%.1f tok/s)\n"
                 "knot: decode %d tokens in %.3f s (%.1f tok/s), stop: %s\n"
                 "knot: peak KV+activation memory %.2f MiB\n",
                 knot::mode_name(eo.mode), knot::kernel_name(engine.forward_options().kernel),
                 knot::kv_type_name(engine.forward_options().kv_type), engine.n_ctx(), eo.chunk,
                 t.n_prompt, t.prefill_s, t.prefill_tok_s(), std::max(0, t.n_generated - 1), t.decode_s,
                 t.decode_tok_s(), r.stop_reason.c_str(), t.peak_bytes / 1048576.0);
    if (dm)
      std::fprintf(stderr, "knot: speculative (draft %s, n %d): %d drafted, %d accepted (%.0f%%), %d forward passes for %d tokens, %d draft passes\n",
                   cli["draft"].get<std::string>().c_str(), dm->k(), t.n_drafted, t.n_accepted,
                   t.n_drafted ? 100.0 * t.n_accepted / t.n_drafted : 0.0, t.n_decoded, std::max(0, t.n_generated - 1),
                   dm->passes());
    else if (run.gen.lookup > 0)
      std::fprintf(stderr, "knot: speculative (lookup %d): %d drafted, %d accepted (%.0f%%), %d forward passes for %d tokens\n",
                   run.gen.lookup, t.n_drafted, t.n_accepted, t.n_drafted ? 100.0 * t.n_accepted / t.n_drafted : 0.0,
                   t.n_decoded, std::max(0, t.n_generated - 1));
    return 0;
  } catch (const knot::UsageError& e) {
    std::fprintf(stderr, "knot: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "knot: error: %s\n", e.what());
    return 1;
  }
}
