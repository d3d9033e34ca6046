// abi_session.cpp — generation sessions: an Engine (KV cache + buffers) on a loaded
// model plus the sampling loop of Engine::generate, cut into steps so JS can stream
// tokens (an async iterator) between calls. The host measures time (no clock import).
//
//   kw_session_new(model, opts_json) -> handle     opts: see parse_options()
//   kw_session_prefill(s, ids, n)                  resets, runs the prompt
//   kw_session_prefill_more(s, ids, n)             continues it (prompt fed in pieces,
//                                                  so a host can report progress)
//   kw_session_step(s)                              samples one token, runs it
//       result {"id", "text", "done", "reason"}    text: complete UTF-8 only
//   kw_session_eval(s, ids, n)                      raw: append ids, result = f32 logits
//   kw_session_telemetry(s), kw_session_free(s)
#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "abi_model.h"
#include "infer/generate.h"
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
  std::optional<knot::Sampler> sampler;
  std::optional<knot::StreamDecoder> dec;
  const float* lg = nullptr;  // logits of the last evaluated position
  std::string text;           // all generated text
  size_t emitted = 0;         // bytes of text handed out
  size_t max_stop = 0;
  int i = 0;                  // tokens sampled
  bool prefilled = false, done = false;
  std::string reason;
  std::vector<int32_t> ids;   // generated
  int logprobs = -1;          // >= 0: each step reports its token's logprob and the top k
  // external logits (mesh coordinator): no engine; logits come from kw_session_set_logits
  bool external = false;
  int ext_n_ctx = 0, ext_n_pos = 0, ext_n_logits = 0;
  std::vector<float> ext_lg;
  int n_logits() const { return external ? ext_n_logits : engine->n_logits(); }
  int n_ctx() const { return external ? ext_n_ctx : engine->n_ctx(); }
  int n_pos() const { return external ? ext_n_pos : engine->n_pos(); }
};

Table<Session> g_sessions;

// Longest suffix of text that is a proper prefix of a stop string: held back until
// the next token decides whether the stop string completes.
size_t stop_holdback(const std::string& text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const auto& s : stops) {
    if (s.empty()) continue;
    for (size_t n = std::min(s.size() - 1, text.size()); n > best; n--)
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        best = n;
        break;
      }
  }
  return best;
}

template <class T>
void opt(const json& j, const char* key, T& dst) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  try {
    dst = it->get<T>();
  } catch (const std::exception&) {
    knot::fail(std::string("session options: \"") + key + "\" has the wrong type: " + it->dump());
  }
}

Session& session(int h, const char* fn) { return g_sessions.get(h, fn); }

}  // namespace

void free_sessions_of(int model_handle) {
  g_sessions.remove_if([&](const Session& s) { return s.model == model_handle; });
}

}  // namespace kw

// opts (all optional): {"mode": "fast"|"reference", "n_ctx", "chunk", "kv_budget",
//  "n_predict", "temperature", "top_k", "top_p", "min_p", "repeat_penalty",
//  "repeat_last_n", "presence_penalty", "frequency_penalty", "seed", "stop": [..],
//  "ignore_eos", "logprobs": k (0..20: each step's head carries "logprob", the sampled
//  token's log-probability under the model's raw distribution, and "top": [[id, logprob]
//  x k], the k most likely tokens; absent or < 0: off)}
KW_EXPORT(kw_session_new)
int kw_session_new(int32_t model, const char* opts, uint32_t opts_len, int32_t* out_handle) {
  return guard([&] {
    *out_handle = 0;
    ModelEntry& m = ready_model(model, "kw_session_new");
    json j = opts_len ? json::parse(str_arg(opts, opts_len), nullptr, false) : json::object();
    if (j.is_discarded() || !j.is_object()) knot::fail("kw_session_new: options are not a JSON object");
    knot::EngineOptions eo;
    std::string mode = "fast";
    opt(j, "mode", mode);
    if (mode == "reference") eo.mode = knot::Mode::Reference;
    else if (mode != "fast") knot::fail("kw_session_new: mode must be \"fast\" or \"reference\", got \"" + mode + "\"");
    opt(j, "n_ctx", eo.n_ctx);
    opt(j, "chunk", eo.chunk);
    double budget = 0;
    opt(j, "kv_budget", budget);
    if (budget > 0) eo.kv_budget = (size_t)budget;
    auto s = std::make_unique<Session>();
    s->model = model;
    s->m = &m;
    opt(j, "external", s->external);
    if (m.text_only && !s->external)
      knot::fail("kw_session_new: model " + m.what + " holds no tensors (kw_model_text_finish): only an external-logits session");
    knot::GenerateParams& p = s->params;
    opt(j, "n_predict", p.n_predict);
    opt(j, "temperature", p.sampling.temperature);
    opt(j, "top_k", p.sampling.top_k);
    opt(j, "top_p", p.sampling.top_p);
    opt(j, "min_p", p.sampling.min_p);
    opt(j, "repeat_penalty", p.sampling.repeat_penalty);
    opt(j, "repeat_last_n", p.sampling.repeat_last_n);
    opt(j, "presence_penalty", p.sampling.presence_penalty);
    opt(j, "frequency_penalty", p.sampling.frequency_penalty);
    opt(j, "logprobs", s->logprobs);
    if (s->logprobs > 20) knot::fail("kw_session_new: logprobs must be at most 20, got " + std::to_string(s->logprobs));
    double seed = 0;
    opt(j, "seed", seed);
    if (seed < 0) knot::fail("kw_session_new: seed must be >= 0");
    p.sampling.seed = (uint64_t)seed;
    opt(j, "stop", p.stop);
    opt(j, "ignore_eos", p.ignore_eos);
    if (p.n_predict < 0) knot::fail("kw_session_new: n_predict must be >= 0");
    for (const auto& st : p.stop) s->max_stop = std::max(s->max_stop, st.size());
    // The KV cache must fit in what is left of the 128 MB linear memory. Checked here in
    // 64-bit arithmetic: size_t is 32 bits in wasm32, so n_ctx x bytes/token can wrap.
    const auto& c = m.model.config;
    if (s->external) {
      s->ext_n_ctx = eo.n_ctx > 0 ? eo.n_ctx : (c.n_ctx_train > 0 ? std::min(c.n_ctx_train, 2048) : 2048);
      s->ext_n_logits = (int)c.n_vocab;
      *out_handle = g_sessions.add(std::move(s));
      set_result(json{{"n_ctx", g_sessions.get(*out_handle, "").ext_n_ctx}, {"mode", "external"}}.dump());
      return;
    }
    const int n_ctx = eo.n_ctx > 0 ? eo.n_ctx : (c.n_ctx_train > 0 ? std::min(c.n_ctx_train, 2048) : 2048);
    const knot::KvType kvt = knot::forward_options_for(eo.mode).kv_type;
    const uint64_t per_tok = 2ull * c.n_layer * c.n_head_kv * c.head_dim * knot::kv_elem_bytes(kvt);
    const uint64_t room = kLinearCap - std::min<uint64_t>(kLinearCap, heap_in_use());
    const uint64_t limit = eo.kv_budget != SIZE_MAX ? std::min<uint64_t>(eo.kv_budget, room) : room;
    if (per_tok * (uint64_t)n_ctx > limit)
      knot::fail("kw_session_new: a context of " + std::to_string(n_ctx) + " tokens needs " +
                 std::to_string(per_tok * (uint64_t)n_ctx) + " bytes of " + knot::kv_type_name(kvt) +
                 " KV cache (" + std::to_string(per_tok) + " bytes/token) but only " + std::to_string(limit) +
                 " bytes are available under the 128 MB wasm memory cap");
    s->engine = std::make_unique<knot::Engine>(m.model, eo);
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
    if ((int64_t)n > s.n_ctx())
      knot::fail("kw_session_prefill: prompt has " + std::to_string(n) + " tokens but the context holds " +
                 std::to_string(s.n_ctx()));
    if (!s.external) s.engine->reset();
    s.sampler.emplace(s.params.sampling, s.n_logits());
    for (uint32_t k = 0; k < n; k++) s.sampler->accept(ids[k]);
    s.dec.emplace(*s.m->tok);
    s.text.clear();
    s.ids.clear();
    s.emitted = 0;
    s.i = 0;
    s.done = false;
    s.reason.clear();
    s.prefilled = false;
    if (s.external) {
      s.ext_n_pos = (int)n;
      s.lg = nullptr;
    } else {
      s.lg = s.engine->eval(ids, (int)n);
    }
    s.prefilled = true;
    if (s.params.n_predict == 0) {
      s.done = true;
      s.reason = "length";
    }
  });
}

KW_EXPORT(kw_session_prefill_more)
int kw_session_prefill_more(int32_t h, const int32_t* ids, uint32_t n) {
  return guard([&] {
    Session& s = session(h, "kw_session_prefill_more");
    if (!s.prefilled || s.i > 0) knot::fail("kw_session_prefill_more: call kw_session_prefill first, before any step");
    if (n == 0) return;
    if ((int64_t)s.n_pos() + n > s.n_ctx())
      knot::fail("kw_session_prefill_more: prompt has " + std::to_string(s.n_pos() + (int64_t)n) +
                 " tokens but the context holds " + std::to_string(s.n_ctx()));
    s.prefilled = false;
    if (s.external) {
      s.ext_n_pos += (int)n;
      s.lg = nullptr;
    } else {
      s.lg = s.engine->eval(ids, (int)n);
    }
    for (uint32_t k = 0; k < n; k++) s.sampler->accept(ids[k]);
    s.prefilled = true;
  });
}

KW_EXPORT(kw_session_step)
int kw_session_step(int32_t h) {
  return guard([&] {
    Session& s = session(h, "kw_session_step");
    if (!s.prefilled) knot::fail("kw_session_step: call kw_session_prefill first");
    if (s.done) knot::fail("kw_session_step: generation already finished (" + s.reason + ")");
    const knot::Tokenizer& tok = *s.m->tok;
    const auto& p = s.params;
    if (!s.lg) knot::fail("kw_session_step: external-logits session: call kw_session_set_logits before each step");
    const int32_t id = s.sampler->sample(s.lg, s.n_logits());
    json lp;  // logprobs of this position, before lg is overwritten by the next eval
    if (s.logprobs >= 0) {
      const knot::SliceTopK top = knot::topk_lse(s.lg, 0, s.n_logits(), s.logprobs);
      json arr = json::array();
      for (size_t k = 0; k < top.ids.size(); k++) arr.push_back({top.ids[k], (double)top.logits[k] - top.lse});
      lp = json{{"logprob", (double)s.lg[id] - top.lse}, {"top", std::move(arr)}};
    }
    s.sampler->accept(id);
    s.ids.push_back(id);
    s.i++;
    std::string piece;
    auto emit = [&](size_t upto) {
      if (upto <= s.emitted) return;
      piece += s.text.substr(s.emitted, upto - s.emitted);
      s.emitted = upto;
    };
    auto finish = [&](const char* why) {
      s.done = true;
      s.reason = why;
      if (s.reason != "stop") {
        s.text += s.dec->flush();
        emit(s.text.size());
      }
    };
    if (!p.ignore_eos && tok.is_eog(id)) {
      finish("eog");
    } else {
      s.text += s.dec->push(id);
      size_t at = std::string::npos;
      if (!p.stop.empty()) {
        const size_t from = s.emitted > s.max_stop ? s.emitted - s.max_stop : 0;
        for (const auto& st : p.stop) {
          if (st.empty()) continue;
          size_t f = s.text.find(st, from);
          if (f != std::string::npos && f < at) at = f;
        }
      }
      if (at != std::string::npos) {
        emit(std::max(at, s.emitted));
        finish("stop");
      } else {
        emit(s.text.size() - stop_holdback(s.text, p.stop));
        if (s.i >= p.n_predict) finish("length");
        else if (s.n_pos() >= s.n_ctx()) finish("context");
        else if (s.external) s.lg = nullptr, s.ext_n_pos++;  // the caller runs the forward pass
        else s.lg = s.engine->eval(&id, 1);
      }
    }
    // JSON strings must be valid UTF-8: send the piece as a separate binary tail.
    json hj{{"id", id}, {"done", s.done}, {"reason", s.reason}, {"text_len", piece.size()}};
    if (!lp.is_null()) hj.update(lp);
    std::string head = hj.dump();
    set_result(head + '\n' + piece);
  });
}

// Raw forward: append ids at the session's next positions; result = f32 logits of the
// last one, [n_logits].
KW_EXPORT(kw_session_eval)
int kw_session_eval(int32_t h, const int32_t* ids, uint32_t n) {
  return guard([&] {
    Session& s = session(h, "kw_session_eval");
    if (s.external) knot::fail("kw_session_eval: an external-logits session has no engine");
    if (n == 0) knot::fail("kw_session_eval: no ids");
    const float* lg = s.engine->eval(ids, (int)n);
    set_result_bytes(lg, sizeof(float) * s.engine->n_logits());
  });
}

KW_EXPORT(kw_session_reset)
int kw_session_reset(int32_t h, int32_t n_pos) {
  return guard([&] {
    Session& s = session(h, "kw_session_reset");
    if (s.external) knot::fail("kw_session_reset: an external-logits session has no engine");
    if (n_pos < 0 || n_pos > s.engine->n_pos()) knot::fail("kw_session_reset: n_pos out of range");
    s.engine->truncate(n_pos);
    s.prefilled = false;
  });
}

KW_EXPORT(kw_session_telemetry)
int kw_session_telemetry(int32_t h) {
  return guard([&] {
    Session& s = session(h, "kw_session_telemetry");
    if (s.external) {
      set_result(json{{"n_pos", s.ext_n_pos}, {"n_ctx", s.ext_n_ctx}, {"n_generated", s.i}, {"done", s.done},
                      {"reason", s.reason}, {"engine_bytes", 0}, {"engine_peak_bytes", 0}, {"kv_bytes", 0}}.dump());
      return;
    }
    const knot::Engine& e = *s.engine;
    set_result(json{{"n_pos", e.n_pos()},
                    {"n_ctx", e.n_ctx()},
                    {"n_generated", s.i},
                    {"done", s.done},
                    {"reason", s.reason},
                    {"engine_bytes", e.bytes()},
                    {"engine_peak_bytes", e.peak_bytes()},
                    {"kv_bytes", e.kv().bytes()}}.dump());
  });
}

// External-logits session: the logits of the last position, [n_vocab] (tokenizer vocab).
KW_EXPORT(kw_session_set_logits)
int kw_session_set_logits(int32_t h, const float* lg, uint32_t n) {
  return guard([&] {
    Session& s = session(h, "kw_session_set_logits");
    if (!s.external) knot::fail("kw_session_set_logits: not an external-logits session");
    if ((int64_t)n != s.ext_n_logits)
      knot::fail("kw_session_set_logits: " + std::to_string(n) + " logits, the vocab has " + std::to_string(s.ext_n_logits));
    if (!lg) knot::fail("kw_session_set_logits: null logits buffer");
    s.ext_lg.assign(lg, lg + n);
    s.lg = s.ext_lg.data();
  });
}

KW_EXPORT(kw_session_free)
int kw_session_free(int32_t h) {
  return guard([&] {
    if (!g_sessions.remove(h)) throw HandleError("kw_session_free: unknown or freed handle " + std::to_string(h));
  });
}
