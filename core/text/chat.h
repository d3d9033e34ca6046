// chat.h — chat prompt formatting. The file's tokenizer.chat_template is rendered by the
// Jinja interpreter (jinja.h) as Hugging Face's apply_chat_template does. A template the
// interpreter cannot parse is recognised from its markers and rendered by a built-in
// format: ChatML, Llama-2 [INST], Llama-3 header tokens, Zephyr (<|user|>, TinyLlama-chat).
// A template that neither parses nor carries any of those markers is an error naming it
// (its start and why), never a guess; the caller may then pick a format by name.
// Without a template: ChatML if the vocab has <|im_start|>, Llama-3 if it has
// <|start_header_id|>, else Llama-2.
// Contract: the output is the prompt text WITHOUT the leading BOS (encode it with
// add_bos=true, parse_special=true so BOS is added once and the markers become tokens).
#pragma once
#include <string>
#include <vector>

#include "container/model.h"

namespace knot {

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant" (others passed through)
  std::string content;
};

// "chatml" | "llama2" | "llama3" | "zephyr": the format the template's markers (or, without
// a template, the vocab's special tokens) name; a template with none of the markers throws
// knot::Error quoting its start.
std::string detect_chat_template(const TokenizerData& tok);
// What apply_chat_template renders when no name is forced: "jinja" (the file's own template)
// when the file has one the interpreter parses, else detect_chat_template() (so a template
// that neither parses nor names a format throws, quoting its start and the parse error).
// Every chat path (serve's OpenAI handler, the mesh coordinator, applyChatTemplate) takes
// this default.
std::string default_chat_template(const TokenizerData& tok);
const std::vector<std::string>& chat_template_names();

// force_name: "" for default_chat_template(), one of chat_template_names() to force a
// built-in format, or "jinja": the file's own template rendered by the Jinja interpreter
// (jinja.h), minus a leading BOS text when the vocab adds BOS itself; unknown names throw.
std::string apply_chat_template(const TokenizerData& tok, const std::vector<ChatMessage>& msgs,
                                bool add_generation_prompt, const std::string& force_name = "");

// The file's tokenizer.chat_template rendered exactly as Hugging Face's apply_chat_template
// does (trim_blocks, lstrip_blocks; variables messages, add_generation_prompt, bos_token,
// eos_token, plus extra_vars_json's keys, e.g. {"enable_thinking": false}). messages_json
// is a JSON array of message objects (role, content and any other fields the template
// reads). No template, or a construct the interpreter lacks: knot::Error naming it.
std::string render_jinja_chat(const TokenizerData& tok, const std::string& messages_json, bool add_generation_prompt,
                              const std::string& extra_vars_json = "");
// render_jinja_chat minus a leading BOS text when the vocab adds BOS itself (the prompt
// contract above: encode it with add_bos=true, parse_special=true).
std::string jinja_chat_prompt(const TokenizerData& tok, const std::string& messages_json, bool add_generation_prompt,
                              const std::string& extra_vars_json = "");

}  // namespace knot
