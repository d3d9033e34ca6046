#include "text/generator.h"

#include <algorithm>

#include "kernels/common.h"

namespace knot {

namespace {

// Longest suffix of text that is a proper prefix of a stop string: held back until the
// next token decides whether the stop string completes.
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

}  // namespace

Generator::Generator(const Tokenizer& tok, const GenerateParams& p, int n_vocab, int n_ctx)
    : tok_(tok), p_(p), n_ctx_(n_ctx), sampler_(p.sampling, n_vocab) {
  if (p.n_predict < 0) fail("generator: n_predict must be >= 0, got " + std::to_string(p.n_predict));
  if (n_ctx < 0) fail("generator: n_ctx must be >= 0, got " + std::to_string(n_ctx));
  for (const auto& s : p_.stop) max_stop_ = std::max(max_stop_, s.size());
}

void Generator::start(const int32_t* prompt, int n) {
  if (n <= 0 || !prompt) fail("generator: empty prompt (at least BOS is needed)");
  if (n_ctx_ > 0 && n > n_ctx_)
    fail("prompt has " + std::to_string(n) + " tokens but the context holds " + std::to_string(n_ctx_));
  sampler_.reset();
  for (int i = 0; i < n; i++) sampler_.accept(prompt[i]);
  dec_.emplace(tok_);
  n_prompt_ = n;
  text_.clear();
  emitted_ = 0;
  ids_.clear();
  started_ = true;
  done_ = p_.n_predict == 0;
  reason_ = done_ ? "length" : "";
}

void Generator::extend_prompt(const int32_t* ids, int n) {
  if (!started_ || !ids_.empty()) fail("generator: extend_prompt() goes after start() and before the first step");
  if (n < 0 || (n > 0 && !ids)) fail("generator: bad prompt extension (n=" + std::to_string(n) + ")");
  if (n_ctx_ > 0 && (int64_t)n_prompt_ + n > n_ctx_)
    fail("prompt has " + std::to_string((int64_t)n_prompt_ + n) + " tokens but the context holds " + std::to_string(n_ctx_));
  for (int i = 0; i < n; i++) sampler_.accept(ids[i]);
  n_prompt_ += n;
}

GenStep Generator::step(const float* logits, int n) {
  if (!started_) fail("generator: call start() before step()");
  if (done_) fail("generator: generation already finished (" + reason_ + ")");
  return after_sample(sampler_.sample(logits, n));
}

GenStep Generator::step(const SliceTopK& merged) {
  if (!started_) fail("generator: call start() before step()");
  if (done_) fail("generator: generation already finished (" + reason_ + ")");
  return after_sample(sampler_.sample_topk(merged));
}

GenStep Generator::step_draft(const float* logits, int n, int32_t draft, bool* accepted) {
  if (!started_) fail("generator: call start() before step_draft()");
  if (done_) fail("generator: generation already finished (" + reason_ + ")");
  const Sampler::Draft d = sampler_.sample_draft(logits, n, draft);
  *accepted = d.accepted;
  return after_sample(d.id);
}

GenStep Generator::step_draft(const SliceTopK& merged, int32_t draft, bool* accepted) {
  if (!started_) fail("generator: call start() before step_draft()");
  if (done_) fail("generator: generation already finished (" + reason_ + ")");
  const Sampler::Draft d = sampler_.sample_draft_topk(merged, draft);
  *accepted = d.accepted;
  return after_sample(d.id);
}

void Generator::stop(const std::string& reason) {
  done_ = true;
  reason_ = reason;
}

void Generator::release(GenStep& s, size_t upto) {
  if (upto <= emitted_) return;
  s.text.append(text_, emitted_, upto - emitted_);
  emitted_ = upto;
}

void Generator::finish(GenStep& s, const char* why) {
  done_ = true;
  reason_ = why;
  if (reason_ != "stop") {
    text_ += dec_->flush();
    release(s, text_.size());
  }
}

GenStep Generator::after_sample(int32_t id) {
  GenStep s;
  s.id = id;
  sampler_.accept(id);
  ids_.push_back(id);
  if (!p_.ignore_eos && tok_.is_eog(id)) {
    finish(s, "eog");
  } else {
    text_ += dec_->push(id);
    // Earliest completed stop string. Text before emitted_ - max_stop cannot start one:
    // anything that might was held back.
    size_t at = std::string::npos;
    if (!p_.stop.empty()) {
      const size_t from = emitted_ > max_stop_ ? emitted_ - max_stop_ : 0;
      for (const auto& st : p_.stop) {
        if (st.empty()) continue;
        const size_t f = text_.find(st, from);
        if (f != std::string::npos && f < at) at = f;
      }
    }
    if (at != std::string::npos) {
      release(s, std::max(at, emitted_));
      finish(s, "stop");
    } else {
      release(s, text_.size() - stop_holdback(text_, p_.stop));
      // Positions in the KV so far: the prompt plus every sampled token but this one.
      const int64_t n_pos = (int64_t)n_prompt_ + (int64_t)ids_.size() - 1;
      if ((int)ids_.size() >= p_.n_predict) finish(s, "length");
      else if (n_ctx_ > 0 && n_pos >= n_ctx_) finish(s, "context");
    }
  }
  s.done = done_;
  s.reason = reason_;
  return s;
}

}  // namespace knot
