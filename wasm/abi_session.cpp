// abi_session.cpp — generation: sessions (an Engine: KV cache + buffers on a loaded
// model, stepped by the core Generator so JS can stream tokens between calls), bare
// Generators for a mesh coordinator (logits or merged shard top-k in, tokens out), and
// the shard top-k + log-sum-exp and its merge. Marshalling only: the loop is
// core/text/generator.h. The host measures time (no clock import).
//
//   kw_session_new(model, opts_json) -> handle     opts: see kw_session_new
//   kw_session_prefill(s, ids, n)                  resets, runs the prompt
//   kw_session_prefill_more(s, ids, n)             continues it (prompt fed in pieces,
//                                                  so a host can report progress)
//   kw_session_renew(s, opts, ids, n, n_keep)       a new generation keeping KV [0, n_keep)
//   kw_session_step(s)                              samples one token, runs it
//       result: JSON {"id", "done", "reason", "text_len"} + '\n' + text bytes
//   kw_session_eval(s, ids, n)                      raw: append ids, result = f32 logits
//   kw_session_embed(s, ids, n)                     result = f32 [n_embd] pooled embedding
//   kw_session_telemetry(s), kw_session_free(s)
//   kw_generator_new(model, opts_json) -> handle   same sampling opts + n_ctx
//   kw_generator_start(g, ids, n), kw_generator_step(g, logits, n),
//   kw_generator_step_topk(g, ids, n_ids, logits, n_logits, lse, min),
//   kw_generator_step_draft_topk(g, ids, n_ids, logits, n_logits, lse, min, draft)
//     (speculative verification of a drafted token: the step's result + "accepted"),
//   kw_generator_step_draft_q_topk(g, ..., draft, q_ids, q_p, n_q)  the same against the
//     distribution q a sampling draft was drawn from (min(1, p/q) / norm(max(0, p - q)))
//   kw_session_propose(s, g, hist, n, room)  session s as generator g's draft model: ids + q
//   kw_generator_allowed(g, ids, n)   how many of ids the grammar takes next (result {"allowed"})
//   kw_generator_stop(g, reason), kw_generator_free(g)
//   kw_topk_lse(logits, v0, v1, k), kw_topk_merge(ids, logits, sizes, stats, n_parts, k)
//   kw_draft_lookup(hist, n, k, ngram_max)   draft_lookup (ngram_max 0: its default); result i32 ids
//   kw_lookup_budget(k, outcomes, n)   LookupBudget from k through n passes (outcomes i32[2n]:
//     drafted, accepted); result i32 sizes[n + 1] (before each pass, then after the last)
//   (both the core's rules for bindings/generator.mjs's tests: tests/wasm/lookup-rule.test.mjs)
// Top-k lists cross as arrays in wasm memory, never JSON (two crossings per mesh token):
//   in:  ids i32[n], logits f32[n], lse and min as f64 (lse -inf: an empty slice, min
//        +inf: no finite logit; a NaN lse is refused)
//   out: the result buffer = f64 lse, f64 min, i32 ids[n], f32 logits[n]
//        (n = (kw_result_len() - 16) / 8)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "abi_model.h"
#include "container/json_limits.h"
#include "infer/generate.h"
#include "text/generator.h"
#include "infer/options.h"
#include "infer/draft_model.h"
#include "infer/speculative.h"
#include "text/sampler.h"

using json = nlohmann::json;
using namespace kw;

namespace kw {
namespace {

struct Session {
  int model = 0;
  const ModelEntry* m = nullptr;
  std::unique_ptr<knot::Engine> engine;
  knot::GenerateParams params;
  std::optional<knot::Generator> gen;
  std::optional<knot::DecodeLoop> loop;  // plain or speculative (params.lookup) decoding over engine + gen
  std::unique_ptr<knot::Engine> draft_engine;  // opts "draft_model": a draft model's own engine (own KV)
  std::optional<knot::DraftModel> draft;       // ... drafting "draft_n" tokens per pass instead of the lookup
  knot::DraftModel* drafter() { return draft ? &*draft : nullptr; }
  std::optional<knot::DraftModel> proposer;  // kw_session_propose: this session's engine as a draft model
  int proposer_checked = 0;                  // the generator whose vocabulary was checked against it
  std::vector<int32_t> prompt;
  bool prefilled = false;
  int logprobs = -1;          // >= 0: each step reports its token's logprob and the top k
};

Table<Session> g_sessions;

// Bare Generators on a model's tokenizer (no weights needed): a mesh coordinator's.
Table<Bound<knot::Generator>> g_generators;

Session& session(int h, const char* fn) { return g_sessions.get(h, fn); }

// Sampling options of a generator: the option table's keys and ranges
// (core/infer/options.h), as kw_session_new reads them.
knot::GenerateParams generate_params(const json& j) {
  knot::RunOptions run;
  knot::apply_options(j, run);
  return run.gen;
}

json options_object(const char* opts, uint32_t opts_len, const char* fn) {
  if (opts_len) knot::check_json_depth(str_arg(opts, opts_len), std::string(fn) + ": options");
  json j = opts_len ? json::parse(str_arg(opts, opts_len), nullptr, false) : json::object();
  if (j.is_discarded() || !j.is_object()) knot::fail(std::string(fn) + ": options are not a JSON object");
  return j;
}

// One step's result: JSON strings must be valid UTF-8, so the text goes as a binary tail.
// extra: more head fields (logprobs).
void set_step_result(const knot::GenStep& st, const json& extra = nullptr) {
  json head{{"id", st.id}, {"done", st.done}, {"reason", st.reason}, {"text_len", st.text.size()}};
  if (st.need_wider) head["need_wider"] = true;  // top-k step with a grammar: nothing sampled
  if (!extra.is_null()) head.update(extra);
  set_result(head.dump() + '\n' + st.text);
}

// The top-k result layout: f64 lse, f64 min, i32 ids[n], f32 logits[n].
void set_topk_result(const knot::SliceTopK& t) {
  const size_t n = t.ids.size();
  std::string b(16 + 8 * n, '\0');
  const double stats[2] = {t.lse, (double)t.min};
  std::memcpy(b.data(), stats, sizeof stats);
  if (n) {
    std::memcpy(b.data() + 16, t.ids.data(), 4 * n);
    std::memcpy(b.data() + 16 + 4 * n, t.logits.data(), 4 * n);
  }
  set_result(std::move(b));
}

// A top-k from caller arrays: ids [n_ids], logits [n_logits] (the same count), lse, min.
knot::SliceTopK topk_from_arrays(const int32_t* ids, int64_t n_ids, const float* logits, int64_t n_logits, double lse,
                                 double min, const std::string& what) {
  if (n_ids < 0 || n_logits < 0) knot::fail(what + ": negative top-k length");
  if (n_ids != n_logits)
    knot::fail(what + ": top-k has " + std::to_string(n_ids) + " ids but " + std::to_string(n_logits) + " logits");
  if (n_ids && (!ids || !logits)) knot::fail(what + ": null top-k buffer");
  if (std::isnan(lse)) knot::fail(what + ": top-k lse is not a number (-inf: an empty slice)");
  knot::SliceTopK t;
  t.ids.assign(ids, ids + n_ids);
  t.logits.assign(logits, logits + n_logits);
  t.lse = lse;
  t.min = std::isnan(min) ? INFINITY : (float)min;
  return t;
}

// The tokenizer of a model handle: a finished model's, or (mesh parts) built once from
// the header's vocabulary (GGUF) or the loaded tokenizer blob (.knot).
const knot::Tokenizer& tokenizer_of(ModelEntry& m, const char* fn) {
  if (!m.tok) {
    if (m.model.tokenizer.tokens.empty())
      knot::fail(std::string(fn) + ": " + m.what + ": no tokenizer loaded (load the \"tokenizer\" entry first)");
    m.tok = std::make_unique<knot::Tokenizer>(m.model.tokenizer);
  }
  return *m.tok;
}

}  // namespace

void free_sessions_of(int model_handle) {
  g_sessions.remove_if([&](const Session& s) { return s.model == model_handle; });
  g_generators.remove_if([&](const Bound<knot::Generator>& g) { return g.model == model_handle; });
}

void refuse_if_sessions(int model_handle, const ModelEntry& m, const char* fn, const std::string& what) {
  const size_t n = g_sessions.count_if([&](const Session& s) { return s.model == model_handle; });
  if (n)
    knot::fail(std::string(fn) + ": " + m.what + ": " + what + " is in use by " + std::to_string(n) +
               " live session(s); their weights must not change under them. Free the sessions first, or load "
               "the rows into a model handle of their own");
}

}  // namespace kw

// opts (all optional): {"mode": "fast"|"reference", "n_ctx", "chunk", "kv_budget",
//  "n_predict", "temperature", "top_k", "top_p", "min_p", "repeat_penalty",
//  "repeat_last_n", "presence_penalty", "frequency_penalty", "seed", "stop": [..],
//  "ignore_eos", "logprobs": k (0..20: each step's head carries "logprob", the sampled
//  token's log-probability under the model's raw distribution, and "top": [[id, logprob]
//  x k], the k most likely tokens; -1 or absent: off)}: the option table's keys
//  and ranges (core/infer/options.h); a bad one is KW_ERR_USAGE
KW_EXPORT(kw_session_new)
int kw_session_new(int32_t model, const char* opts, uint32_t opts_len, int32_t* out_handle) {
  return guard([&] {
    *out_handle = 0;
    ModelEntry& m = ready_model(model, "kw_session_new");
    if (m.text_only)
      knot::fail("kw_session_new: model " + m.what + " holds no tensors (kw_model_text_finish): sample with kw_generator_new");
    json j = options_object(opts, opts_len, "kw_session_new");
    // "draft_model": the handle of a loaded model with the same vocabulary (speculative
    // decoding with a draft model, infer/draft_model.h); "draft_n": its tokens per pass
    // "draft_one_hot": the draft proposes its argmax also when sampling (one-hot drafts)
    int draft_model = 0, draft_n = 4;
    bool draft_one_hot = false;
    if (j.contains("draft_one_hot")) {
      if (!j["draft_one_hot"].is_boolean()) knot::fail("kw_session_new: draft_one_hot must be a boolean");
      draft_one_hot = j["draft_one_hot"].get<bool>();
      j.erase("draft_one_hot");
    }
    if (j.contains("draft_model")) {
      if (!j["draft_model"].is_number_integer()) knot::fail("kw_session_new: draft_model must be a model handle");
      draft_model = j["draft_model"].get<int>();
      j.erase("draft_model");
    }
    if (j.contains("draft_n")) {
      if (!j["draft_n"].is_number_integer()) knot::fail("kw_session_new: draft_n must be an integer in 1..64");
      draft_n = j["draft_n"].get<int>();
      j.erase("draft_n");
    }
    // keys, kinds and ranges: the option table of core/infer/options.h (a bad one: KW_ERR_USAGE)
    knot::RunOptions run;
    knot::apply_options(j, run);
    const knot::EngineOptions& eo = run.engine;
    auto s = std::make_unique<Session>();
    s->model = model;
    s->m = &m;
    s->params = run.gen;
    s->logprobs = run.logprobs;
    // The KV cache must fit in what is left of the 128 MB linear memory. Checked here in
    // 64-bit arithmetic: size_t is 32 bits in wasm32, so n_ctx x bytes/token can wrap.
    const auto& c = m.model.config;
    const int n_ctx = knot::context_of(c, eo.n_ctx);  // what the Engine will take
    const knot::KvType kvt = knot::forward_options_for(eo.mode).kv_type;
    const uint64_t per_tok = 2ull * c.n_layer * c.n_head_kv * c.head_dim * knot::kv_elem_bytes(kvt);
    const uint64_t room = kLinearCap - std::min<uint64_t>(kLinearCap, heap_in_use());
    const uint64_t limit = room;  // a smaller kv_budget: the Engine's KV cache refuses it, naming both numbers
    if (per_tok * (uint64_t)n_ctx > limit)
      knot::fail("kw_session_new: a context of " + std::to_string(n_ctx) + " tokens needs " +
                 std::to_string(per_tok * (uint64_t)n_ctx) + " bytes of " + knot::kv_type_name(kvt) +
                 " KV cache (" + std::to_string(per_tok) + " bytes/token) but only " + std::to_string(limit) +
                 " bytes are available under the 128 MB wasm memory cap");
    if (draft_model) {
      // The draft's engine (its KV cache for the same context and its buffers) and its
      // proposals' distributions (draft_n x the vocabulary at most) must fit beside the
      // target's engine and its verify rows: refused, naming the draft, before either is built.
      ModelEntry& dm = ready_model(draft_model, "kw_session_new");
      if (dm.text_only) knot::fail("kw_session_new: draft model " + dm.what + " holds no tensors");
      knot::check_same_vocab(m.model.tokenizer, dm.model.tokenizer, m.what, dm.what);
      if (draft_n < 1 || draft_n > 64) knot::fail("draft_n must be in 1..64, got " + std::to_string(draft_n));
      knot::EngineOptions deo = eo;
      deo.n_ctx = n_ctx;
      deo.kv_budget = SIZE_MAX;
      const auto& dc = dm.model.config;
      const uint64_t target = knot::engine_bytes(c, eo, draft_n + 1);
      const uint64_t dkv = 2ull * n_ctx * dc.n_layer * dc.n_head_kv * dc.head_dim * knot::kv_elem_bytes(kvt);
      const uint64_t dall = knot::engine_bytes(dc, deo) + (uint64_t)draft_n * std::max(0, dc.n_vocab) * 12;
      if (target + dall > limit)
        knot::fail("kw_session_new: draft model " + dm.what + " does not fit: its engine needs " + std::to_string(dall) +
                   " bytes (" + std::to_string(dkv) + " bytes of " + knot::kv_type_name(kvt) + " KV cache for " +
                   std::to_string(n_ctx) + " positions + " + std::to_string(dall - dkv) +
                   " bytes of buffers and proposal distributions) beside the target's " + std::to_string(target) +
                   " bytes, but only " + std::to_string(limit) + " bytes are available under the 128 MB wasm memory cap");
    }
    s->engine = std::make_unique<knot::Engine>(m.model, eo);
    if (draft_model) {
      ModelEntry& dm = ready_model(draft_model, "kw_session_new");
      knot::EngineOptions deo = eo;
      deo.n_ctx = s->engine->n_ctx();
      deo.kv_budget = SIZE_MAX;
      s->draft_engine = std::make_unique<knot::Engine>(dm.model, deo);
      s->draft.emplace(*s->draft_engine, draft_n, draft_one_hot);
    }
    *out_handle = g_sessions.add(std::move(s));
    const int ctx = g_sessions.get(*out_handle, "").engine->n_ctx();
    set_result(json{{"n_ctx", ctx}, {"chunk", std::max(1, std::min(eo.chunk, ctx))},  // as the Engine clamps it
                    {"mode", knot::mode_name(eo.mode)}}.dump());
  });
}

KW_EXPORT(kw_session_prefill)
int kw_session_prefill(int32_t h, const int32_t* ids, uint32_t n) {
  return guard([&] {
    Session& s = session(h, "kw_session_prefill");
    if (n == 0) knot::fail("kw_session_prefill: empty prompt (at least BOS is needed)");
    if ((int64_t)n > s.engine->n_ctx())
      knot::fail("kw_session_prefill: prompt has " + std::to_string(n) + " tokens but the context holds " +
                 std::to_string(s.engine->n_ctx()));
    s.engine->reset();
    s.prefilled = false;
    s.gen.emplace(*s.m->tok, s.params, s.engine->n_logits(), s.engine->n_ctx());
    s.gen->start(ids, (int)n);
    s.prompt.assign(ids, ids + n);
    s.loop.emplace(*s.engine, *s.gen, s.params.lookup, s.drafter());
    s.loop->begin(s.prompt, s.engine->eval(ids, (int)n));
    if (s.draft) s.draft->prime(s.prompt);
    s.prefilled = true;
  });
}

// A new generation on a session that keeps its KV positions [0, n_keep): the caller's ids
// [0, n_keep) are those positions' tokens (the previous prompt and generated tokens: prefix
// reuse). Sampling options as kw_session_new's (engine options are the session's: refused);
// the positions from n_keep are dropped, ids [n_keep, n) are fed, and the generation starts
// as kw_session_prefill's over the whole prompt ids [0, n) (penalties see all of it).
KW_EXPORT(kw_session_renew)
int kw_session_renew(int32_t h, const char* opts, uint32_t opts_len, const int32_t* ids, uint32_t n, uint32_t n_keep) {
  return guard([&] {
    Session& s = session(h, "kw_session_renew");
    json j = options_object(opts, opts_len, "kw_session_renew");
    for (const char* k : {"mode", "n_ctx", "chunk", "kv_budget"})
      if (j.contains(k)) knot::fail(std::string("kw_session_renew: ") + k + " is the session's (set by kw_session_new)");
    if (n_keep >= n) knot::fail("kw_session_renew: keeps " + std::to_string(n_keep) + " of " + std::to_string(n) + " prompt ids; at least one must be fed");
    if ((int64_t)n_keep > s.engine->n_pos())
      knot::fail("kw_session_renew: keeps " + std::to_string(n_keep) + " positions, the session holds " + std::to_string(s.engine->n_pos()));
    if ((int64_t)n > s.engine->n_ctx())
      knot::fail("kw_session_renew: prompt has " + std::to_string(n) + " tokens but the context holds " + std::to_string(s.engine->n_ctx()));
    knot::RunOptions run;
    knot::apply_options(j, run);
    s.params = run.gen;
    s.logprobs = run.logprobs;
    s.engine->truncate((int)n_keep);
    s.prefilled = false;
    s.gen.emplace(*s.m->tok, s.params, s.engine->n_logits(), s.engine->n_ctx());
    s.gen->start(ids, (int)n);
    s.prompt.assign(ids, ids + n);
    s.loop.emplace(*s.engine, *s.gen, s.params.lookup, s.drafter());
    s.loop->begin(s.prompt, s.engine->eval(ids + n_keep, (int)(n - n_keep)));
    s.prefilled = true;
  });
}

KW_EXPORT(kw_session_prefill_more)
int kw_session_prefill_more(int32_t h, const int32_t* ids, uint32_t n) {
  return guard([&] {
    Session& s = session(h, "kw_session_prefill_more");
    if (!s.prefilled || s.gen->n_generated() > 0)
      knot::fail("kw_session_prefill_more: call kw_session_prefill first, before any step");
    if (n == 0) return;
    if ((int64_t)s.engine->n_pos() + n > s.engine->n_ctx())
      knot::fail("kw_session_prefill_more: prompt has " + std::to_string(s.engine->n_pos() + (int64_t)n) +
                 " tokens but the context holds " + std::to_string(s.engine->n_ctx()));
    s.prefilled = false;
    const float* lg = s.engine->eval(ids, (int)n);
    s.gen->extend_prompt(ids, (int)n);
    s.prompt.insert(s.prompt.end(), ids, ids + n);
    s.loop->begin(s.prompt, lg);
    s.prefilled = true;
  });
}

KW_EXPORT(kw_session_step)
int kw_session_step(int32_t h) {
  return guard([&] {
    Session& s = session(h, "kw_session_step");
    if (!s.prefilled) knot::fail("kw_session_step: call kw_session_prefill first");
    if (s.gen->done()) knot::fail("kw_session_step: generation already finished (" + s.gen->reason() + ")");
    const knot::DecodeLoop::Next nx = s.loop->next();  // the forward pass(es) the previous token needs, then a sample
    const knot::GenStep& st = nx.step;
    json lp;  // logprobs of this position (the logits it was sampled from)
    if (s.logprobs >= 0) {
      const knot::SliceTopK top = knot::topk_lse(nx.logits, 0, s.engine->n_logits(), s.logprobs);
      json arr = json::array();
      for (size_t k = 0; k < top.ids.size(); k++) arr.push_back({top.ids[k], (double)top.logits[k] - top.lse});
      lp = json{{"logprob", (double)nx.logits[st.id] - top.lse}, {"top", std::move(arr)}};
    }
    if (s.params.lookup > 0 || s.draft) {
      if (lp.is_null()) lp = json::object();
      lp["drafted"] = s.loop->drafted();
      lp["accepted"] = s.loop->accepted();
    }
    set_step_result(st, lp);
  });
}

// Raw forward: append ids at the session's next positions; result = f32 logits of the
// last one, [n_logits].
KW_EXPORT(kw_session_eval)
int kw_session_eval(int32_t h, const int32_t* ids, uint32_t n) {
  return guard([&] {
    Session& s = session(h, "kw_session_eval");
    if (n == 0) knot::fail("kw_session_eval: no ids");
    const float* lg = s.engine->eval(ids, (int)n);
    set_result_bytes(lg, sizeof(float) * s.engine->n_logits());
  });
}

// An embedding (knot::Engine::embed): the session is reset and runs ids from position 0;
// result = f32 [n_embd], mean-pooled final normed hidden states, L2-normalised.
KW_EXPORT(kw_session_embed)
int kw_session_embed(int32_t h, const int32_t* ids, uint32_t n) {
  return guard([&] {
    Session& s = session(h, "kw_session_embed");
    if (n == 0) knot::fail("kw_session_embed: no ids");
    s.prefilled = false;
    const float* v = s.engine->embed(ids, (int)n);
    set_result_bytes(v, sizeof(float) * s.engine->config().n_embd);
  });
}

KW_EXPORT(kw_session_reset)
int kw_session_reset(int32_t h, int32_t n_pos) {
  return guard([&] {
    Session& s = session(h, "kw_session_reset");
    if (n_pos < 0 || n_pos > s.engine->n_pos()) knot::fail("kw_session_reset: n_pos out of range");
    s.engine->truncate(n_pos);
    s.prefilled = false;
  });
}

KW_EXPORT(kw_session_telemetry)
int kw_session_telemetry(int32_t h) {
  return guard([&] {
    Session& s = session(h, "kw_session_telemetry");
    const knot::Engine& e = *s.engine;
    set_result(json{{"n_pos", e.n_pos()},
                    {"n_ctx", e.n_ctx()},
                    {"n_generated", s.gen ? s.gen->n_generated() : 0},
                    {"done", s.gen && s.gen->done()},
                    {"reason", s.gen ? s.gen->reason() : std::string()},
                    {"engine_bytes", e.bytes()},
                    {"engine_peak_bytes", e.peak_bytes()},
                    {"kv_bytes", e.kv().bytes()}}.dump());
  });
}

KW_EXPORT(kw_session_free)
int kw_session_free(int32_t h) {
  return guard([&] {
    if (!g_sessions.remove(h)) throw HandleError("kw_session_free: unknown or freed handle " + std::to_string(h));
  });
}

// ---- generators (a mesh coordinator's sampling loop) -------------------------------------

// opts: the sampling keys of kw_session_new, plus "n_ctx" (positions the mesh's KV holds;
// 0: no limit). The model needs its tokenizer only (kw_model_finish, kw_model_text_finish,
// or the .knot "tokenizer" entry loaded, or a GGUF header).
// result: the resolved settings, so a caller can size the shards' top-k (see
// workers/coordinator/mesh.mjs): {"n_vocab", "n_ctx", "n_predict", "temperature", "top_k",
// "top_p", "min_p", "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty",
// "grammar" (true: a grammar or JSON schema constrains the output)}
KW_EXPORT(kw_generator_new)
int kw_generator_new(int32_t model, const char* opts, uint32_t opts_len, int32_t* out_handle) {
  return guard([&] {
    *out_handle = 0;
    ModelEntry& m = g_models.get(model, "kw_generator_new");
    json j = options_object(opts, opts_len, "kw_generator_new");
    // n_ctx: positions the mesh's KV holds; here 0 is allowed (no limit)
    const json nc = j.value("n_ctx", json(0));
    if (!nc.is_number_integer() || nc.get<int64_t>() < 0 || nc.get<int64_t>() > (1 << 20))
      knot::usage_fail("kw_generator_new: n_ctx must be an integer in [0, 1048576], got " + nc.dump());
    const int n_ctx = nc.get<int>();
    j.erase("n_ctx");
    const knot::GenerateParams p = generate_params(j);
    const knot::Tokenizer& tok = tokenizer_of(m, "kw_generator_new");
    const int n_vocab = m.model.config.n_vocab > 0 ? m.model.config.n_vocab : (int)m.model.tokenizer.tokens.size();
    auto g = std::make_unique<Bound<knot::Generator>>();
    g->model = model;
    g->obj = std::make_unique<knot::Generator>(tok, p, n_vocab, n_ctx);
    *out_handle = g_generators.add(std::move(g));
    const knot::SamplerParams& s = p.sampling;
    set_result(json{{"n_vocab", n_vocab}, {"n_ctx", n_ctx}, {"n_predict", p.n_predict}, {"temperature", s.temperature},
                    {"top_k", s.top_k}, {"top_p", s.top_p}, {"min_p", s.min_p}, {"repeat_penalty", s.repeat_penalty},
                    {"repeat_last_n", s.repeat_last_n}, {"presence_penalty", s.presence_penalty},
                    {"frequency_penalty", s.frequency_penalty}, {"grammar", !p.grammar.empty()}}.dump());
  });
}

// result {"done", "reason"} (done at once when n_predict is 0)
KW_EXPORT(kw_generator_start)
int kw_generator_start(int32_t h, const int32_t* ids, uint32_t n) {
  return guard([&] {
    knot::Generator& g = *g_generators.get(h, "kw_generator_start").obj;
    g.start(ids, (int)n);
    set_result(json{{"done", g.done()}, {"reason", g.reason()}}.dump());
  });
}

// From the full logits of the last position: [n >= n_vocab]. Result as kw_session_step.
KW_EXPORT(kw_generator_step)
int kw_generator_step(int32_t h, const float* logits, uint32_t n) {
  return guard([&] {
    knot::Generator& g = *g_generators.get(h, "kw_generator_step").obj;
    if (!logits) knot::fail("kw_generator_step: null logits buffer");
    set_step_result(g.step(logits, (int)n));
  });
}

// From a merged shard top-k (arrays, see the header). Result as kw_session_step.
KW_EXPORT(kw_generator_step_topk)
int kw_generator_step_topk(int32_t h, const int32_t* ids, int32_t n_ids, const float* logits, int32_t n_logits,
                           double lse, double min) {
  return guard([&] {
    knot::Generator& g = *g_generators.get(h, "kw_generator_step_topk").obj;
    set_step_result(g.step(topk_from_arrays(ids, n_ids, logits, n_logits, lse, min, "kw_generator_step_topk")));
  });
}

// Verify a drafted token against a merged shard top-k (Generator::step_draft): result as
// kw_generator_step_topk plus "accepted" (the step's id is the draft).
KW_EXPORT(kw_generator_step_draft_topk)
int kw_generator_step_draft_topk(int32_t h, const int32_t* ids, int32_t n_ids, const float* logits, int32_t n_logits,
                                 double lse, double min, int32_t draft) {
  return guard([&] {
    knot::Generator& g = *g_generators.get(h, "kw_generator_step_draft_topk").obj;
    bool accepted = false;
    const knot::GenStep st = g.step_draft(topk_from_arrays(ids, n_ids, logits, n_logits, lse, min, "kw_generator_step_draft_topk"),
                                          draft, &accepted);
    set_step_result(st, json{{"accepted", accepted}});
  });
}

// The same with the distribution q the draft was drawn from (a sampling draft: ids i32[n_q],
// probabilities f64[n_q], as kw_session_propose gives them): kept with probability
// min(1, p/q), else a token drawn from norm(max(0, p - q)) (Sampler::sample_draft).
KW_EXPORT(kw_generator_step_draft_q_topk)
int kw_generator_step_draft_q_topk(int32_t h, const int32_t* ids, int32_t n_ids, const float* logits, int32_t n_logits,
                                   double lse, double min, int32_t draft, const int32_t* q_ids, const double* q_p,
                                   int32_t n_q) {
  return guard([&] {
    knot::Generator& g = *g_generators.get(h, "kw_generator_step_draft_q_topk").obj;
    if (n_q < 1 || !q_ids || !q_p) knot::fail("kw_generator_step_draft_q_topk: empty draft distribution (n_q " + std::to_string(n_q) + ")");
    knot::Sampler::Dist q;
    q.ids.assign(q_ids, q_ids + n_q);
    q.p.assign(q_p, q_p + n_q);
    for (int32_t i = 0; i < n_q; i++)
      if (!(q.p[i] >= 0) || !std::isfinite(q.p[i]))
        knot::fail("kw_generator_step_draft_q_topk: draft probability " + std::to_string(i) + " is not a finite number >= 0");
    bool accepted = false;
    const knot::GenStep st = g.step_draft(topk_from_arrays(ids, n_ids, logits, n_logits, lse, min, "kw_generator_step_draft_q_topk"),
                                          draft, &accepted, &q);
    set_step_result(st, json{{"accepted", accepted}});
  });
}

// A session as the draft model of a generator (a mesh coordinator's): up to room tokens
// after hist from the session's model (DraftModel over its engine: its KV kept in step with
// hist), drawn as generator g samples (its chain, grammar and seeded RNG; g = 0 or a greedy
// generator: the argmax). Result (all f64, so it is one Float64Array):
//   n, then per token: id, q(id), m, then m pairs (id, p): the distribution q the token was
//   drawn from (m = 0: one-hot at id, q(id) = 1).
KW_EXPORT(kw_session_propose)
int kw_session_propose(int32_t h, int32_t g, const int32_t* ids, uint32_t n, int32_t room) {
  return guard([&] {
    Session& s = session(h, "kw_session_propose");
    if (n == 0 || !ids) knot::fail("kw_session_propose: empty history (at least the last token is needed)");
    knot::Generator* gen = nullptr;
    if (g) {
      Bound<knot::Generator>& b = g_generators.get(g, "kw_session_propose");
      if (s.proposer_checked != g) {
        ModelEntry& gm = g_models.get(b.model, "kw_session_propose");
        knot::check_same_vocab(gm.model.tokenizer, s.m->model.tokenizer, gm.what, s.m->what);
        s.proposer_checked = g;
      }
      gen = b.obj.get();
    }
    if (!s.proposer) s.proposer.emplace(*s.engine, 64);
    std::vector<knot::Sampler::Dist> q;
    const std::vector<int32_t> out = s.proposer->propose(std::vector<int32_t>(ids, ids + n), std::min(room, 64), gen, &q);
    set_proposal_result(out, q);
  });
}

namespace kw {
knot::Generator* generator_arg(int32_t g, const char* fn) { return g ? g_generators.get(g, fn).obj.get() : nullptr; }

void set_proposal_result(const std::vector<int32_t>& ids, const std::vector<knot::Sampler::Dist>& q) {
  std::vector<double> r{(double)ids.size()};
  for (size_t i = 0; i < ids.size(); i++) {
    const knot::Sampler::Dist* d = i < q.size() ? &q[i] : nullptr;
    r.push_back(ids[i]);
    r.push_back(d ? d->at(ids[i]) : 1.0);
    r.push_back(d ? (double)d->ids.size() : 0.0);
    if (d)
      for (size_t k = 0; k < d->ids.size(); k++) r.push_back(d->ids[k]), r.push_back(d->p[k]);
  }
  set_result_bytes(r.data(), sizeof(double) * r.size());
}
}  // namespace kw

// How many of ids[0..n) the grammar would take next (Generator::allowed; every id without a
// grammar): a mesh coordinator widens its shards' top-k until the merged list holds as many
// allowed tokens as the sampler keeps. result {"allowed": count}
KW_EXPORT(kw_generator_allowed)
int kw_generator_allowed(int32_t h, const int32_t* ids, uint32_t n) {
  return guard([&] {
    const knot::Generator& g = *g_generators.get(h, "kw_generator_allowed").obj;
    if (n && !ids) knot::fail("kw_generator_allowed: null ids buffer");
    uint32_t count = 0;
    for (uint32_t i = 0; i < n; i++) count += g.allowed(ids[i]) ? 1 : 0;
    set_result(json{{"allowed", count}}.dump());
  });
}

KW_EXPORT(kw_generator_stop)
int kw_generator_stop(int32_t h, const char* reason, uint32_t len) {
  return guard([&] {
    knot::Generator& g = *g_generators.get(h, "kw_generator_stop").obj;
    g.stop(len ? std::string(str_arg(reason, len)) : std::string("callback"));
  });
}

KW_EXPORT(kw_generator_free)
int kw_generator_free(int32_t h) {
  return guard([&] {
    if (!g_generators.remove(h)) throw HandleError("kw_generator_free: unknown or freed handle " + std::to_string(h));
  });
}

// ---- shard top-k -------------------------------------------------------------------------

// A slice's top-k (absolute ids, best first), log-sum-exp and lowest finite logit, for
// exact merged sampling. logits: [v1-v0]. result: the top-k layout (see the header)
KW_EXPORT(kw_topk_lse)
int kw_topk_lse(const float* logits, int32_t v0, int32_t v1, int32_t k) {
  return guard([&] {
    if (!logits) knot::fail("kw_topk_lse: null logits buffer");
    if (v1 < v0) knot::fail("kw_topk_lse: empty or reversed slice [" + std::to_string(v0) + "," + std::to_string(v1) + ")");
    set_topk_result(knot::topk_lse(logits, v0, v1, k));
  });
}

// The prompt-lookup rules (infer/speculative.h), so the JS copies can be checked against them.
KW_EXPORT(kw_draft_lookup)
int kw_draft_lookup(const int32_t* hist, uint32_t n, int32_t k, int32_t ngram_max) {
  return guard([&] {
    if (n && !hist) knot::fail("kw_draft_lookup: null hist buffer");
    if (ngram_max < 0) knot::fail("kw_draft_lookup: ngram_max must be >= 0, got " + std::to_string(ngram_max));
    const std::vector<int32_t> h(hist, hist + n);
    const auto d = ngram_max ? knot::draft_lookup(h, k, ngram_max) : knot::draft_lookup(h, k);
    set_result_bytes(d.data(), sizeof(int32_t) * d.size());
  });
}

KW_EXPORT(kw_lookup_budget)
int kw_lookup_budget(int32_t k, const int32_t* outcomes, uint32_t n) {
  return guard([&] {
    if (k < 0) knot::fail("kw_lookup_budget: k must be >= 0, got " + std::to_string(k));
    if (n && !outcomes) knot::fail("kw_lookup_budget: null outcomes buffer");
    knot::LookupBudget b(k);
    std::vector<int32_t> sizes{b.size()};
    for (uint32_t i = 0; i < n; i++) {
      b.update(outcomes[2 * i], outcomes[2 * i + 1]);
      sizes.push_back(b.size());
    }
    set_result_bytes(sizes.data(), sizeof(int32_t) * sizes.size());
  });
}

// n_parts top-k lists of disjoint slices, end to end: part i has sizes[2i] ids and
// sizes[2i+1] logits (the same count), taken in order from ids and logits, and
// stats[2i], stats[2i+1] = its lse and min. result: the merged top-k layout.
KW_EXPORT(kw_topk_merge)
int kw_topk_merge(const int32_t* ids, const float* logits, const int32_t* sizes, const double* stats, int32_t n_parts,
                  int32_t k) {
  return guard([&] {
    if (n_parts < 0) knot::fail("kw_topk_merge: negative part count " + std::to_string(n_parts));
    if (n_parts && (!sizes || !stats)) knot::fail("kw_topk_merge: null sizes or stats buffer");
    std::vector<knot::SliceTopK> ps;
    int64_t at_id = 0, at_logit = 0;
    for (int32_t i = 0; i < n_parts; i++) {
      ps.push_back(topk_from_arrays(ids + at_id, sizes[2 * i], logits + at_logit, sizes[2 * i + 1], stats[2 * i],
                                    stats[2 * i + 1], "kw_topk_merge: part " + std::to_string(i)));
      at_id += sizes[2 * i];
      at_logit += sizes[2 * i + 1];
    }
    set_topk_result(knot::merge_topk(ps, k));
  });
}
