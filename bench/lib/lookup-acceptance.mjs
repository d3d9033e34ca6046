// lookup-acceptance.mjs — prompt-lookup drafting replayed on a known reply (teacher-forced):
// what the mesh's lookup path (workers/coordinator/mesh.mjs: draftLookup, the rule of
// core/infer/speculative.cpp) would get from a model whose greedy reply to promptIds is
// replyIds. Used by bench/lookup-acceptance.mjs (real code-edit text, Qwen tokenizer) and
// bench/estimate-7b.mjs (the greedy ids of a real model).
//
//   lookupPasses(promptIds, replyIds, k, {chunk: 64, nCtx: Infinity, ngramMax: 12, adaptive: true})
//     -> {passes: [{rows, drafted, accepted}], tokens, drafted, accepted, acceptance,
//         tokensPerPass, verifyPasses, rows: {r: count}}
//
// The mesh's loop: replyIds[0] comes from the prefill (no pass); then every pass feeds the
// pending token and draftLookup(history, room) drafts, room = min(nCtx - pos - 1, chunk - 1,
// tokens still to generate, LookupBudget's size: at most k, adapted to the passes before;
// adaptive false: k every pass); the verify keeps the longest prefix of the drafts equal to the
// reply's next tokens and yields one more (the bonus or the correction): the pass advances by
// accepted + 1. tokens = replyIds.length - 1 (the decoded ones), acceptance = accepted /
// drafted (0 when nothing was drafted: the mesh's telemetry), rows: passes by row count.
// ngramMax: the longest n-gram draftLookup tries (LOOKUP_NGRAM_MAX, 12: the mesh's; another
// value, or adaptive false, is a what-if).
import {draftLookup, LookupBudget, LOOKUP_NGRAM_MAX} from "../../bindings/generator.mjs";

export function lookupPasses(promptIds, replyIds, k, {chunk = 64, nCtx = Infinity, ngramMax = LOOKUP_NGRAM_MAX, adaptive = true} = {}) {
  if (!Number.isInteger(k) || k < 0) throw new RangeError(`lookupPasses: k must be an integer >= 0, got ${k}`);
  const passes = [], hist = [...promptIds, ...replyIds.slice(0, 1)], budget = new LookupBudget(k);
  for (let n = 1; n < replyIds.length;) {
    const pos = hist.length - 1;
    const room = Math.min(nCtx - pos - 1, chunk - 1, replyIds.length - n, adaptive ? budget.size : k);
    const drafts = room > 0 ? draftLookup(hist, room, ngramMax) : [];
    let a = 0;
    while (a < drafts.length && drafts[a] === replyIds[n + a]) a++;
    budget.update(drafts.length, a);
    passes.push({rows: 1 + drafts.length, drafted: drafts.length, accepted: a});
    const step = Math.min(a + 1, replyIds.length - n);
    for (let i = 0; i < step; i++) hist.push(replyIds[n + i]);
    n += step;
  }
  const sum = (f) => passes.reduce((x, p) => x + p[f], 0);
  const drafted = sum("drafted"), accepted = sum("accepted"), tokens = Math.max(0, replyIds.length - 1);
  const rows = {};
  for (const p of passes) rows[p.rows] = (rows[p.rows] ?? 0) + 1;
  return {passes, tokens, drafted, accepted, acceptance: drafted ? accepted / drafted : 0,
          tokensPerPass: passes.length ? tokens / passes.length : 0, verifyPasses: passes.filter((p) => p.drafted).length, rows};
}
