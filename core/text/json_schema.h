// json_schema.h — JSON Schema compiled to a GBNF grammar (text/grammar.h) whose every
// sentence is a JSON text that validates against the schema (as llama.cpp's
// json-schema-to-grammar, for the subset below).
//
// Supported: type (string, number, integer, boolean, null, object, array, or a list of
// them); enum; const; objects with properties, required and additionalProperties
// (false, true or absent: with `properties`, only the declared properties are generated —
// required ones first, in declaration order, then the optional ones in order, each
// present or not; without `properties`, any object); arrays with items, minItems,
// maxItems; strings with minLength, maxLength; $ref to #/$defs/NAME or
// #/definitions/NAME (recursion allowed); anyOf and oneOf (as alternatives: an output
// matching several branches of a oneOf is not excluded); allOf of one schema; the
// schemas `true` and `{}` (any JSON value). Annotations (title, description, default,
// examples, $schema, $id, $comment, readOnly, writeOnly, deprecated) are ignored.
// Numbers are generated with at most 16 integral and 16 fractional digits and a 2-digit
// exponent (so every number is a finite double); whitespace between tokens is at most one space, or a newline and 20 spaces or
// tabs, so a schema with bounded strings and arrays has bounded output.
//
// Anything else (pattern, format, minimum, uniqueItems, prefixItems, additionalProperties
// with a schema, remote $ref, ...) is refused: knot::UsageError naming the keyword and its
// JSON path, e.g. `json schema: "pattern" is not supported (at #/properties/name)`.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace knot {

// Properties are generated in the order the schema object holds them: declaration order
// for the text form and an ordered_json, key order for a nlohmann::json (std::map).
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);
std::string json_schema_to_gbnf(std::string_view schema_text);  // not JSON: UsageError

// The grammar of any JSON object (OpenAI's response_format {"type": "json_object"}).
std::string json_object_gbnf();

}  // namespace knot
