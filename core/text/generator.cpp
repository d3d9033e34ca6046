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
  if (!p_.grammar.empty()) {
    matcher_.emplace(Grammar::parse(p_.grammar));
    const int nv = std::min(n_vocab, tok.n_vocab());
    pieces_.resize(n_vocab);
    eog_.assign(n_vocab, 0);
    for (int i = 0; i < nv; i++) {
      pieces_[i] = tok.token_to_piece(i);
      eog_[i] = tok.is_eog(i);
    }
    for (int i = 0; i < nv; i++)
      if (!eog_[i] && !pieces_[i].empty()) by_bytes_.push_back(i);
    std::sort(by_bytes_.begin(), by_bytes_.end(), [&](int32_t a, int32_t b) { return pieces_[a] < pieces_[b]; });
    lcp_.resize(by_bytes_.size(), 0);
    for (size_t i = 1; i < by_bytes_.size(); i++) {
      const std::string &a = pieces_[by_bytes_[i - 1]], &b = pieces_[by_bytes_[i]];
      size_t l = 0;
      while (l < a.size() && l < b.size() && a[l] == b[l]) l++;
      lcp_[i] = (uint32_t)l;
    }
    filter_.allowed = [this](int32_t id) { return allowed(id); };
    filter_.mask = [this](std::vector<uint8_t>& m) { allowed_mask(m); };
  }
}

void Generator::allowed_mask(std::vector<uint8_t>& mask) const {
  mask.assign(pieces_.size(), matcher_ ? 0 : 1);
  if (!matcher_) return;
  const bool end = matcher_->can_end();
  for (size_t i = 0; i < eog_.size(); i++)
    if (eog_[i]) mask[i] = end;
  walk_.resize(1);
  walk_[0] = matcher_->state();
  size_t valid = 0;                 // walk_[0..valid]: states for the previous piece's prefixes
  size_t dead = SIZE_MAX;           // the previous piece's prefix of this length is refused
  for (size_t i = 0; i < by_bytes_.size(); i++) {
    const std::string& p = pieces_[by_bytes_[i]];
    const size_t l = lcp_[i];
    if (dead != SIZE_MAX && l >= dead) continue;  // starts with the refused prefix
    dead = SIZE_MAX;
    size_t d = std::min(l, valid);
    for (; d < p.size(); d++) {
      if (walk_.size() < d + 2) walk_.resize(d + 2);
      if (!matcher_->step_byte(walk_[d], (uint8_t)p[d], walk_[d + 1])) {
        dead = d + 1;
        break;
      }
    }
    valid = dead == SIZE_MAX ? p.size() : dead - 1;
    if (dead == SIZE_MAX) mask[by_bytes_[i]] = 1;
  }
}

bool Generator::allowed(int32_t id) const {
  if (!matcher_) return true;
  if (id < 0 || id >= (int32_t)pieces_.size()) return false;
  if (eog_[id]) return matcher_->can_end();
  const std::string& piece = pieces_[id];
  if (piece.empty()) return false;
  if (!first_fresh_) {
    for (int b = 0; b < 256; b++) {
      const char c = (char)b;
      first_ok_[b] = matcher_->can_accept(std::string_view(&c, 1));
    }
    first_fresh_ = true;
  }
  if (!first_ok_[(uint8_t)piece[0]]) return false;
  return piece.size() == 1 || matcher_->can_accept(piece);
}

void Generator::start(const int32_t* prompt, int n) {
  if (n <= 0 || !prompt) fail("generator: empty prompt (at least BOS is needed)");
  if (n_ctx_ > 0 && n > n_ctx_)
    fail("prompt has " + std::to_string(n) + " tokens but the context holds " + std::to_string(n_ctx_));
  sampler_.reset();
  if (matcher_) matcher_->reset(), first_fresh_ = false;
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
  if (!matcher_) return after_sample(sampler_.sample(logits, n));
  const int32_t id = sampler_.sample(logits, n, filter_);
  if (id < 0)
    fail("grammar: no token of the vocabulary can continue the output after " + std::to_string(ids_.size()) +
         " generated tokens (text so far: \"" + text_ + "\")");
  return after_sample(id);
}

GenStep Generator::step(const SliceTopK& merged) {
  if (!started_) fail("generator: call start() before step()");
  if (done_) fail("generator: generation already finished (" + reason_ + ")");
  if (!matcher_) return after_sample(sampler_.sample_topk(merged));
  const int32_t id = sampler_.sample_topk(merged, filter_);
  if (id < 0) {
    GenStep s;
    s.need_wider = true;
    return s;
  }
  return after_sample(id);
}

GenStep Generator::step_draft(const float* logits, int n, int32_t draft, bool* accepted, const Sampler::Dist* q) {
  if (!started_) fail("generator: call start() before step_draft()");
  if (done_) fail("generator: generation already finished (" + reason_ + ")");
  if (drafting_) fail("generator: step_draft() between draft_begin() and draft_end()");
  const Sampler::Draft d = sampler_.sample_draft(logits, n, draft, matcher_ ? &filter_ : nullptr, q);
  if (d.id < 0)
    fail("grammar: no token of the vocabulary can continue the output after " + std::to_string(ids_.size()) +
         " generated tokens (text so far: \"" + text_ + "\")");
  *accepted = d.accepted;
  return after_sample(d.id);
}

GenStep Generator::step_draft(const SliceTopK& merged, int32_t draft, bool* accepted, const Sampler::Dist* q) {
  if (!started_) fail("generator: call start() before step_draft()");
  if (done_) fail("generator: generation already finished (" + reason_ + ")");
  if (drafting_) fail("generator: step_draft() between draft_begin() and draft_end()");
  const Sampler::Draft d = sampler_.sample_draft_topk(merged, draft, q);
  *accepted = d.accepted;
  return after_sample(d.id);
}

void Generator::draft_begin() {
  if (!started_) fail("generator: call start() before draft_begin()");
  if (drafting_) fail("generator: draft_begin() twice");
  drafting_ = true;
  draft_stop_ = done_;
  draft_window_ = sampler_.window();
  if (matcher_) draft_matcher_ = *matcher_;
}

int32_t Generator::draft_sample(const float* logits, int n, Sampler::Dist& q) {
  if (!drafting_) fail("generator: draft_sample() outside draft_begin() .. draft_end()");
  if (draft_stop_ || !sampler_.dist(logits, n, q, matcher_ ? &filter_ : nullptr)) {
    q.ids.clear(), q.p.clear();
    return -1;
  }
  const int32_t id = sampler_.draw(q);
  sampler_.accept(id);
  if ((!p_.ignore_eos || matcher_) && tok_.is_eog(id)) {
    draft_stop_ = true;  // generation ends at this draft if it is kept
  } else if (matcher_) {
    if (!matcher_->accept(pieces_[id])) fail("grammar: drafted token " + std::to_string(id) + " does not continue the grammar");
    first_fresh_ = false;
    if (matcher_->is_complete()) draft_stop_ = true;
  }
  return id;
}

void Generator::draft_end() {
  if (!drafting_) return;
  drafting_ = false;
  sampler_.set_window(draft_window_);
  if (matcher_) {
    *matcher_ = *draft_matcher_;
    first_fresh_ = false;
  }
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
  if ((!p_.ignore_eos || matcher_) && tok_.is_eog(id)) {
    finish(s, "eog");
  } else {
    if (matcher_) {
      if (!matcher_->accept(pieces_[id]))
        fail("grammar: token " + std::to_string(id) + " does not continue the grammar");  // the filter allowed it
      first_fresh_ = false;
    }
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
      if (matcher_ && matcher_->is_complete()) finish(s, "grammar");
      else if ((int)ids_.size() >= p_.n_predict) finish(s, "length");
      else if (n_ctx_ > 0 && n_pos >= n_ctx_) finish(s, "context");
    }
  }
  s.done = done_;
  s.reason = reason_;
  return s;
}

}  // namespace knot
