// text_chat.cpp — chat template detection and rendering.
#include <gtest/gtest.h>

#include "text/chat.h"
#include "kernels/common.h"
#include "text_util.h"

using knot::ChatMessage;
using knot::TokenizerData;

namespace {

// Jinja snippets in the style of the real templates. Only their markers matter to
// detect_chat_template; the built-in formats are tested by passing its name, since by default
// a template that parses is rendered as written (DefaultIsTheFilesTemplate).
const char* kChatmlTmpl =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
const char* kLlama3Tmpl =
    "{% for message in messages %}{% set content = '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{{ content }}{% endfor %}";
const char* kLlama2Tmpl =
    "{% if messages[0]['role'] == 'system' %}...{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}";

// Qwen2.5 style: the system header first appears in a tools branch without a literal
// prompt; the default prompt is in the later else-branch.
const char* kQwen25Tmpl =
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] }}{%- else %}{{- 'You are Qwen, created by Alibaba Cloud.' }}{%- endif %}"
    "{%- else %}{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}{%- endif %}";
const char* kZephyrTmpl =
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + eos_token }}"
    "{% endif %}{% if loop.last and add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}{% endfor %}";

TokenizerData vocab_with(std::vector<std::string> extra, const std::string& tmpl) {
  TokenizerData d;
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", "</s>"};
  for (auto& t : extra) d.tokens.push_back(t);
  d.bos_id = 1;
  d.eos_id = 2;
  d.chat_template = tmpl;
  return d;
}

const std::vector<ChatMessage> kConv = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Who are you?"}};

}  // namespace

TEST(TextChat, DetectByMarkers) {
  EXPECT_EQ(knot::detect_chat_template(vocab_with({}, kChatmlTmpl)), "chatml");
  EXPECT_EQ(knot::detect_chat_template(vocab_with({}, kLlama3Tmpl)), "llama3");
  EXPECT_EQ(knot::detect_chat_template(vocab_with({}, kLlama2Tmpl)), "llama2");
  // No template: by the vocab's special tokens.
  EXPECT_EQ(knot::detect_chat_template(vocab_with({"<|im_start|>", "<|im_end|>"}, "")), "chatml");
  EXPECT_EQ(knot::detect_chat_template(vocab_with({"<|start_header_id|>"}, "")), "llama3");
  EXPECT_EQ(knot::detect_chat_template(vocab_with({}, "")), "llama2");
}

// A template that neither parses nor carries a built-in format's markers is an error quoting
// its start and saying why (it used to render as Llama-2, silently wrong); picking a format
// by name still renders.
TEST(TextChat, UnrecognisedTemplateIsAnErrorNamingIt) {
  const TokenizerData odd = vocab_with({"<|im_start|>", "<|im_end|>"}, "{{ unknown format }}");
  auto message = [&](auto fn) -> std::string {
    try {
      fn();
    } catch (const knot::Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  for (const std::string m : {message([&] { knot::detect_chat_template(odd); }),
                              message([&] { knot::default_chat_template(odd); }),
                              message([&] { knot::apply_chat_template(odd, {{"user", "Hi"}}, true); })}) {
    EXPECT_NE(m.find("chat template '{{ unknown format }}' (20 bytes)"), std::string::npos) << m;
    EXPECT_NE(m.find("none of the built-in formats' markers"), std::string::npos) << m;
    EXPECT_NE(m.find("pick a template explicitly (chatml, llama2, llama3, zephyr)"), std::string::npos) << m;
  }
  // the default path also says why its own Jinja rendering is out: the parse error
  EXPECT_NE(message([&] { knot::default_chat_template(odd); }).find("cannot parse it ("), std::string::npos);
  // a long template is quoted by its first 60 bytes, on one line
  const std::string long_tmpl = "{{ unknown\nformat }}" + std::string(100, 'x');
  const std::string m = message([&] { knot::default_chat_template(vocab_with({}, long_tmpl)); });
  EXPECT_NE(m.find("'{{ unknown format }}" + std::string(40, 'x') + "...' (120 bytes)"), std::string::npos) << m;
  // explicit picks render
  EXPECT_EQ(knot::apply_chat_template(odd, {{"user", "Hi"}}, true, "chatml"),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(knot::apply_chat_template(odd, {{"user", "Hi"}}, true, "llama2"), "[INST] Hi [/INST]");
}

TEST(TextChat, ChatML) {
  const TokenizerData d = vocab_with({}, kChatmlTmpl);
  EXPECT_EQ(knot::apply_chat_template(d, kConv, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nWho are you?<|im_end|>\n"
            "<|im_start|>assistant\n");
  // No system message: the template's literal default system prompt is used.
  EXPECT_EQ(knot::apply_chat_template(d, {{"user", "Hi"}}, false),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(knot::apply_chat_template(vocab_with({}, kQwen25Tmpl), {{"user", "Hi"}}, true, "chatml"),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // Without a template there is no default system prompt.
  EXPECT_EQ(knot::apply_chat_template(vocab_with({"<|im_start|>"}, ""), {{"user", "Hi"}}, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(TextChat, Llama2) {
  const TokenizerData d = vocab_with({}, kLlama2Tmpl);
  EXPECT_EQ(knot::apply_chat_template(d, kConv, true),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Who are you? [/INST]");
  EXPECT_EQ(knot::apply_chat_template(d, {{"user", "  Hi  "}}, true), "[INST] Hi [/INST]");
}

TEST(TextChat, Llama3) {
  const TokenizerData d = vocab_with({}, kLlama3Tmpl);
  EXPECT_EQ(knot::apply_chat_template(d, {{"system", "Be brief."}, {"user", " Hi\n"}}, true, knot::detect_chat_template(d)),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(knot::apply_chat_template(d, {{"user", "Hi"}}, false, knot::detect_chat_template(d)),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
}

TEST(TextChat, Zephyr) {
  const TokenizerData d = vocab_with({}, kZephyrTmpl);
  EXPECT_EQ(knot::detect_chat_template(d), "zephyr");
  EXPECT_EQ(knot::apply_chat_template(d, {{"system", "Be brief."}, {"user", "Hi"}}, true, knot::detect_chat_template(d)),
            "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\n");
}

TEST(TextChat, ForceByName) {
  const TokenizerData d = vocab_with({}, kLlama2Tmpl);
  EXPECT_EQ(knot::apply_chat_template(d, {{"user", "Hi"}}, true, "chatml"),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_THROW(knot::apply_chat_template(d, {{"user", "Hi"}}, true, "vicuna"), knot::Error);
  EXPECT_EQ(knot::chat_template_names().size(), 4u);
}

// No forced name: the file's own template when the interpreter parses it (every chat path
// takes this default); a template it cannot parse falls back to its markers' format; no
// template: the vocab's special tokens.
TEST(TextChat, DefaultIsTheFilesTemplate) {
  const TokenizerData zephyr = vocab_with({}, kZephyrTmpl);
  EXPECT_EQ(knot::default_chat_template(zephyr), "jinja");
  // as written: this template drops system messages (the built-in Zephyr format keeps them)
  EXPECT_EQ(knot::apply_chat_template(zephyr, {{"system", "Be brief."}, {"user", "Hi"}}, true),
            "<|user|>\nHi</s><|assistant|>");
  EXPECT_EQ(knot::apply_chat_template(zephyr, {{"system", "Be brief."}, {"user", "Hi"}}, true),
            knot::apply_chat_template(zephyr, {{"system", "Be brief."}, {"user", "Hi"}}, true, "jinja"));
  // kLlama2Tmpl is a fragment (an unclosed if): its markers name Llama-2
  EXPECT_THROW(knot::apply_chat_template(vocab_with({}, kLlama2Tmpl), {{"user", "Hi"}}, true, "jinja"), knot::Error);
  EXPECT_EQ(knot::default_chat_template(vocab_with({}, kLlama2Tmpl)), "llama2");
  EXPECT_EQ(knot::apply_chat_template(vocab_with({}, kLlama2Tmpl), {{"user", "Hi"}}, true), "[INST] Hi [/INST]");
  EXPECT_EQ(knot::default_chat_template(vocab_with({"<|im_start|>"}, "")), "chatml");
  // an error the template raises while rendering is the caller's, not a fallback
  const TokenizerData raising = vocab_with({}, "{{ raise_exception('roles must alternate') }}");
  EXPECT_EQ(knot::default_chat_template(raising), "jinja");
  EXPECT_THROW(knot::apply_chat_template(raising, {{"user", "Hi"}}, true), knot::Error);
}

// The Llama-2 prompt encodes with the markers as text and "</s><s>" as special tokens.
TEST(TextChat, Llama2PromptTokenizes) {
  KNOT_REQUIRE_FILE(knot_test::shared_model("llama-2-tiny-random.gguf"));
  const knot::Tokenizer& tok = knot_test::shared_tokenizer("llama-2-tiny-random.gguf");
  EXPECT_EQ(knot::detect_chat_template(tok.data()), "llama2");  // file has no template
  const std::string prompt = knot::apply_chat_template(tok.data(), kConv, true);
  const std::vector<int32_t> ids = tok.encode(prompt, true, true);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 2);  // BOS + the second turn's <s>
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);  // the answer's </s>
  // Decoded: control tokens vanish, and the text after "<s>" got the SPM space prefix.
  EXPECT_EQ(tok.decode(ids), " " + std::string(prompt).replace(prompt.find("</s><s>"), 7, " "));
}
