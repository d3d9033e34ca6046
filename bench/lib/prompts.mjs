// prompts.mjs — the speculation benchmarks' prompt kinds (bench/speculative.mjs,
// bench/estimate-7b.mjs): "code-edit" (the reply repeats much of the prompt: a block of code
// and the start of its edited copy), "story" (free text) and "repeat" (a story whose reply
// repeats its sentences: the copying a tiny story model does, where code-edit needs a model
// that copies code).
export const CODE = `function area(width, height) {
  const w = Number(width);
  const h = Number(height);
  if (w < 0 || h < 0) throw new Error("negative size");
  return w * h;
}
function perimeter(width, height) {
  const w = Number(width);
  const h = Number(height);
  if (w < 0 || h < 0) throw new Error("negative size");
  return 2 * (w + h);
}
`;

export const PROMPTS = {
  "code-edit": `Rename width to x in this code:\n${CODE}\nThe code with width renamed to x:\nfunction area(x, height) {\n  const w = Number(x);\n`,
  story: "Once upon a time there was a little girl named Lily. She loved to play in the park with her",
  repeat: "Lily had a red ball. Tom had a blue ball. Lily had a red ball. Tom had a blue ball. Lily had a red ball. Tom",
};
