// unicode.cpp — UTF-8 helpers, character classes and the BPE pre-tokenizers.
#include "text/unicode.h"

#include <algorithm>
#include <array>

namespace knot::unicode {

// ---- UTF-8 -------------------------------------------------------------------------

size_t utf8_valid_len(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const uint8_t b0 = (uint8_t)s[i];
  if (b0 < 0x80) return 1;
  size_t len;
  uint32_t cp, min;
  if ((b0 & 0xE0) == 0xC0) { len = 2; cp = b0 & 0x1F; min = 0x80; }
  else if ((b0 & 0xF0) == 0xE0) { len = 3; cp = b0 & 0x0F; min = 0x800; }
  else if ((b0 & 0xF8) == 0xF0) { len = 4; cp = b0 & 0x07; min = 0x10000; }
  else return 0;  // continuation byte or 0xF8..0xFF
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; k++) {
    const uint8_t b = (uint8_t)s[i + k];
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

uint32_t utf8_next(std::string_view s, size_t& i) {
  const size_t len = utf8_valid_len(s, i);
  if (len == 0) { i += 1; return kInvalid; }
  const uint8_t b0 = (uint8_t)s[i];
  uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < len; k++) cp = (cp << 6) | ((uint8_t)s[i + k] & 0x3F);
  i += len;
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += (char)cp;
  } else if (cp < 0x800) {
    out += (char)(0xC0 | (cp >> 6));
    out += (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += (char)(0xE0 | (cp >> 12));
    out += (char)(0x80 | ((cp >> 6) & 0x3F));
    out += (char)(0x80 | (cp & 0x3F));
  } else {
    out += (char)(0xF0 | (cp >> 18));
    out += (char)(0x80 | ((cp >> 12) & 0x3F));
    out += (char)(0x80 | ((cp >> 6) & 0x3F));
    out += (char)(0x80 | (cp & 0x3F));
  }
}

std::string utf8_encode(uint32_t cp) {
  std::string s;
  utf8_append(s, cp);
  return s;
}

// True if s[i..] (which runs to the end of s) is a valid but truncated sequence start.
static bool is_incomplete_tail(std::string_view s, size_t i) {
  const uint8_t b0 = (uint8_t)s[i];
  size_t len;
  if ((b0 & 0xE0) == 0xC0) len = 2;
  else if ((b0 & 0xF0) == 0xE0) len = 3;
  else if ((b0 & 0xF8) == 0xF0) len = 4;
  else return false;
  const size_t have = s.size() - i;
  if (have >= len) return false;
  for (size_t k = 1; k < have; k++)
    if (((uint8_t)s[i + k] & 0xC0) != 0x80) return false;
  // Reject starts that can never become valid (overlong C0/C1, > F4, and the second
  // byte ranges that would give overlong / surrogate / too-large code points).
  if (b0 == 0xC0 || b0 == 0xC1 || b0 > 0xF4) return false;
  if (have >= 2) {
    const uint8_t b1 = (uint8_t)s[i + 1];
    if (b0 == 0xE0 && b1 < 0xA0) return false;
    if (b0 == 0xED && b1 > 0x9F) return false;
    if (b0 == 0xF0 && b1 < 0x90) return false;
    if (b0 == 0xF4 && b1 > 0x8F) return false;
  }
  return true;
}

size_t utf8_complete_prefix(std::string_view s) {
  // An incomplete tail is at most 3 bytes long; look back that far for its lead byte.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    const size_t i = n - back;
    const uint8_t b = (uint8_t)s[i];
    if ((b & 0xC0) != 0x80) return is_incomplete_tail(s, i) ? i : n;
  }
  return n;
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t len = utf8_valid_len(s, i);
    if (len > 0) {
      out.append(s.data() + i, len);
      i += len;
      continue;
    }
    // Maximal subpart: a lead byte plus the continuation bytes that still fit a
    // valid prefix collapse to one U+FFFD (the WHATWG / Unicode recommendation).
    size_t j = i + 1;
    const size_t lim = std::min(s.size(), i + 4);
    while (j < lim && ((uint8_t)s[j] & 0xC0) == 0x80 && is_incomplete_tail(s.substr(0, j + 1), i)) j++;
    out += "\xEF\xBF\xBD";
    i = j;
  }
  return out;
}

// ---- character classes -------------------------------------------------------------
// Compact range tables, NOT exhaustive Unicode: they cover Latin (incl. Latin-1,
// Extended-A/B, IPA, Extended Additional), Greek (+ Extended), Cyrillic (+ Supplement),
// Armenian, Hebrew, Arabic, Devanagari, Thai, Georgian, Hangul, Hiragana, Katakana,
// CJK Unified Ideographs (+ Ext A..F, compatibility), Yi, fullwidth forms and common
// letter-like symbols. Combining marks (\p{M}) are deliberately not letters, as in
// Unicode. Scripts not listed fall into the punctuation/other class.

struct Range { uint32_t lo, hi; };

static constexpr Range kLetters[] = {
  {0x0041, 0x005A}, {0x0061, 0x007A}, {0x00AA, 0x00AA}, {0x00B5, 0x00B5},
  {0x00BA, 0x00BA}, {0x00C0, 0x00D6}, {0x00D8, 0x00F6}, {0x00F8, 0x02C1},
  {0x02C6, 0x02D1}, {0x02E0, 0x02E4}, {0x02EC, 0x02EC}, {0x02EE, 0x02EE},
  {0x0370, 0x0374}, {0x0376, 0x0377}, {0x037A, 0x037D}, {0x037F, 0x037F},
  {0x0386, 0x0386}, {0x0388, 0x038A}, {0x038C, 0x038C}, {0x038E, 0x03A1},
  {0x03A3, 0x03F5}, {0x03F7, 0x0481}, {0x048A, 0x052F}, {0x0531, 0x0556},
  {0x0559, 0x0559}, {0x0560, 0x0588}, {0x05D0, 0x05EA}, {0x05EF, 0x05F2},
  {0x0620, 0x064A}, {0x066E, 0x066F}, {0x0671, 0x06D3}, {0x06D5, 0x06D5},
  {0x06E5, 0x06E6}, {0x06EE, 0x06EF}, {0x06FA, 0x06FC}, {0x06FF, 0x06FF},
  {0x0904, 0x0939}, {0x093D, 0x093D}, {0x0950, 0x0950}, {0x0958, 0x0961},
  {0x0971, 0x0980}, {0x0E01, 0x0E30}, {0x0E32, 0x0E33}, {0x0E40, 0x0E46},
  {0x10A0, 0x10C5}, {0x10C7, 0x10C7}, {0x10CD, 0x10CD}, {0x10D0, 0x10FA},
  {0x10FC, 0x10FF}, {0x1100, 0x1248}, {0x1C80, 0x1C88}, {0x1D00, 0x1DBF},
  {0x1E00, 0x1F15}, {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D},
  {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D},
  {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},
  {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB},
  {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2071, 0x2071},
  {0x207F, 0x207F}, {0x2090, 0x209C}, {0x2102, 0x2102}, {0x2107, 0x2107},
  {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124},
  {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2139},
  {0x213C, 0x213F}, {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2184},
  {0x2C00, 0x2CE4}, {0x2D00, 0x2D25}, {0x3005, 0x3006}, {0x3031, 0x3035},
  {0x303B, 0x303C}, {0x3041, 0x3096}, {0x309D, 0x309F}, {0x30A1, 0x30FA},
  {0x30FC, 0x30FF}, {0x3105, 0x312F}, {0x3131, 0x318E}, {0x31A0, 0x31BF},
  {0x31F0, 0x31FF}, {0x3400, 0x4DBF}, {0x4E00, 0x9FFF}, {0xA000, 0xA48C},
  {0xA640, 0xA66E}, {0xA67F, 0xA69D}, {0xA722, 0xA788}, {0xA78B, 0xA7CA},
  {0xAC00, 0xD7A3}, {0xD7B0, 0xD7C6}, {0xD7CB, 0xD7FB}, {0xF900, 0xFA6D},
  {0xFA70, 0xFAD9}, {0xFB00, 0xFB06}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A},
  {0xFF66, 0xFFBE}, {0x20000, 0x2A6DF}, {0x2A700, 0x2EBE0}, {0x2F800, 0x2FA1D},
  {0x30000, 0x3134A},
};

static constexpr Range kNumbers[] = {
  {0x0030, 0x0039}, {0x00B2, 0x00B3}, {0x00B9, 0x00B9}, {0x00BC, 0x00BE},
  {0x0660, 0x0669}, {0x06F0, 0x06F9}, {0x0966, 0x096F}, {0x0E50, 0x0E59},
  {0x2070, 0x2070}, {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2182},
  {0x2185, 0x2189}, {0x2460, 0x249B}, {0x24EA, 0x24FF}, {0x2776, 0x2793},
  {0x3007, 0x3007}, {0x3021, 0x3029}, {0x3038, 0x303A}, {0x3192, 0x3195},
  {0x3220, 0x3229}, {0x3248, 0x324F}, {0x3251, 0x325F}, {0x3280, 0x3289},
  {0x32B1, 0x32BF}, {0xFF10, 0xFF19},
};

template <size_t N>
static bool in_table(const Range (&t)[N], uint32_t cp) {
  size_t lo = 0, hi = N;  // binary search for the last range with lo <= cp
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (t[mid].lo <= cp) lo = mid + 1; else hi = mid;
  }
  return lo > 0 && cp <= t[lo - 1].hi;
}

bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return cp != kInvalid && in_table(kLetters, cp);
}

bool is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return cp != kInvalid && in_table(kNumbers, cp);
}

bool is_space(uint32_t cp) {
  // White_Space property (what \s matches in Unicode-aware regex engines).
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// ---- GPT-2 byte mapping ------------------------------------------------------------

namespace {
struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  ByteMap() {
    // Printable bytes keep their code point; the rest are moved to 256, 257, ... in
    // byte order so that every byte becomes a visible, non-space character.
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
      const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = keep ? (uint32_t)b : next++;
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}
}  // namespace

uint32_t byte_to_cp(uint8_t b) { return byte_map().to_cp[b]; }

int cp_to_byte(uint32_t cp) {
  if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
    return (int)cp;
  if (cp >= 256 && cp < 256 + 68) {
    // 68 bytes are remapped: 0x00-0x20 (33), 0x7F-0xA0 (34), 0xAD (1).
    const uint32_t k = cp - 256;
    if (k < 33) return (int)k;
    if (k < 67) return (int)(0x7F + (k - 33));
    return 0xAD;
  }
  return -1;
}

std::string bytes_to_mapped(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) utf8_append(out, byte_to_cp(c));
  return out;
}

// ---- pre-tokenizers ----------------------------------------------------------------

namespace {

struct Cursor {
  std::vector<uint32_t> cp;   // [n] code points (kInvalid for a malformed byte)
  std::vector<size_t> off;    // [n+1] byte offset of each code point, off[n] = size
  size_t n = 0;
  bool L(size_t j) const { return j < n && is_letter(cp[j]); }
  bool N(size_t j) const { return j < n && is_number(cp[j]); }
  bool S(size_t j) const { return j < n && is_space(cp[j]); }
  bool P(size_t j) const { return j < n && !is_space(cp[j]) && !is_letter(cp[j]) && !is_number(cp[j]); }
  bool NL(size_t j) const { return j < n && (cp[j] == '\r' || cp[j] == '\n'); }
  bool is(size_t j, uint32_t c) const { return j < n && cp[j] == c; }
  bool is_ci(size_t j, char c) const {  // ASCII case-insensitive
    return j < n && cp[j] < 0x80 && ((cp[j] | 0x20) == (uint32_t)c);
  }
};

// Contraction at i ('s 't 're 've 'm 'll 'd); returns match length in code points.
size_t match_contraction(const Cursor& c, size_t i, bool ci) {
  if (!c.is(i, '\'')) return 0;
  auto eq = [&](size_t j, char ch) { return ci ? c.is_ci(j, ch) : c.is(j, (uint32_t)ch); };
  if (eq(i + 1, 's') || eq(i + 1, 't')) return 2;
  if ((eq(i + 1, 'r') || eq(i + 1, 'v')) && eq(i + 2, 'e')) return 3;
  if (eq(i + 1, 'm')) return 2;
  if (eq(i + 1, 'l') && eq(i + 2, 'l')) return 3;
  if (eq(i + 1, 'd')) return 2;
  return 0;
}

// \s+(?!\S) then \s+ : whitespace run, leaving its last char to a following non-space.
size_t match_space_run(const Cursor& c, size_t i) {
  size_t j = i;
  while (c.S(j)) j++;
  if (j == i) return 0;
  if (j < c.n && j - i > 1) return j - 1 - i;  // \s+(?!\S) backs off one
  return j - i;  // at end of text, or a single space before \S (falls to \s+)
}

size_t match_gpt2(const Cursor& c, size_t i) {
  if (size_t m = match_contraction(c, i, false)) return m;
  const size_t sp = c.is(i, ' ') ? 1 : 0;
  size_t j = i + sp;
  if (c.L(j)) { while (c.L(j)) j++; return j - i; }
  if (c.N(j)) { while (c.N(j)) j++; return j - i; }
  if (c.P(j)) { while (c.P(j)) j++; return j - i; }
  return match_space_run(c, i);
}

size_t match_qwen2(const Cursor& c, size_t i, size_t max_digits) {
  if (size_t m = match_contraction(c, i, true)) return m;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  {
    size_t j = i;
    if (!c.L(j) && j < c.n && !c.NL(j) && !c.N(j) && c.L(j + 1)) j++;
    if (c.L(j)) { while (c.L(j)) j++; return j - i; }
  }
  // \p{N}{1,max}
  if (c.N(i)) {
    size_t j = i;
    while (c.N(j) && j - i < max_digits) j++;
    return j - i;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  {
    size_t j = i + (c.is(i, ' ') ? 1 : 0);
    if (c.P(j)) {
      while (c.P(j)) j++;
      while (c.NL(j)) j++;
      return j - i;
    }
  }
  // \s*[\r\n]+ : up to and including the last newline of the whitespace run
  {
    size_t j = i, last_nl = 0;
    bool any = false;
    while (c.S(j)) { if (c.NL(j)) { last_nl = j; any = true; } j++; }
    if (any) return last_nl + 1 - i;
  }
  return match_space_run(c, i);
}

}  // namespace

std::vector<std::string_view> pretokenize(std::string_view text, PreTok dialect) {
  Cursor c;
  c.cp.reserve(text.size());
  c.off.reserve(text.size() + 1);
  for (size_t i = 0; i < text.size();) {
    c.off.push_back(i);
    c.cp.push_back(utf8_next(text, i));
  }
  c.n = c.cp.size();
  c.off.push_back(text.size());

  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < c.n) {
    size_t m = dialect == PreTok::Gpt2 ? match_gpt2(c, i)
                                       : match_qwen2(c, i, dialect == PreTok::Qwen2 ? 1 : 3);
    if (m == 0) m = 1;  // unreachable: every class is covered; keeps progress certain
    out.push_back(text.substr(c.off[i], c.off[i + m] - c.off[i]));
    i += m;
  }
  return out;
}

}  // namespace knot::unicode
