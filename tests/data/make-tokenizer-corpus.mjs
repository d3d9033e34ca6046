#!/usr/bin/env node
// Writes tests/data/tokenizer-corpus.json: hard strings for the byte-level BPE tokenizers
// (tests/wasm/tokenizer-real.test.mjs, tests/native/text_real_vocab.cpp). Each entry is
// {"t": text} (JSON text; may hold lone surrogates) or {"hex": bytes} (invalid UTF-8).
// Edit the lists here and re-run:  node tests/data/make-tokenizer-corpus.mjs
import {writeFileSync} from "node:fs";

const S = [];
const add = (...xs) => { for (const x of xs) S.push({t: x}); };
const bytes = (...hs) => { for (const h of hs) S.push({hex: h}); };

// --- source code in several languages -------------------------------------------------
add(
  "def fib(n):\n    if n < 2:\n        return n\n    return fib(n-1) + fib(n-2)\n",
  "import numpy as np\nx = np.arange(10_000).reshape(100, 100)\nprint(x[::2, 1::3].sum())",
  "class Foo(Base):\n\t\"\"\"Docstring.\"\"\"\n\tdef __init__(self, *args, **kwargs):\n\t\tsuper().__init__(*args, **kwargs)\n",
  "#include <stdio.h>\nint main(void) {\n  printf(\"%d\\n\", 42);\n  return 0;\n}\n",
  "template <typename T>\nstd::vector<T> v{1, 2, 3};\nauto it = std::find_if(v.begin(), v.end(), [&](const T& x) { return x > 1; });",
  "fn main() {\n    let s: &str = \"héllo\";\n    println!(\"{s:?} {}\", s.len());\n}\n",
  "impl<'a, T: ?Sized + 'a> Deref for Box<'a, T> { type Target = T; }",
  "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
  "const f = async (a, b = {}) => { await fetch(`/api/${a}?q=${encodeURIComponent(b.q ?? '')}`); };",
  "export default function App() { return <div className=\"x\">{items.map(i => <Item key={i.id} {...i} />)}</div>; }",
  "SELECT u.id, COUNT(*) AS n FROM users u LEFT JOIN orders o ON o.user_id = u.id WHERE u.created_at >= '2024-01-01' GROUP BY u.id HAVING n > 3;",
  "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do echo \"${f%.txt}\"; done 2>&1 | tee log\n",
  "public static void main(String[] args) throws IOException {\n        System.out.println(\"Hello, World!\");\n    }",
  "<?php echo htmlspecialchars($_GET['q'] ?? '', ENT_QUOTES); ?>",
  "<html><head><meta charset=\"utf-8\"><title>T</title></head><body><p class='a b'>x&nbsp;y&amp;z</p></body></html>",
  "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\\u00e9\"}}",
  "---\nname: ci\non: [push]\njobs:\n  build:\n    runs-on: ubuntu-latest\n    steps:\n      - uses: actions/checkout@v4\n",
  "(defun fact (n) (if (<= n 1) 1 (* n (fact (- n 1)))))",
  "main :: IO ()\nmain = mapM_ print $ take 10 $ iterate (*2) 1",
  "let rec map f = function [] -> [] | x :: xs -> f x :: map f xs;;",
  "x <- c(1, 2, 3); df <- data.frame(a = x, b = x^2); summary(lm(b ~ a, data = df))",
  "\\begin{equation}\n  \\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2}\n\\end{equation}",
  "a+=1;b-=2;c*=3;d/=4;e%=5;f**=6;g//=7;h&=8;i|=9;j^=10;k>>=11;l<<=12;",
  "if (a != b && c !== d || e === f) { x ??= y; z ||= w; }",
  "    \n    \n\n  indented\n\t\ttabs\n",
  "// comment\n/* block\n   comment */\n/** doc */",
  "0x7FFFFFFF 0b1010_1010 0o777 1_000_000 3.14159e-10 .5 5. 1e+100",
  "std::map<std::string, std::vector<std::pair<int, double>>> m;",
  "@decorator\nasync def handler(request: Request) -> Response:\n    ...\n",
  "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n-old\n+new\n context\n",
);
// --- whitespace runs, tabs, newlines, CRLF ---------------------------------------------
for (const n of [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 33, 64]) add(" ".repeat(n), "a" + " ".repeat(n) + "b", " ".repeat(n) + "x");
for (const n of [1, 2, 3, 5, 9]) add("\t".repeat(n), "\n".repeat(n), "x" + "\t".repeat(n) + "y", "a" + "\n".repeat(n) + "b");
add("\r\n", "\r\n\r\n", "line1\r\nline2\r\n", "a\r\n\r\nb", "\r", "a\rb", "\n\r", " \r\n ", "\t\r\n\t", "x  \r\n  y",
    " \n \n ", "  \n\n  ", "\n \n", "a \n", "a  \n\n", "\t \t \t", " \t\n\r\u000b\u000c", "end with space ", "end with spaces   ",
    "\u00a0nbsp\u00a0\u00a0x", "\u3000ideographic\u3000space", "en\u2002em\u2003thin\u2009hair\u200a", "line\u2028sep\u2029para",
    "\u0085next line", "zero\u200bwidth\u200cjoin\u200dx", "  leading", "\n\nleading newlines", "trailing newlines\n\n\n");
// --- digits ---------------------------------------------------------------------------
add("0", "12", "123", "1234", "12345", "123456", "1234567", "12345678901234567890123456789012345678901234567890",
    "3.14159265358979323846264338327950288419716939937510", "1,234,567.89", "-42", "+1 (555) 010-9999", "2024-01-31T23:59:59Z",
    "v1.2.3-rc.4+build.5", "192.168.0.1:8080", "a1b22c333d4444", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "１２３４５", "①②③", "Ⅻ ⅻ", "²³¹",
    "1/2 ½ ¾", "9999999999999999999", "0000000", "x = 10**18 + 7");
// --- contractions and English ----------------------------------------------------------
add("don't", "I'm", "you're", "we've", "they'll", "he'd", "it's", "DON'T", "I'M", "YOU'RE", "We'Ve", "THEY'LL", "'s", "'S",
    "' s", "''", "'''", "rock 'n' roll", "o'clock", "y'all'd've", "the dog's bone's", "’s curly apostrophe’s", "'twas",
    "The quick brown fox jumps over the lazy dog.", "Hello, world!", "HELLO WORLD", "hello   world", "Mr. O'Neil's",
    "e.g. i.e. etc.", "What?! No way!!!", "...", "— em dash — and – en dash –", "“quoted” ‘single’ «guillemets» „low“",
    "a-b_c.d/e\\f|g", "email@example.com", "https://example.com/path?x=1&y=2#frag", "C:\\Users\\name\\file.txt",
    "#hashtag @mention $100 %50 ^caret &amp *star", "~tilde `backtick` [brackets] {braces} <angles>");
// --- CJK -------------------------------------------------------------------------------
add("你好，世界！", "我爱北京天安门。", "人工智能正在改变世界", "中文English混合123", "日本語のテキストです。", "ひらがな カタカナ 漢字",
    "한국어 텍스트입니다", "안녕하세요, 세계!", "　全角スペース　", "繁體中文與简体中文", "𠀀𠀁𪚥 (CJK Ext B)", "ｶﾀｶﾅ ﾊﾝｶｸ",
    "第1章　はじめに", "「引用」『二重』【括弧】", "中文，标点。符号！问号？", "上海市浦东新区 200120", "東京都渋谷区1-2-3",
    "龍龘靐齉", "汉字/漢字·かな", "ㄅㄆㄇㄈ 注音");
// --- Arabic, Hebrew, Hindi and other scripts -------------------------------------------
add("مرحبا بالعالم", "السَّلَامُ عَلَيْكُمْ", "العربية ١٢٣ والإنجليزية abc", "שלום עולם", "עִבְרִית עם ניקוד",
    "नमस्ते दुनिया", "हिन्दी भाषा में लिखा गया पाठ।", "क्षत्रिय ज्ञान श्री", "বাংলা ভাষা", "தமிழ் மொழி", "తెలుగు", "ગુજરાતી",
    "ಕನ್ನಡ", "മലയാളം", "ਪੰਜਾਬੀ", "සිංහල", "ภาษาไทย สวัสดีครับ", "ພາສາລາວ", "မြန်မာဘာသာ", "ខ្មែរ", "ქართული ენა", "Հայերեն",
    "አማርኛ ቋንቋ", "ᐃᓄᒃᑎᑐᑦ", "Ελληνικά κείμενα", "Русский текст, ёлки-палки!", "Українська мова: ґ є і ї", "Српски језик",
    "Tiếng Việt có dấu", "Türkçe İıĞğŞş", "Polski: zażółć gęślą jaźń", "Deutsch: Größe, Straße, Übung", "Français: ça, où, œuvre",
    "Español: ¿Qué tal? ¡Bien!", "Íslenska: þ ð æ", "ꦗꦮ", "ᠮᠣᠩᠭᠣᠯ", "ⴰⵎⴰⵣⵉⵖ", "𐌰𐌱𐌲 Gothic", "ʻŌlelo Hawaiʻi");
// --- emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors -------------
add("😀", "😀😃😄😁", "👍", "👍🏻👍🏼👍🏽👍🏾👍🏿", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🧑‍🤝‍🧑", "🏳️‍🌈", "🏴‍☠️", "❤️", "❤", "♥️",
    "🇺🇸🇯🇵🇩🇪", "🇺", "1️⃣2️⃣#️⃣", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "👁️‍🗨️", "🤷‍♀️🤷🏿‍♂️", "text 😀 text", "emoji😀glued", "🦙 llama", "🔥🔥🔥",
    "👩‍❤️‍💋‍👨", "🫠🫶🏽", "✈︎ text-style", "☺️☺", "👋🏼 Hi!", "🎉🎊🎈", "🧬🧪🔬", "😀\n😃\t😄");
// --- combining marks, normalization forms ---------------------------------------------
add("e\u0301", "caf\u00e9", "cafe\u0301", "n\u0303", "a\u0308o\u0308u\u0308", "A\u030a", "\u212b", "\u1e9b\u0323", "Z\u0351\u0352\u0353\u0354\u0355a\u0356\u0357l\u0358\u0359g\u035ao",
    "\u0915\u094d\u0937", "\u00e9\u0301", "\u0301 leading combining", "x\u20dd", "\ufb01 ligature", "\u2126 ohm", "\u00c5\u0041\u030a", "ｆｕｌｌ",
    "\u1100\u1161\u11a8 conjoining jamo", "\uac01 precomposed", "q\u0307\u0323", "\u0041\u0300\u0041\u0301\u0041\u0302");
// --- special-token text (with and without special parsing) -----------------------------
add("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "<|im_start|>", "<|im_end|>", "<|endoftext|>",
    "text<|endoftext|>text", "<|im_start|><|im_end|>", "<|im_start |>", "<|im_start|", "|im_start|>", "<<|im_start|>>",
    "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>{\"name\": \"f\"}</tool_call>", "<|fim_prefix|>def f(<|fim_suffix|>)<|fim_middle|>",
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>", "<|eot_id|>", "<|end_of_text|>",
    "<|reserved_special_token_0|>", "<|reserved_special_token_250|>", "<|reserved_special_token_251|>", "<s></s><unk>", "</s>",
    "<|vision_start|><|image_pad|><|vision_end|>", "x<|im_end|>y<|im_end|>z", "<|IM_START|>", "<|im_start|>\u00e9",
    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "[INST] <<SYS>> sys <</SYS>> [/INST]", "<|user|>\nhi</s>\n<|assistant|>\n");
// --- lone surrogates (JSON escapes: UTF-8 encoding turns each into U+FFFD) ---------------
S.push({t: "a\ud800b"}, {t: "\udc00"}, {t: "x\ud83dy"}, {t: "\ude00\ud83d"}, {t: "ok \ud800\ud800 ok"});
// --- invalid UTF-8 bytes (hex) ---------------------------------------------------------
bytes("ff", "80", "c0af", "e28228", "61ff62", "f09f98", "f09f98 41".replace(" ", ""), "eda080", "f4908080", "fe", "c3",
      "20e2", "48656c6c6fc0", "e4bda0e5a5bdff", "0a80 0a".replace(/ /g, ""), "efbbbf", "efbbbf68656c6c6f", "00", "0001020304",
      "7f1b5b306d", "ffffff", "61e2808262");
// --- control characters, odd punctuation, long repeats ---------------------------------
add("\u0000", "a\u0000b", "\u0007bell\u001b[31mred\u001b[0m", "\u00ad soft hyphen", "\ufeffBOM at start", "\ufffd replacement",
    "\u202eRTL override\u202c", "\u200e\u200f marks", "!!!!!!!!!!!!!!!!!!!!!!!!", "--------------------------------------------------------",
    "================", "________", "********", "........................................",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "abababababababababababababab",
    "🤖".repeat(20), "中".repeat(40), "ab ".repeat(30), "\n".repeat(40), " \t".repeat(20), "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.",
    "x".repeat(300), "  ".repeat(50) + "end", ".".repeat(100), "ℕℤℚℝℂ ∀x∈ℝ: x²≥0 ∑∏∫∮ √∛ ≤≥≠≈", "←↑→↓↔ ⇒⇔ ∞ ♠♣♥♦ ☃ ★☆",
    "© ® ™ § ¶ † ‡ • … ‰ ′ ″", "€ £ ¥ ₹ ₽ ₩ ₿ ¢", "¡¿", "ǅ ǈ ǋ ǲ titlecase", "ß ẞ ﬀ ﬃ", "ı İ i̇", "Ⅰ Ⅱ Ⅲ Ⅳ", "µ μ", "ª º");
// --- mixed / adversarial ---------------------------------------------------------------
add("a", "A", " ", "", ".", "\"", "'", "\\", "/", "Ġ", "Ċ", "ĠĠ", "âĢĻ", "Ã©", "<0x0A>", "<0xFF>", "[PAD151700]",
    "word'S", "x's'll'd", "123abc456", "abc123def", "a1", "1a", "_x_", "__init__", "x__y", "$x", "a.b.c", "1.2.3",
    "Hello\u00a0World", "tab\tseparated\tvalues\t1\t2", "CSV,with,commas,,and,,,empties", "semi;colon;list",
    " leading space word", "  two leading", "\tleading tab", "mixed \t \n whitespace \r\n end", "?!.,;:", " ?!", "! ! !",
    "'s 't 're 've 'm 'll 'd", " 's", "a's", "1's", "é's", "'ll've", "'\n", "'\u00e9",
    "Ünïcödé wörds with ümlauts", "snake_case_variable_name", "camelCaseVariableName", "SCREAMING_SNAKE", "kebab-case-name",
    "(parenthesized (nested (deeply)))", "[[1, 2], [3, 4]]", "{{template}}", "{%- if x -%}", "<<<>>>", "->=>::", "a->b=>c",
    "#![no_std]", "#[derive(Debug)]", "@@ -1 +1 @@", "${HOME}/.config", "%s %d %.2f %%", "\\n\\t\\r", "\\u00e9",
    "x\n\ny\n\n\nz", "\n\n\n\n\n\n\n\n", "a\n b\n  c\n   d", "  \r\n\t  \r\n", "\u000b\u000c", "end.\n");
// --- long multi-line document ----------------------------------------------------------
add(["# Title", "", "Some *markdown* with `code` and **bold**.", "", "- item 1", "- item 2", "  - nested", "",
     "| a | b |", "|---|---|", "| 1 | 2 |", "", "```python", "print('hi')", "```", "", "> quote", "", "1. first", "2. second"].join("\n"));
add("The year 2024 had 366 days; 1,000,000 people × 3.5% = 35,000. Prices: $1,299.99 (was $1,499). Tel: +44 20 7946 0958.");
add("Mixed: English, 中文, العربية, हिन्दी, русский, 日本語, 한국어, emoji 🎉 and numbers ١٢٣ ४५६ 789.");

writeFileSync(new URL("./tokenizer-corpus.json", import.meta.url), "[\n" + S.map((e) => " " + JSON.stringify(e)).join(",\n") + "\n]\n");
console.log(`${S.length} entries`);
