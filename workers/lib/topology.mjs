// topology.mjs — a mesh topology: which Worker script owns which layers, heads, FFN columns
// and vocab rows. Shape (JSON, what `knot mesh --plan` reads and the coordinator receives):
//   {knot, n_embd, n_vocab,
//    stations: [{layers: [l0, l1], role, resident, members: [{name, heads?: [h0, h1], cols?: [c0, c1]}]}],
//    shards: [{name, vocab: [v0, v1]}],
//    shardGroups?: [[hub, follower, ...], ...]}   consecutive shards; the coordinator links to hubs only
// A station of one member runs whole layers; a station of several members is a split layer
// range: member i holds head group heads_i and FFN columns cols_i, and the coordinator sums
// their partial residuals per layer (DESIGN §1's merge rule).

/** Cut n into k near-equal parts, each a multiple of `align` where possible: [c0=0, ..., ck=n]. */
export function cuts(n, k, align = 1) {
  if (!(k >= 1 && k <= n)) throw new Error(`cannot cut ${n} into ${k} parts`);
  const out = [0];
  for (let i = 1; i < k; i++) {
    let c = Math.round(n * i / k / align) * align;
    if (c <= out[i - 1] || c >= n) c = Math.round(n * i / k);
    out.push(c);
  }
  out.push(n);
  return out;
}

/**
 * From counts: layers per station (e.g. [4, 4, 4]), the number of vocab shards (or explicit
 * vocab cut points), and slices (head groups = FFN slices) per station.
 */
export function topologyFromCounts(config, {knot, stations = [config.n_layer], shards = 1, vocab, slices = 1, resident = true,
                                            maxLinks = LIMITS.connections}) {
  const L = config.n_layer;
  const sum = stations.reduce((a, b) => a + b, 0);
  if (sum !== L) throw new Error(`--stations ${stations.join(",")} covers ${sum} layers, the model has ${L}`);
  const g = config.n_head / config.n_head_kv;
  const vc = vocab ?? cuts(config.n_vocab, shards);
  let l0 = 0;
  const st = stations.map((n, i) => {
    const layers = [l0, l0 + n];
    l0 += n;
    const role = i === stations.length - 1 ? "exit" : i === 0 ? "entry" : "mid";
    const hc = slices > 1 ? cuts(config.n_head_kv, slices).map((h) => h * g) : null;
    const cc = slices > 1 ? cuts(config.n_ff, slices, 256) : null;
    const members = Array.from({length: slices}, (_, j) => ({
      name: slices > 1 ? `st${i}s${j}` : `st${i}`,
      ...(hc ? {heads: [hc[j], hc[j + 1]], cols: [cc[j], cc[j + 1]]} : {}),
    }));
    return {layers, role, resident, members};
  });
  const sh = vc.slice(1).map((v1, i) => ({name: `sh${i}`, vocab: [vc[i], v1]}));
  const t = {knot, n_embd: config.n_embd, n_vocab: config.n_vocab, stations: st, shards: sh};
  // more peers than a session DO may hold open: group the shards behind hubs
  const members = st.reduce((a, s) => a + s.members.length, 0);
  if (maxLinks && members + sh.length > maxLinks) {
    const nGroups = maxLinks - members;
    if (nGroups < 1) throw new Error(`topology: ${members} station members leave no link for the shards under ${maxLinks} connections`);
    const gc = cuts(sh.length, nGroups);
    t.shardGroups = gc.slice(1).map((g1, i) => sh.slice(gc[i], g1).map((s) => s.name));
  }
  return validateTopology(config, t);
}

/** Check coverage (layers end to end, heads / columns / vocab partitions); returns t. */
export function validateTopology(c, t) {
  const fail = (m) => { throw new Error(`topology: ${m}`); };
  let l = 0;
  for (const s of t.stations) {
    if (s.layers[0] !== l || !(s.layers[1] > s.layers[0])) fail(`station layers [${s.layers}] do not continue from layer ${l}`);
    l = s.layers[1];
    if (!s.members?.length) fail(`station [${s.layers}] has no members`);
    if (s.members.length > 1) {
      for (const [key, total, step] of [["heads", c.n_head, c.n_head / c.n_head_kv], ["cols", c.n_ff, 1]]) {
        let at = 0;
        for (const m of s.members) {
          if (!m[key] || m[key][0] !== at || !(m[key][1] > at)) fail(`station [${s.layers}] member ${m.name}: ${key} do not continue from ${at}`);
          if (key === "heads" && (m.heads[0] % step || m.heads[1] % step)) fail(`member ${m.name}: heads [${m.heads}] split a KV group of ${step}`);
          at = m[key][1];
        }
        if (at !== total) fail(`station [${s.layers}]: ${key} end at ${at}, the model has ${total}`);
      }
    }
  }
  if (l !== c.n_layer) fail(`stations end at layer ${l}, the model has ${c.n_layer}`);
  let v = 0;
  for (const s of t.shards) {
    if (s.vocab[0] !== v || !(s.vocab[1] > v)) fail(`shard ${s.name} [${s.vocab}] does not continue from ${v}`);
    v = s.vocab[1];
  }
  if (v !== c.n_vocab) fail(`shards end at ${v}, the tokenizer has ${c.n_vocab} tokens (padding rows are owned by none)`);
  const names = [...t.stations.flatMap((s) => s.members.map((m) => m.name)), ...t.shards.map((s) => s.name)];
  if (new Set(names).size !== names.length) fail("names are not unique");
  if (t.shardGroups) {
    const flat = t.shardGroups.flat();
    if (flat.join() !== t.shards.map((s) => s.name).join()) fail("shardGroups must list every shard once, in order");
    for (const g of t.shardGroups) if (g.length - 1 > LIMITS.connections) fail(`hub ${g[0]} would hold ${g.length - 1} links (limit ${LIMITS.connections})`);
  }
  return t;
}

/** Per generated token: hops (messages) and the links a session DO keeps open. */
export function linkBudget(t) {
  const stationMsgs = t.stations.reduce((a, s) => a + (s.members.length > 1
    ? (s.layers[1] - s.layers[0]) * 2 * s.members.length + (s.role === "exit" ? 1 : 0) : 1), 0);
  const groups = t.shardGroups?.length ?? t.shards.length;
  const links = t.stations.reduce((a, s) => a + s.members.length, 0) + groups;
  return {stationMsgs, embedMsgsMax: 1, lmheadMsgs: groups, perToken: stationMsgs + 1 + groups, links,
          hubLinks: Math.max(0, ...(t.shardGroups ?? []).map((g) => g.length - 1))};
}

export const LIMITS = Object.freeze({subrequests: 10_000, connections: 6});

/**
 * Platform limits (DESIGN §8) for a generation of `tokens` tokens (prompt + generated) through
 * one session DO. perToken = the hops the coordinator makes per decode token
 * ({stations, embed, lmhead}: measured by a run or from linkBudget). Over "ws" links each peer
 * costs one subrequest (the upgrade) and one connection for the whole session; over "http"
 * every hop is a subrequest. Returns {subrequests, connections, ok, problems[]}.
 */
export function checkLimits(t, {tokens, mode = "ws", perToken = linkBudget(t).perToken, limits = LIMITS}) {
  const peers = linkBudget(t).links;
  const subrequests = mode === "ws" ? peers : Math.ceil(perToken * tokens);
  // http: a token's shard fan-out is in flight at once; ws: every link stays open
  const connections = mode === "ws" ? peers : Math.max(t.shards.length, ...t.stations.map((s) => s.members.length));
  const problems = [];
  if (subrequests >= limits.subrequests)
    problems.push(`${subrequests} subrequests for ${tokens} tokens over ${mode} links (limit ${limits.subrequests})`);
  if (connections > limits.connections)
    problems.push(`${connections} simultaneous outgoing connections over ${mode} links (limit ${limits.connections}): ` +
                  `${peers} peers (station members + shards) need grouping`);
  return {subrequests, connections, ok: problems.length === 0, problems};
}

/**
 * A topology from a planner plan (`knot plan` / bindings/planner.mjs JSON: stations
 * [{id, role, layers, slice?, heads?, ffn_cols?, mode}], shards [{id, vocab}], context,
 * chunk). Slices of one layer range become the members of one station. Script names are
 * short (st<i>[s<j>], sh<i>); the plan's ids are kept as `id`.
 */
export function topologyFromPlan(config, plan, {knot, maxLinks = LIMITS.connections} = {}) {
  const stations = [];
  for (const s of plan.stations) {
    const last = stations.at(-1);
    const same = last && last.layers[0] === s.layers[0] && last.layers[1] === s.layers[1] && s.slice && s.slice[0] > 0;
    const st = same ? last : {layers: [...s.layers], role: s.layers[1] === config.n_layer ? "exit" : s.layers[0] === 0 ? "entry" : "mid",
                              resident: s.mode !== "fluid", members: []};
    if (!same) stations.push(st);
    const i = stations.length - 1;
    st.members.push({name: s.slice ? `st${i}s${s.slice[0]}` : `st${i}`, id: s.id,
                     ...(s.slice ? {heads: s.heads, cols: s.ffn_cols} : {})});
  }
  const shards = plan.shards.map((s, i) => ({name: `sh${i}`, id: s.id, vocab: [...s.vocab]}));
  const t = {knot, n_embd: config.n_embd, n_vocab: config.n_vocab, stations, shards,
             ...(plan.context ? {context: plan.context} : {}), ...(plan.chunk ? {chunk: plan.chunk} : {})};
  const members = stations.reduce((a, s) => a + s.members.length, 0);
  if (maxLinks && members + shards.length > maxLinks) {
    const nGroups = maxLinks - members;
    if (nGroups < 1) throw new Error(`topology: ${members} station members leave no link for the shards under ${maxLinks} connections`);
    const gc = cuts(shards.length, nGroups);
    t.shardGroups = gc.slice(1).map((g1, i) => shards.slice(gc[i], g1).map((s) => s.name));
  }
  return validateTopology(config, t);
}
