// vocab.cpp — tokenizers. SPM (tokenizer.ggml.model "llama"): score-driven bigram
// merging over UTF-8 characters with <0xNN> byte fallback, as llama.cpp's SPM session.
// BPE ("gpt2"): regex pre-tokenizer, GPT-2 byte->unicode mapping, rank-driven merges.
#include "text/vocab.h"

#include <algorithm>
#include <cstdio>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "kernels/common.h"
#include "text/unicode.h"

namespace knot {

namespace {

enum TokType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUser = 4, kUnused = 5, kByte = 6 };

const char kSpmSpace[] = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

// "<0x0A>" -> 10, else -1
int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Keys view the strings of Impl::d (heap-owned by the Tokenizer, never modified after
// construction), so building the maps copies no text.
using TextMap = std::unordered_map<std::string_view, int32_t>;

struct Fragment {
  std::string_view text;  // raw text when token < 0
  int32_t token = -1;
};

}  // namespace

struct Tokenizer::Impl {
  TokenizerData d;
  bool spm = false;
  unicode::PreTok pretok = unicode::PreTok::Gpt2;
  std::vector<int32_t> types;                        // [n_vocab], filled in when absent
  TextMap all;         // text -> id, every token (first id on duplicate text)
  TextMap merge_rank;  // "left right" -> rank (gpt2)
  int32_t byte_id[256];                                 // SPM <0xNN> tokens, -1 if absent
  std::vector<int32_t> special;  // tokens matched as whole text, longest text first
  bool special_first[256] = {};  // bytes that start some special token's text
  std::unordered_set<int32_t> eog;

  int32_t n() const { return (int32_t)d.tokens.size(); }
  // Tokens that merging may produce. Byte, control and unknown tokens are excluded:
  // literal "<0x0A>" or "</s>" in the input must not turn into those tokens.
  int32_t lookup(std::string_view s) const {
    auto it = all.find(s);
    if (it == all.end()) return -1;
    const int32_t ty = types[it->second];
    return ty == kNormal || ty == kUser || ty == kUnused ? it->second : -1;
  }

  void split_special(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;
  void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
  void spm_byte_fallback(std::string_view chr, std::vector<int32_t>& out) const;
  void encode_bpe_word(std::string_view word, std::vector<int32_t>& out) const;
  std::string piece(int32_t id, bool render_special) const;
};

Tokenizer::Tokenizer(const TokenizerData& data) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.d = data;
  const TokenizerData& d = m.d;
  const int32_t n = (int32_t)d.tokens.size();
  if (n == 0) fail("tokenizer: vocabulary is empty (tokenizer.ggml.tokens missing?)");
  if (d.model == "llama") m.spm = true;
  else if (d.model == "gpt2") m.spm = false;
  else fail("tokenizer: unsupported tokenizer.ggml.model '" + d.model + "' (supported: llama, gpt2)");

  if (!d.token_types.empty() && (int32_t)d.token_types.size() != n)
    fail("tokenizer: token_type has " + std::to_string(d.token_types.size()) + " entries, vocab has " +
         std::to_string(n));
  if (m.spm && (int32_t)d.scores.size() != n)
    fail("tokenizer: SPM vocab has " + std::to_string(n) + " tokens but " +
         std::to_string(d.scores.size()) + " scores");
  for (auto [name, id] : {std::pair{"bos", d.bos_id}, {"eos", d.eos_id}, {"unk", d.unk_id},
                          {"pad", d.pad_id}, {"eot", d.eot_id}})
    if (id < -1 || id >= n)
      fail(std::string("tokenizer: ") + name + " token id " + std::to_string(id) +
           " out of range (vocab " + std::to_string(n) + ")");

  // Token types: from the file, else inferred (byte tokens by shape, special ids control).
  m.types.resize(n, kNormal);
  for (int32_t i = 0; i < n; i++) {
    if (!d.token_types.empty()) {
      m.types[i] = d.token_types[i];
    } else if (m.spm && parse_byte_token(d.tokens[i]) >= 0) {
      m.types[i] = kByte;
    }
  }
  if (d.token_types.empty()) {
    for (int32_t id : {d.bos_id, d.eos_id, d.eot_id, d.pad_id})
      if (id >= 0) m.types[id] = kControl;
    if (d.unk_id >= 0) m.types[d.unk_id] = kUnknown;
  }

  std::fill(std::begin(m.byte_id), std::end(m.byte_id), -1);
  m.all.reserve(n);
  for (int32_t i = 0; i < n; i++) {
    const std::string& t = d.tokens[i];
    m.all.emplace(std::string_view(t), i);  // first id wins on duplicate text
    const int32_t ty = m.types[i];
    if (ty == kByte) {
      const int b = parse_byte_token(t);
      if (b < 0) fail("tokenizer: byte token " + std::to_string(i) + " has text '" + t + "', expected <0xNN>");
      if (m.byte_id[b] < 0) m.byte_id[b] = i;
    }
    if ((ty == kControl || ty == kUser || ty == kUnknown) && !t.empty()) m.special.push_back(i);
  }
  std::stable_sort(m.special.begin(), m.special.end(), [&](int32_t a, int32_t b) {
    return d.tokens[a].size() > d.tokens[b].size();
  });
  for (int32_t id : m.special) m.special_first[(uint8_t)d.tokens[id][0]] = true;

  if (!m.spm) {
    m.merge_rank.reserve(d.merges.size());
    for (size_t r = 0; r < d.merges.size(); r++) {
      const std::string& mg = d.merges[r];
      const size_t sp = mg.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= mg.size())
        fail("tokenizer: merge " + std::to_string(r) + " '" + mg + "' is not of the form 'left right'");
      m.merge_rank.emplace(std::string_view(mg), (int)r);
    }
    const std::string& pre = d.pre;
    if (pre.empty() || pre == "default" || pre == "gpt2" || pre == "gpt-2")
      m.pretok = unicode::PreTok::Gpt2;
    else if (pre == "qwen2" || pre == "qwen2.5" || pre == "deepseek-r1-qwen")
      m.pretok = unicode::PreTok::Qwen2;
    else if (pre == "llama3" || pre == "llama-bpe" || pre == "llama-v3" || pre == "smaug-bpe")
      m.pretok = unicode::PreTok::Llama3;
    else
      fail("tokenizer: unsupported pre-tokenizer '" + pre + "' (supported: gpt2/default, qwen2, llama3)");
  }

  // End-of-generation: EOS, EOT and the usual end-of-turn tokens by their text.
  for (int32_t id : {d.eos_id, d.eot_id})
    if (id >= 0) m.eog.insert(id);
  for (const char* t : {"</s>", "<|eot_id|>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>",
                        "<|eom_id|>", "<end_of_turn>", "<|end|>", "<EOT>"}) {
    auto it = m.all.find(t);
    if (it != m.all.end() && m.types[it->second] != kNormal) m.eog.insert(it->second);
  }
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;

int Tokenizer::n_vocab() const { return impl_->n(); }
int32_t Tokenizer::bos() const { return impl_->d.bos_id; }
int32_t Tokenizer::eos() const { return impl_->d.eos_id; }
bool Tokenizer::is_eog(int32_t id) const { return impl_->eog.count(id) != 0; }
const TokenizerData& Tokenizer::data() const { return impl_->d; }

int32_t Tokenizer::find_token(std::string_view text) const {
  auto it = impl_->all.find(text);
  return it == impl_->all.end() ? -1 : it->second;
}

int32_t Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= impl_->n())
    fail("tokenizer: token id " + std::to_string(id) + " out of range (vocab " + std::to_string(impl_->n()) + ")");
  return impl_->types[id];
}

// ---- encode --------------------------------------------------------------------------

// Cuts text at every occurrence of a special token's text (leftmost, longest first).
// Control and unknown tokens only when parse_special; user-defined tokens always, as
// llama.cpp does.
void Tokenizer::Impl::split_special(std::string_view text, bool parse_special,
                                    std::vector<Fragment>& out) const {
  size_t start = 0, i = 0;
  while (i < text.size()) {
    if (!special_first[(uint8_t)text[i]]) { i++; continue; }
    int32_t hit = -1;
    for (int32_t id : special) {
      if (!parse_special && types[id] != kUser) continue;
      const std::string& t = d.tokens[id];
      if (t.size() <= text.size() - i && text.compare(i, t.size(), t) == 0) { hit = id; break; }
    }
    if (hit < 0) { i++; continue; }
    if (i > start) out.push_back({text.substr(start, i - start), -1});
    out.push_back({{}, hit});
    i += d.tokens[hit].size();
    start = i;
  }
  if (start < text.size()) out.push_back({text.substr(start), -1});
}

void Tokenizer::Impl::spm_byte_fallback(std::string_view chr, std::vector<int32_t>& out) const {
  for (unsigned char c : chr) {
    int32_t id = byte_id[c];
    if (id < 0) id = d.unk_id;
    if (id < 0) {
      char hex[8];
      snprintf(hex, sizeof hex, "%02X", c);
      fail(std::string("tokenizer: no token for byte 0x") + hex + " (no <0xNN> token and no unk token)");
    }
    out.push_back(id);
  }
}

// SPM: start from UTF-8 characters and repeatedly merge the adjacent pair whose
// concatenation is the highest-scoring token (leftmost on ties). Characters that end
// up not being tokens fall back to their bytes.
void Tokenizer::Impl::encode_spm(std::string_view text, std::vector<int32_t>& out) const {
  struct Sym { int prev, next; size_t off, len; };
  std::vector<Sym> sym;  // [n_chars], linked list over the text
  for (size_t i = 0; i < text.size();) {
    size_t len = unicode::utf8_valid_len(text, i);
    if (len == 0) len = 1;  // malformed byte: its own symbol, goes to byte fallback
    sym.push_back({(int)sym.size() - 1, (int)sym.size() + 1, i, len});
    i += len;
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Bigram { float score; int left, right; size_t len; };
  auto worse = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  auto try_pair = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const size_t len = sym[l].len + sym[r].len;  // adjacent: one contiguous slice
    const int32_t id = lookup(text.substr(sym[l].off, len));
    if (id < 0) return;
    queue.push({d.scores[id], l, r, len});
  };
  for (size_t i = 1; i < sym.size(); i++) try_pair((int)i - 1, (int)i);

  while (!queue.empty()) {  // hot loop: one merge per pop
    const Bigram b = queue.top();
    queue.pop();
    Sym& l = sym[b.left];
    Sym& r = sym[b.right];
    // Stale entry: one side was merged away or grew since this pair was queued.
    if (l.len == 0 || r.len == 0 || l.next != b.right || l.len + r.len != b.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_pair(l.prev, b.left);
    try_pair(b.left, l.next);
  }

  for (int i = 0; i >= 0; i = sym[i].next) {
    const std::string_view s = text.substr(sym[i].off, sym[i].len);
    const int32_t id = lookup(s);
    if (id >= 0) out.push_back(id);
    else spm_byte_fallback(s, out);
  }
}

// Byte-level BPE of one pre-tokenized word: map bytes to code points, then merge the
// lowest-rank adjacent pair (leftmost on ties) until no merge applies.
void Tokenizer::Impl::encode_bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  const std::string mapped = unicode::bytes_to_mapped(word);
  if (pretok == unicode::PreTok::Llama3) {
    // Llama-3 vocabs ignore merges when the whole word is a token (llama.cpp does too).
    const int32_t whole = lookup(mapped);
    if (whole >= 0) { out.push_back(whole); return; }
  }
  struct Sym { int prev, next; size_t off, len; };
  std::vector<Sym> sym;  // [n_bytes] one mapped code point per input byte
  for (size_t i = 0; i < mapped.size();) {
    const size_t len = unicode::utf8_valid_len(mapped, i);  // 1 or 2 bytes, always valid
    sym.push_back({(int)sym.size() - 1, (int)sym.size() + 1, i, len});
    i += len;
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  struct Pair { int rank, left, right; size_t llen, rlen; };
  auto worse = [](const Pair& a, const Pair& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> queue(worse);
  std::string key;
  auto try_pair = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    key.assign(mapped, sym[l].off, sym[l].len);
    key += ' ';
    key.append(mapped, sym[r].off, sym[r].len);
    auto it = merge_rank.find(key);
    if (it == merge_rank.end()) return;
    queue.push({it->second, l, r, sym[l].len, sym[r].len});
  };
  for (size_t i = 1; i < sym.size(); i++) try_pair((int)i - 1, (int)i);

  while (!queue.empty()) {  // hot loop
    const Pair p = queue.top();
    queue.pop();
    Sym& l = sym[p.left];
    Sym& r = sym[p.right];
    if (l.len != p.llen || r.len != p.rlen || l.next != p.right) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = p.left;
    try_pair(l.prev, p.left);
    try_pair(p.left, l.next);
  }

  for (int i = 0; i >= 0; i = sym[i].next) {
    const std::string_view s = std::string_view(mapped).substr(sym[i].off, sym[i].len);
    int32_t id = lookup(s);
    if (id >= 0) { out.push_back(id); continue; }
    // A merge result missing from the vocab (inconsistent file): emit its bytes.
    for (size_t k = 0; k < s.size();) {
      const size_t len = unicode::utf8_valid_len(s, k);
      const std::string_view one = s.substr(k, len);
      k += len;
      id = lookup(one);
      if (id < 0) id = d.unk_id;
      if (id < 0)
        fail("tokenizer: byte-level symbol '" + std::string(one) + "' is not in the vocab and there is no unk token");
      out.push_back(id);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  const bool want_bos = add_bos && m.d.add_bos && m.d.bos_id >= 0;
  if (want_bos) out.push_back(m.d.bos_id);

  std::vector<Fragment> frags;
  m.split_special(text, parse_special, frags);

  if (m.spm) {
    // Text after the start or after a special token gets the SPM space prefix.
    bool prev_special = true;
    std::string esc;
    for (const Fragment& f : frags) {
      if (f.token >= 0) { out.push_back(f.token); prev_special = true; continue; }
      esc.clear();
      if (m.d.add_space_prefix && prev_special) esc += kSpmSpace;
      for (char c : f.text) {
        if (c == ' ') esc += kSpmSpace; else esc += c;
      }
      m.encode_spm(esc, out);
      prev_special = false;
    }
  } else {
    for (const Fragment& f : frags) {
      if (f.token >= 0) { out.push_back(f.token); continue; }
      for (std::string_view w : unicode::pretokenize(f.text, m.pretok)) m.encode_bpe_word(w, out);
    }
  }
  if (add_bos && m.d.add_eos && m.d.eos_id >= 0) out.push_back(m.d.eos_id);
  return out;
}

// ---- decode --------------------------------------------------------------------------

std::string Tokenizer::Impl::piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= n())
    fail("tokenizer: token id " + std::to_string(id) + " out of range (vocab " + std::to_string(n()) + ")");
  const std::string& t = d.tokens[id];
  switch (types[id]) {
    case kControl:
    case kUnknown:
    case kUnused:
      return render_special ? t : std::string();  // suppressed, as current llama.cpp does
    case kUser:
      return t;  // user-defined tokens are literal text
    case kByte:
      if (spm) {
        const int b = parse_byte_token(t);
        return std::string(1, (char)b);
      }
      break;
    default:
      break;
  }
  if (spm) {
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, 3, kSpmSpace) == 0) { out += ' '; i += 3; }
      else out += t[i++];
    }
    return out;
  }
  // gpt2: each code point of the token is one byte under the GPT-2 mapping.
  std::string out;
  for (size_t i = 0; i < t.size();) {
    const size_t at = i;
    const uint32_t cp = unicode::utf8_next(t, i);
    const int b = cp == unicode::kInvalid ? -1 : unicode::cp_to_byte(cp);
    if (b >= 0) out += (char)b;
    else out.append(t, at, i - at);  // not in the mapping: keep the text as is
  }
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id) const { return impl_->piece(id, false); }
std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  return impl_->piece(id, render_special);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  const bool strip = impl_->spm && impl_->d.add_space_prefix;
  for (size_t i = 0; i < ids.size(); i++) {
    std::string p = impl_->piece(ids[i], false);
    if (i == 0 && strip && !p.empty() && p[0] == ' ') p.erase(0, 1);
    out += p;
  }
  return out;
}

// ---- streaming -----------------------------------------------------------------------

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_to_piece(id);
  const size_t keep_from = unicode::utf8_complete_prefix(pending_);
  // Everything before the (possibly) incomplete tail is final; malformed bytes in it
  // can never become valid, so they are replaced now rather than emitted raw.
  std::string out = unicode::utf8_sanitize(std::string_view(pending_).substr(0, keep_from));
  pending_.erase(0, keep_from);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = unicode::utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace knot
