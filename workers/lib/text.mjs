// text.mjs — the coordinator's share of a model: config + tokenizer, no tensors (wasm ABI
// kw_model_text_finish). Tokenize, chat template and detokenize work on it, and the core
// Generator (bindings/generator.mjs) samples on it from the shards' merged top-k.
import {init, openTable, loadTensor, Model} from "../../bindings/knotwork.mjs";

/** Open only the tokenizer and config of a .knot (a few hundred KB) through a byte source. */
export async function openTextModel(source) {
  const w = await init();
  const {handle, table} = await openTable(w, source);
  try {
    for (const t of table.tensors.filter((t) => t.i === 0 && table.format === "knot")) await loadTensor(w, source, handle, t);
    w.call("kw_model_text_finish", handle);
    const info = w.resultJSON();
    return new Model(w, handle, info);
  } catch (e) { w.exports.kw_model_free(handle); throw e; }
}
