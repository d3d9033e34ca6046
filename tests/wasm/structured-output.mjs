// structured-output.mjs — what the response_format tests share (tests/wasm and
// tests/workers response-format.test.mjs): a random-weight model with a byte-level
// vocabulary, a strict schema (nested objects, arrays, enums, numbers, required keys) whose
// every string and array is bounded, and the chat prompt.

// byte-level vocabulary of 300 (every byte a token): any JSON text is expressible
export const SYNTH_BYTES = ["--arch", "llama", "--hidden", "64", "--layers", "2", "--heads", "2", "--kv-heads", "1",
  "--ffn", "64", "--vocab", "300", "--type", "Q8_0", "--seed", "3"];

export const SCHEMA = {
  type: "object",
  properties: {
    name: {type: "string", minLength: 1, maxLength: 8},
    age: {type: "integer"},
    score: {type: "number"},
    color: {enum: ["red", "green", "blue"]},
    tags: {type: "array", items: {type: "string", maxLength: 5}, minItems: 1, maxItems: 3},
    address: {
      type: "object",
      properties: {city: {type: "string", maxLength: 6}, zip: {type: "integer"}, geo: {type: "array", items: {type: "number"}, minItems: 2, maxItems: 2}},
      required: ["city", "zip"],
      additionalProperties: false,
    },
    active: {type: "boolean"},
  },
  required: ["name", "age", "color", "tags", "address"],
  additionalProperties: false,
};

export const MESSAGES = [{role: "user", content: "Describe a person as JSON."}];
