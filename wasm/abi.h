// abi.h — the C ABI of knotwork.wasm (consumed by bindings/loader.mjs, knotwork.mjs,
// mesh.mjs). Conventions:
//  * Every kw_* function that can fail returns int status: 0 ok, else a KW_ERR_* code;
//    the message is kw_last_error() (NUL-terminated, length kw_last_error_len()).
//    Nothing aborts: knot::Error, std::bad_alloc and std::exception are caught at the
//    boundary.
//  * Variable-size results (JSON, text, ids, floats) go to one module-owned result
//    buffer: kw_result_ptr()/kw_result_len(), valid until the next call that fills it.
//  * Models, sessions, stations and bench matrices are integer handles (> 0, never
//    reused). Out-parameters are pointers into linear memory the caller allocated.
//  * File offsets and sizes are doubles (exact to 2^53): JS numbers, files > 4 GB.
//  * No clock in the module: the host times calls (performance.now()).
#pragma once
#include <cstddef>
#include <cstdint>

enum KwStatus : int {
  KW_OK = 0,
  KW_ERR_KNOT = 1,     // knot::Error: bad input (file, tensor, argument)
  KW_ERR_OOM = 2,      // std::bad_alloc: the 128 MB linear memory cap was hit
  KW_ERR_STD = 3,      // another std::exception
  KW_ERR_HANDLE = 4,   // unknown or freed handle
  KW_ERR_UNKNOWN = 5,  // a non-std exception
  KW_ERR_USAGE = 6,    // knot::UsageError: a refused option or command line (CLI exit 2)
};

extern "C" {
// ---- errors, results, memory (abi.cpp) ----
const char* kw_last_error();
uint32_t kw_last_error_len();
const uint8_t* kw_result_ptr();
uint32_t kw_result_len();
void* kw_alloc(uint32_t n);  // 16-byte aligned; nullptr + last error on failure
void kw_free(void* p);
// out[0] linear memory bytes now, out[1] peak linear bytes, out[2] malloc bytes in use,
// out[3] peak malloc bytes (linear: sampled at every ABI entry and exit; malloc: counted by
// the module's malloc family, exact).
int kw_memory_stats(uint32_t* out4);
int kw_memory_reset_peak();

// ---- kernels (abi.cpp) ----
// result {"failures", "simd", "report"}: SIMD vs scalar checks run inside the module.
int kw_kernel_selftest(uint32_t seed);
// A rows x cols matrix of ggml type type_id + activations; result {w_ptr, w_bytes,
// row_bytes, x_ptr, y_ptr}. run: kernel 0 reference, 1 scalar, 2 simd; result f64 sum(y).
int kw_bench_matvec_prepare(uint32_t type_id, int32_t rows, int32_t cols, uint32_t seed, int32_t* out_handle);
int kw_bench_matvec_run(int32_t h, int32_t kernel, int32_t iters);
int kw_bench_free(int32_t h);

// result: JSON array of the type-traits table, one object per type: {id, name,
// block_elems, block_bytes, storage, k_quant, vec_dot_type, act_format, max_rel_rms}.
int kw_type_traits();

// Raw kernels over caller buffers (type = ggml id; unknown types are errors, never zeros).
int kw_dequantize_row(uint32_t type_id, const void* src, float* dst, int32_t n);
int kw_quantize_row(uint32_t type_id, const float* src, void* dst, int32_t n);
int kw_matvec(uint32_t type_id, const void* W, int32_t rows, int32_t cols, const float* x, float* y, int32_t kernel);
int kw_matmul(uint32_t type_id, const void* W, int32_t rows, int32_t cols, const float* X, int32_t ntok, float* Y,
              int32_t kernel);

// ---- models, tokenizer, chat (abi_model.cpp) ----
// Header from the first len bytes: result {"need": N} (fetch N bytes, call again) or
// {"format", "config", "tensors": [{name, type, shape, offset (absolute), size}], ...}.
int kw_parse_header(const uint8_t* prefix, uint32_t len, double file_size, const char* name, uint32_t name_len);
// Same protocol; on success *out_handle > 0 and result {"format", "tensors": [{i, name,
// offset, size}]} (.knot: entry 0 is the tokenizer blob). Then per entry:
// tensor_buffer (allocates, returns where to copy the bytes), tensor_loaded (verifies:
// content hash, finite block scales), and kw_model_finish (result = info JSON).
int kw_model_open(const uint8_t* prefix, uint32_t len, double file_size, const char* name, uint32_t name_len,
                  int32_t* out_handle);
int kw_model_tensor_buffer(int32_t h, uint32_t i, uint8_t** out_ptr);
int kw_model_tensor_loaded(int32_t h, uint32_t i);
int kw_model_finish(int32_t h);
int kw_model_text_finish(int32_t h);  // tokenizer + config only (mesh coordinator: tokenize, chat, kw_generator_*); result {config, format}
int kw_model_free(int32_t h);  // frees its sessions too
int kw_model_info(int32_t h);
int kw_model_to_knot(int32_t h);  // result: .knot file bytes
int kw_tokenize(int32_t h, const char* text, uint32_t len, int32_t add_bos, int32_t parse_special);  // result i32[]
int kw_detokenize(int32_t h, const int32_t* ids, uint32_t n);  // result UTF-8
int kw_token_piece(int32_t h, int32_t id, int32_t render_special);  // result: raw bytes
int kw_chat_apply(int32_t h, const char* msgs_json, uint32_t msgs_len, int32_t add_generation_prompt,
                  const char* tmpl, uint32_t tmpl_len);  // result: prompt text; tmpl "" = the
                  // file's own Jinja template when it parses (knot::default_chat_template)
int kw_chat_apply_vars(int32_t h, const char* msgs_json, uint32_t msgs_len, int32_t add_generation_prompt,
                       const char* tmpl, uint32_t tmpl_len, const char* vars_json, uint32_t vars_len);
                  // kw_chat_apply plus template variables (a JSON object: tools, enable_thinking, ...);
                  // the file's own Jinja template only
int kw_chat_template(int32_t model);  // result: JSON {name (the default template), text (the file's)}

// ---- command lines (abi_cli.cpp): the option spec of core/infer/options.h ----
// cmd "generate"; args: JSON array of strings; prog: the name messages use. Result:
// {"action": "help"|"usage"} or {"action": "run", "args", "options", "cli"}.
int kw_cli_parse(const char* cmd, uint32_t cmd_len, const char* args_json, uint32_t args_len, const char* prog,
                 uint32_t prog_len);
int kw_cli_usage(const char* cmd, uint32_t cmd_len, const char* prog, uint32_t prog_len);  // result: text
int kw_cli_format_g(double x);  // result: printf("%g", x)

// ---- generation (abi_session.cpp) ----
// opts JSON: mode ("fast"|"reference"), n_ctx, chunk, kv_budget, n_predict, temperature,
// top_k, top_p, min_p, repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty,
// seed, stop [..], ignore_eos, logprobs (0..20; see abi_session.cpp): the option table of
// core/infer/options.h; a bad value is KW_ERR_USAGE. Speculative decoding with a draft model:
// draft_model (a model handle, same vocabulary), draft_n (1..64, default 4), draft_one_hot
// (propose the argmax also when sampling). The draft's engine (KV for the same context,
// buffers, draft_n proposal distributions) is counted with the target's against the 128 MB
// cap: a draft that does not fit is refused naming it, before anything is allocated.
int kw_session_new(int32_t model, const char* opts, uint32_t opts_len, int32_t* out_handle);
int kw_session_prefill(int32_t s, const int32_t* ids, uint32_t n);
// Continue the prefill with more prompt ids (before the first step): the same result as
// one kw_session_prefill of the whole prompt when pieces end on multiples of the chunk.
int kw_session_prefill_more(int32_t s, const int32_t* ids, uint32_t n);
// A new generation keeping KV positions [0, n_keep) (ids [0, n_keep) are their tokens:
// prefix reuse): sampling opts as kw_session_new's (engine options refused), ids [n_keep, n)
// fed, then as kw_session_prefill of ids [0, n).
int kw_session_renew(int32_t s, const char* opts, uint32_t opts_len, const int32_t* ids, uint32_t n, uint32_t n_keep);
// One token: result = JSON line {"id", "done", "reason", "text_len"[, "logprob", "top"]}
// + '\n' + text bytes.
int kw_session_step(int32_t s);
int kw_session_eval(int32_t s, const int32_t* ids, uint32_t n);  // result f32 logits [n_vocab]
// An embedding of ids (the session is reset first): result f32 [n_embd], the mean over
// their positions of the final normed hidden state, L2-normalised (knot::Engine::embed).
int kw_session_embed(int32_t s, const int32_t* ids, uint32_t n);
int kw_session_reset(int32_t s, int32_t n_pos);
int kw_session_telemetry(int32_t s);
int kw_session_free(int32_t s);
// The core Generator alone (a mesh coordinator): opts = the sampling keys above + n_ctx.
// step: full logits [n]; step_topk: a merged top-k as arrays (below). Step results as
// kw_session_step; start's result {"done", "reason"}.
// A top-k crosses as arrays in wasm memory, never JSON: ids i32[n] (absolute, best first),
// logits f32[n], lse (f64, -inf: an empty slice) and min (f64, +inf: no finite logit).
// Top-k result layout: f64 lse, f64 min, i32 ids[n], f32 logits[n]; n = (len - 16) / 8.
int kw_generator_new(int32_t model, const char* opts, uint32_t opts_len, int32_t* out_handle);
int kw_generator_start(int32_t g, const int32_t* ids, uint32_t n);
int kw_generator_step(int32_t g, const float* logits, uint32_t n);
int kw_generator_step_topk(int32_t g, const int32_t* ids, int32_t n_ids, const float* logits, int32_t n_logits,
                           double lse, double min);
// Speculative verification of a drafted token over a merged top-k (Generator::step_draft):
// the step result plus "accepted" (greedy: the argmax is the draft; sampling: kept with p(draft)).
int kw_generator_step_draft_topk(int32_t g, const int32_t* ids, int32_t n_ids, const float* logits, int32_t n_logits,
                                 double lse, double min, int32_t draft);
// Sampling drafts. kw_session_propose: session s (a draft model's: its engine and KV, kept in
// step with hist) proposes up to room (<= 64) tokens after hist[0..n), drawn as generator g
// samples — its chain (penalties, grammar, top-k, top-p, min-p, temperature) over the
// draft's logits and its seeded RNG, one uniform per token; g 0 or greedy: the argmax.
// Result, all f64 (one Float64Array): n, then per token id, q(id), m and m pairs (id, p):
// the distribution q the token was drawn from (m 0: one-hot, q(id) 1). After a rejection the
// next call's hist drops the rejected tokens and the session's KV follows.
// kw_generator_step_draft_q_topk: kw_generator_step_draft_topk against that q (ids i32[n_q],
// p f64[n_q]; n_q 0 is refused: a one-hot draft uses kw_generator_step_draft_topk): kept
// with probability min(1, p(draft)/q(draft)), else a token from norm(max(0, p - q)).
// Verify in order, after the proposal's draws (the RNG's order is then fixed: a seed
// reproduces the run).
int kw_session_propose(int32_t s, int32_t g, const int32_t* ids, uint32_t n, int32_t room);
int kw_generator_step_draft_q_topk(int32_t g, const int32_t* ids, int32_t n_ids, const float* logits, int32_t n_logits,
                                   double lse, double min, int32_t draft, const int32_t* q_ids, const double* q_p,
                                   int32_t n_q);
// How many of ids[0..n) the generator's grammar takes next (all without one): {"allowed"}.
int kw_generator_allowed(int32_t g, const int32_t* ids, uint32_t n);
int kw_generator_stop(int32_t g, const char* reason, uint32_t len);
int kw_generator_free(int32_t g);
// A draft model for a mesh coordinator (abi_draft.cpp): its own Engine; the vocabulary must
// be the target's (a text model will do); proposals are i32 ids (greedy: q one-hot).
int kw_drafter_new(int32_t draft_model, int32_t target_model, const char* opts, uint32_t opts_len, int32_t* out_handle);
int kw_drafter_prime(int32_t d, const int32_t* ids, uint32_t n);
int kw_drafter_propose(int32_t d, const int32_t* ids, uint32_t n, int32_t room);
// Sampling drafts from a drafter: as kw_session_propose (generator g's chain and RNG; result:
// the proposal layout above), for the mesh coordinator's Drafter.propose(hist, room, gen).
int kw_drafter_propose_with(int32_t d, int32_t g, const int32_t* ids, uint32_t n, int32_t room);
int kw_drafter_telemetry(int32_t d);
int kw_drafter_free(int32_t d);
// A slice's top-k + lse + min (result: the top-k layout); the merge of n_parts shards'
// top-k lists: ids and logits end to end, sizes i32[2 * n_parts] = (ids, logits) counts
// per part, stats f64[2 * n_parts] = (lse, min) per part (result: the top-k layout).
int kw_topk_lse(const float* logits, int32_t v0, int32_t v1, int32_t k);
int kw_topk_merge(const int32_t* ids, const float* logits, const int32_t* sizes, const double* stats, int32_t n_parts,
                  int32_t k);
// The prompt-lookup rules (infer/speculative.h), for checking bindings/generator.mjs's copy:
// draft_lookup over hist i32[n] (ngram_max 0: the default; result i32 ids), and the
// LookupBudget's sizes from k through n passes (outcomes i32[2n] = drafted, accepted;
// result i32 sizes[n + 1]).
int kw_draft_lookup(const int32_t* hist, uint32_t n, int32_t k, int32_t ngram_max);
int kw_lookup_budget(int32_t k, const int32_t* outcomes, uint32_t n);

// ---- mesh: per-phase forward (abi_mesh.cpp) ----
int kw_model_tensor_evict(int32_t h, uint32_t i);
int kw_model_rows_plan(int32_t h, uint32_t i, double r0, double r1);  // result {offset, size} to fetch
int kw_model_rows_load(int32_t h, uint32_t i, double r0, double r1, const uint8_t* p, double off, double len);
int kw_station_new(int32_t model, int32_t l0, int32_t l1, int32_t n_ctx, int32_t h0, int32_t h1, int32_t reference,
                   int32_t* out_handle);
int kw_station_free(int32_t st);
int kw_station_truncate(int32_t st, int32_t n_pos);
int kw_station_info(int32_t st);
int kw_station_attn(int32_t st, int32_t layer, int32_t pos0, const float* x, int32_t ntok, float* out);
int kw_station_ffn(int32_t st, int32_t phase, int32_t layer, const float* x, int32_t ntok, float* h, float* out,
                   int32_t c0, int32_t c1);
int kw_embed(int32_t model, const int32_t* ids, int32_t ntok, int32_t v0, int32_t v1, float* out);
int kw_output_norm(int32_t model, const float* x, int32_t ntok, float* out);
int kw_lm_head(int32_t model, const float* xn, int32_t ntok, int32_t v0, int32_t v1, float* logits, float softcap,
               int32_t reference);

// ---- streamed slice loads (abi_slice.cpp): rows or whole-block columns of a matrix ----
// begin: result {offset, size} = the file range to stream; feed it in order in chunks of
// any size; end verifies (chunk / tensor hash, finite scales) and installs the slice.
int kw_model_slice_begin(int32_t h, uint32_t i, int32_t axis, double a, double b);
int kw_model_slice_feed(int32_t h, uint32_t i, const uint8_t* p, uint32_t n);
int kw_model_slice_end(int32_t h, uint32_t i);

// ---- planner (abi_plan.cpp) ----
// Header-prefix protocol of kw_parse_header; opts JSON {"budget": "128MB", "context",
// "chunk", "shards", "stations", "mode"}; result: the plan JSON (core/infer/planner.h).
int kw_plan(const uint8_t* prefix, uint32_t len, double file_size, const char* name, uint32_t name_len,
            const char* opts, uint32_t opts_len);
// request JSON {topology | plan + knot?, options?, main_prefix}; result {topology, description,
// files: [{file, text}]} (core/infer/deployment.h: the Worker scripts of a mesh, wrangler.jsonc).
int kw_deploy(const char* req, uint32_t req_len);
}
