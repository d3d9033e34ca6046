// rows.mjs — the embedding rows a generation has seen (mesh.mjs, while drafting), so a
// speculative pass needs no embed round trip: a prompt-lookup draft copies tokens of the
// prompt or the reply, whose rows came back from an embed fan-out or with an lm-head answer
// (FLAG.topRow), and the pending token of a greedy pass is a row's best token, whose row the
// verify pass's lm-head answer carries. A row is the input the stations get for that id
// (the summed shard partials), the same bytes whichever way it came, so a pass built from
// the cache is the pass an embed fan-out would have built.
// Bounded: at most maxBytes of rows (Float32 x n_embd each); past it the least recently used
// row is dropped (a miss costs the embed round trip, never a different result).
export class EmbedRows {
  constructor(nEmbd, maxBytes = 8 << 20) {
    this.E = nEmbd;
    this.max = Math.max(1, Math.floor(maxBytes / (4 * nEmbd)));
    this.rows = new Map();  // id -> Float32Array [n_embd], least recently used first
  }

  /** Keep a copy of row (n_embd values) as id's. */
  put(id, row) {
    this.rows.delete(id);
    this.rows.set(id, Float32Array.from(row));
    if (this.rows.size > this.max) this.rows.delete(this.rows.keys().next().value);
  }

  /** Keep every row of x [ids.length, n_embd] as its id's. */
  putAll(ids, x) {
    ids.forEach((id, i) => this.put(id, x.subarray(i * this.E, (i + 1) * this.E)));
  }

  /** The rows of ids [ids.length, n_embd] when every one is held, else null. */
  gather(ids) {
    if (!ids.every((id) => this.rows.has(id))) return null;
    const x = new Float32Array(ids.length * this.E);
    ids.forEach((id, i) => {
      const row = this.rows.get(id);
      this.rows.delete(id);
      this.rows.set(id, row);
      x.set(row, i * this.E);
    });
    return x;
  }
}
