// chat.cpp — chat templates recognised by marker text, rendered by hand.
#include "text/chat.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "kernels/common.h"
#include "text/jinja.h"

namespace knot {

namespace {

bool vocab_has(const TokenizerData& tok, const char* text) {
  return std::find(tok.tokens.begin(), tok.tokens.end(), text) != tok.tokens.end();
}

std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t a = s.find_first_not_of(ws);
  if (a == std::string::npos) return {};
  const size_t b = s.find_last_not_of(ws);
  return s.substr(a, b - a + 1);
}

std::string token_text(const TokenizerData& tok, int32_t id, const char* fallback) {
  return id >= 0 && id < (int32_t)tok.tokens.size() ? tok.tokens[id] : std::string(fallback);
}

// A ChatML template may hard-code a default system prompt, e.g. Qwen2's
// '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n'. Find a literal one:
// text between the system header and <|im_end|> with no Jinja expression in it.
std::string chatml_default_system(const std::string& tmpl) {
  const std::string end = "<|im_end|>";
  for (const char* head_c : {"<|im_start|>system\\n", "<|im_start|>system\n"}) {
    const std::string head = head_c;
    for (size_t pos = tmpl.find(head); pos != std::string::npos; pos = tmpl.find(head, pos + 1)) {
      const size_t a = pos + head.size();
      const size_t b = tmpl.find(end, a);
      if (b == std::string::npos) continue;
      std::string body = tmpl.substr(a, b - a);
      if (body.empty() || body.find_first_of("'\"{}+") != std::string::npos) continue;
      std::string out;  // undo the Jinja string escapes that can appear here
      for (size_t i = 0; i < body.size(); i++) {
        if (body[i] == '\\' && i + 1 < body.size()) {
          const char c = body[++i];
          out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
        } else {
          out += body[i];
        }
      }
      return out;
    }
  }
  return {};
}

std::string render_chatml(const TokenizerData& tok, const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  if (!msgs.empty() && msgs[0].role != "system") {
    const std::string sys = chatml_default_system(tok.chat_template);
    if (!sys.empty()) out += "<|im_start|>system\n" + sys + "<|im_end|>\n";
  }
  for (const auto& m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

// Meta's Llama-2 chat format: the system prompt is folded into the first user turn;
// every turn after the first starts with BOS text, every answer ends with EOS text.
std::string render_llama2(const TokenizerData& tok, const std::vector<ChatMessage>& msgs) {
  const std::string bos = token_text(tok, tok.bos_id, "<s>");
  const std::string eos = token_text(tok, tok.eos_id, "</s>");
  std::string out, system;
  bool first_user = true;
  for (size_t i = 0; i < msgs.size(); i++) {
    const ChatMessage& m = msgs[i];
    if (m.role == "system") {
      system += (system.empty() ? "" : "\n") + m.content;
    } else if (m.role == "assistant") {
      out += " " + trim(m.content) + " " + eos;
    } else {  // user (and unknown roles, treated as user)
      std::string content = m.content;
      if (!system.empty()) {
        content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
        system.clear();
      }
      if (!first_user) out += bos;
      out += "[INST] " + trim(content) + " [/INST]";
      first_user = false;
    }
  }
  if (!system.empty()) {  // a system prompt with no user turn after it
    if (!first_user) out += bos;
    out += "[INST] <<SYS>>\n" + system + "\n<</SYS>>\n\n [/INST]";
  }
  return out;
}

std::string render_llama3(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  for (const auto& m : msgs)
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Zephyr (TinyLlama-chat): "<|role|>\n" + content + EOS text + "\n".
std::string render_zephyr(const TokenizerData& tok, const std::vector<ChatMessage>& msgs, bool gen) {
  const std::string eos = token_text(tok, tok.eos_id, "</s>");
  std::string out;
  for (const auto& m : msgs) out += "<|" + m.role + "|>\n" + m.content + eos + "\n";
  if (gen) out += "<|assistant|>\n";
  return out;
}

std::string json_quote(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

const std::vector<std::string>& chat_template_names() {
  static const std::vector<std::string> names = {"chatml", "llama2", "llama3", "zephyr"};
  return names;
}

namespace {

// The built-in format a template's markers name, or "" for none.
std::string format_by_markers(const std::string& t) {
  if (t.find("<|im_start|>") != std::string::npos) return "chatml";
  if (t.find("<|start_header_id|>") != std::string::npos) return "llama3";
  if (t.find("[INST]") != std::string::npos) return "llama2";
  if (t.find("<|user|>") != std::string::npos) return "zephyr";
  return "";
}

// Rendering a template we cannot recognise as some built-in format would be silently
// wrong: name it (its first 60 bytes, on one line) and why, and ask for an explicit choice.
constexpr const char* kNoMarkers = "it has none of the built-in formats' markers (<|im_start|>, <|start_header_id|>, [INST], <|user|>)";
[[noreturn]] void unrecognised_template(const std::string& t, const std::string& why) {
  std::string head = t.substr(0, 60);
  for (char& c : head)
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  std::string known;
  for (const auto& n : chat_template_names()) known += (known.empty() ? "" : ", ") + n;
  fail("chat: the model's chat template '" + head + (t.size() > 60 ? "..." : "") + "' (" + std::to_string(t.size()) +
       " bytes) is not one knotwork can render: " + why + "; pick a template explicitly (" + known + ")");
}

}  // namespace

std::string detect_chat_template(const TokenizerData& tok) {
  const std::string& t = tok.chat_template;
  if (!t.empty()) {
    const std::string name = format_by_markers(t);
    if (name.empty()) unrecognised_template(t, kNoMarkers);
    return name;
  }
  // No template: judge by the vocab's special tokens.
  if (vocab_has(tok, "<|im_start|>")) return "chatml";
  if (vocab_has(tok, "<|start_header_id|>")) return "llama3";
  return "llama2";
}

std::string default_chat_template(const TokenizerData& tok) {
  const std::string& t = tok.chat_template;
  if (t.empty()) return detect_chat_template(tok);
  std::string why;
  try {
    jinja::Template parsed(t);  // parse only: render errors are the caller's
    return "jinja";
  } catch (const Error& e) {
    why = std::string("the Jinja interpreter cannot parse it (") + e.what() + ") and " + kNoMarkers;
  }
  // a construct the interpreter lacks: the format its markers name
  const std::string name = format_by_markers(t);
  if (name.empty()) unrecognised_template(t, why);
  return name;
}

std::string render_jinja_chat(const TokenizerData& tok, const std::string& messages_json, bool add_generation_prompt,
                              const std::string& extra_vars_json) {
  if (tok.chat_template.empty()) fail("chat: the model has no chat template (tokenizer.chat_template) to render");
  jinja::Value vars = jinja::Value::object();
  jinja::Value msgs = jinja::from_json(messages_json, "chat: messages");
  if (msgs.kind != jinja::Value::Array) fail("chat: messages are not a JSON array");
  vars.set("messages", msgs);
  vars.set("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
  vars.set("bos_token", jinja::Value::str(token_text(tok, tok.bos_id, "")));
  vars.set("eos_token", jinja::Value::str(token_text(tok, tok.eos_id, "")));
  if (!extra_vars_json.empty()) {
    jinja::Value extra = jinja::from_json(extra_vars_json, "chat: template variables");
    if (extra.kind != jinja::Value::Object) fail("chat: template variables are not a JSON object");
    for (const auto& [k, v] : *extra.obj) vars.set(k, v);
  }
  return jinja::Template(tok.chat_template).render(vars);
}

std::string jinja_chat_prompt(const TokenizerData& tok, const std::string& messages_json, bool add_generation_prompt,
                              const std::string& extra_vars_json) {
  std::string out = render_jinja_chat(tok, messages_json, add_generation_prompt, extra_vars_json);
  const std::string bos = token_text(tok, tok.bos_id, "");
  if (tok.add_bos && !bos.empty() && out.compare(0, bos.size(), bos) == 0) out.erase(0, bos.size());
  return out;
}

std::string apply_chat_template(const TokenizerData& tok, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt, const std::string& force_name) {
  std::string name = force_name;
  if (name.empty()) name = default_chat_template(tok);
  if (name == "jinja") {
    std::string js = "[";
    for (size_t i = 0; i < msgs.size(); i++) {
      // role/content as JSON strings (invalid UTF-8 becomes U+FFFD)
      js += (i ? "," : "") + std::string("{\"role\":") + json_quote(msgs[i].role) + ",\"content\":" + json_quote(msgs[i].content) + "}";
    }
    js += "]";
    return jinja_chat_prompt(tok, js, add_generation_prompt);
  }
  if (name == "chatml") return render_chatml(tok, msgs, add_generation_prompt);
  if (name == "llama2") return render_llama2(tok, msgs);
  if (name == "llama3") return render_llama3(msgs, add_generation_prompt);
  if (name == "zephyr") return render_zephyr(tok, msgs, add_generation_prompt);
  std::string known;
  for (const auto& n : chat_template_names()) known += (known.empty() ? "" : ", ") + n;
  known += ", jinja";
  fail("chat: unknown chat template '" + name + "' (known: " + known + ")");
}

}  // namespace knot
