// prefix.mjs — the prefix-reuse rule (llama-server's cache_prompt), the same for `serve`'s held
// session (knotwork.mjs Model.slot, local-backend.mjs) and the mesh's index of held sessions
// (workers/coordinator/prefixes.mjs):
//   reusable(held, ids, similarity) -> positions of `held` (the token ids a session's KV holds)
//     a request for prompt `ids` keeps: their common prefix, at most ids.length - 1 (one token
//     is fed, for the logits), and 0 when that is less than `similarity` of what is held
//     (llama-server's --slot-prompt-similarity): a prompt that merely shares a first token
//     (BOS) starts a session of its own instead of destroying a held one.
export const SIMILARITY = 0.5;

/** Length of the common prefix of two id arrays. */
export function commonPrefix(a, b) {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/** Positions of `held` a request for `ids` keeps (see the header). */
export function reusable(held, ids, similarity = SIMILARITY) {
  const n = Math.min(commonPrefix(held, ids), ids.length - 1);
  return n > 0 && n >= similarity * held.length ? n : 0;
}
