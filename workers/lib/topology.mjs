// topology.mjs — a mesh topology: which Worker script owns which layers, heads, FFN columns
// and vocab rows. Shape (JSON, what `knot mesh --plan` reads and the coordinator receives):
//   {knot, n_embd, n_vocab,
//    stations: [{layers: [l0, l1], role, resident, members: [{name, url?, heads?: [h0, h1], cols?: [c0, c1]}]}],
//    shards: [{name, vocab: [v0, v1]}],
//    shardGroups?: [[hub, follower, ...], ...],   consecutive shards; the coordinator links to hubs only
//    chain?: true,                                 stations linked in a chain (below)
//    replicas?: R}                                 R copies of every station member and shard (below)
// A station of one member runs whole layers; a station of several members is a split layer
// range: member i holds head group heads_i and FFN columns cols_i, and their partial
// residuals are summed per layer (the merge rule of docs/architecture.md) — by the coordinator, or in a
// chain by the station's leader (members[0]).
// A member with a url (http[s]://host:port, a native fat station: `knot station`, docs/protocol.md;
// with replicas R > 1 a list of R urls, copy r at url[r])
// runs outside the Workers: the deployment renders no script for it and the coordinator links
// to the url instead of a service binding (lib/link.mjs urlFetcher). A member {fat: true} (a
// planner plan's fat station, topologyFromPlan) is one whose url is given at deployment: it too
// gets no script, and linking to it before its url is set is an error naming it. A chain holds
// no URL or fat members (its links are service bindings between station scripts).
// Links (docs/limits.md: at most 6 simultaneous outgoing connections per holder): without a
// chain the coordinator's session DO links to every station member and shard hub; with one
// it links to the first station's leader only, and each leader links to its own members and
// to the next station's leader, so a plan of dozens of stations holds at most 6 links
// anywhere. A chain is used when the station members alone would fill the coordinator's
// links (or when asked).
// Replicas: with `replicas` R > 1 every station member and shard runs R times, each copy its own
// Worker script and Durable Object namespace (so copies fail independently), named
// replicaName(name, r): "st0", "st0r1", ... A session's route picks one copy of each
// (workers/coordinator/routes.mjs); a chain runs within one copy (its leaders link to the same
// copy's next leader).

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
                                            maxLinks = LIMITS.connections, chain, replicas}) {
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
  const t = {knot, n_embd: config.n_embd, n_vocab: config.n_vocab, stations: st, shards: sh, ...(replicas > 1 ? {replicas} : {})};
  return validateTopology(config, fitLinks(t, maxLinks, chain));
}

// More peers than a holder may keep open: chain the stations when their members alone would
// take every link of the coordinator (or when chain is true), then group the shards behind
// hubs in the links that are left.
function fitLinks(t, maxLinks, chain) {
  const members = t.stations.reduce((a, s) => a + s.members.length, 0);
  if (chain ?? (maxLinks && members >= maxLinks)) t.chain = true;
  const stationLinks = t.chain ? 1 : members;
  if (maxLinks && stationLinks + t.shards.length > maxLinks) {
    const nGroups = maxLinks - stationLinks;
    if (nGroups < 1) throw new Error(`topology: ${members} station members leave no link for the shards under ${maxLinks} connections (use a chain)`);
    const gc = cuts(t.shards.length, nGroups);
    t.shardGroups = gc.slice(1).map((g1, i) => t.shards.slice(gc[i], g1).map((s) => s.name));
  }
  return t;
}

/**
 * Who links to whom: {coordinator: [names], stations: Map(member name -> {next?, followers[]})}.
 * Shard hubs' follower links are shardGroups.
 */
export function links(t) {
  const hubs = t.shardGroups?.map((g) => g[0]) ?? t.shards.map((s) => s.name);
  const stations = new Map();
  if (!t.chain) {
    for (const s of t.stations) for (const m of s.members) stations.set(m.name, {followers: []});
    return {coordinator: [...t.stations.flatMap((s) => s.members.map((m) => m.name)), ...hubs], stations};
  }
  t.stations.forEach((s, i) => {
    const next = t.stations[i + 1]?.members[0].name;
    s.members.forEach((m, j) => stations.set(m.name, j ? {followers: []}
      : {...(next ? {next, downstream: t.stations.length - 1 - i} : {}), followers: s.members.slice(1).map((x) => x.name)}));
  });
  return {coordinator: [t.stations[0].members[0].name, ...hubs], stations};
}

/** Replica r of a station member or shard: the name itself for r = 0, else name + "r" + r. */
export const replicaName = (name, r) => (r ? `${name}r${r}` : name);

/** The replicas of a topology (1 when it has none). */
export const replicaCount = (t) => t.replicas ?? 1;

/** Check coverage (layers end to end, heads / columns / vocab partitions); returns t. */
export function validateTopology(c, t) {
  const fail = (m) => { throw new Error(`topology: ${m}`); };
  let l = 0;
  for (const s of t.stations) {
    if (s.layers[0] !== l || !(s.layers[1] > s.layers[0])) fail(`station layers [${s.layers}] do not continue from layer ${l}`);
    l = s.layers[1];
    if (!s.members?.length) fail(`station [${s.layers}] has no members`);
    for (const m of s.members) {
      if (m.fat && m.url === undefined && t.chain) fail(`member ${m.name}: a fat station cannot be in a chain (chain links are service bindings)`);
      if (m.url === undefined) continue;
      const R = replicaCount(t), urls = Array.isArray(m.url) ? m.url : [m.url];
      if (Array.isArray(m.url) ? m.url.length !== R : R > 1)
        fail(`member ${m.name}: with replicas ${R} its url must be a list of ${R} urls (one per copy), got ${JSON.stringify(m.url)}`);
      for (const u of urls)
        if (typeof u !== "string" || !/^https?:\/\/[^/\s]+\/?$/.test(u)) fail(`member ${m.name}: url must be http[s]://host[:port], got ${JSON.stringify(u)}`);
      if (t.chain) fail(`member ${m.name}: a URL member (${urls.join(", ")}) cannot be in a chain (chain links are service bindings)`);
    }
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
  if (t.replicas !== undefined && !(Number.isInteger(t.replicas) && t.replicas >= 1 && t.replicas <= 16))
    fail(`replicas must be an integer in [1, 16], got ${JSON.stringify(t.replicas)}`);
  if (t.chunk !== undefined && !(Number.isInteger(t.chunk) && t.chunk >= 1 && t.chunk <= 65536))
    fail(`chunk must be an integer in [1, 65536], got ${JSON.stringify(t.chunk)}`);
  if (t.prefill_chunk !== undefined && !(Number.isInteger(t.prefill_chunk) && t.prefill_chunk >= 1 && t.prefill_chunk <= (t.chunk ?? 65536)))
    fail(`prefill_chunk must be an integer in [1, ${t.chunk ?? 65536}] (the chunk), got ${JSON.stringify(t.prefill_chunk)}`);
  const all = names.flatMap((n) => Array.from({length: replicaCount(t)}, (_, r) => replicaName(n, r)));
  if (new Set(all).size !== all.length) fail(replicaCount(t) > 1 ? "names are not unique (replicas included)" : "names are not unique");
  if (t.chain)
    for (const s of t.stations)
      if (s.members.length > LIMITS.connections) fail(`station [${s.layers}]: a leader of ${s.members.length} members would hold ${s.members.length} links (limit ${LIMITS.connections})`);
  if (t.shardGroups) {
    const flat = t.shardGroups.flat();
    if (flat.join() !== t.shards.map((s) => s.name).join()) fail("shardGroups must list every shard once, in order");
    for (const g of t.shardGroups) if (g.length - 1 > LIMITS.connections) fail(`hub ${g[0]} would hold ${g.length - 1} links (limit ${LIMITS.connections})`);
  }
  return t;
}

/**
 * Station member `name` of t ({name, url?, fat?, ...}), or null (a shard, or no such member).
 * A copy's physical name (replicaName: "st1r1") is that member with the copy's url (a URL
 * member with replicas lists one url per copy).
 */
export function memberOf(t, name) {
  for (const s of t.stations) for (const m of s.members) {
    if (m.name === name) return Array.isArray(m.url) ? {...m, url: m.url[0]} : m;
    for (let r = 1; r < replicaCount(t); r++)
      if (replicaName(m.name, r) === name) return m.url === undefined ? {...m, name} : {...m, name, url: Array.isArray(m.url) ? m.url[r] : m.url};
  }
  return null;
}

/**
 * t with the members of stations `urls` named by URL ({station index: url, or [url per
 * member] for a split station}), checked again. With replicas R > 1 a member's url is a list
 * of R urls, one per copy ({station index: [url of copy 0, url of copy 1, ...]} for a station
 * of one member, [[...] per member] for a split one).
 */
export function withUrls(config, t, urls) {
  const out = structuredClone(t);
  for (const [i, url] of Object.entries(urls)) {
    const s = out.stations[+i];
    if (!s) throw new Error(`topology: no station ${i} (the topology has ${out.stations.length})`);
    const list = !Array.isArray(url) || (replicaCount(out) > 1 && s.members.length === 1 && !Array.isArray(url[0])) ? [url] : url;
    if (list.length !== s.members.length) throw new Error(`topology: station ${i} has ${s.members.length} members, ${list.length} urls given`);
    s.members.forEach((m, j) => { m.url = list[j]; });
  }
  return validateTopology(config, out);
}

/** Per generated token: hops (messages) and the links a session DO keeps open. */
export function linkBudget(t) {
  // messages between stations per token, whoever sends them (the coordinator, or the chain)
  const stationMsgs = t.stations.reduce((a, s) => a + (s.members.length > 1
    ? (s.layers[1] - s.layers[0]) * 2 * (t.chain ? s.members.length - 1 : s.members.length) + (t.chain ? 1 : s.role === "exit" ? 1 : 0) : 1), 0);
  const groups = t.shardGroups?.length ?? t.shards.length;
  const l = links(t);
  const stationLinks = Math.max(0, ...[...l.stations.values()].map((x) => x.followers.length + (x.next ? 1 : 0)));
  return {stationMsgs, embedMsgsMax: 1, lmheadMsgs: groups, perToken: stationMsgs + 1 + groups, links: l.coordinator.length,
          coordinatorStationMsgs: t.chain ? 1 : stationMsgs,
          hubLinks: Math.max(0, ...(t.shardGroups ?? []).map((g) => g.length - 1)), stationLinks};
}

export const LIMITS = Object.freeze({subrequests: 10_000, connections: 6});

/**
 * Platform limits (docs/limits.md) for a generation of `tokens` tokens (prompt + generated) through
 * one session DO. perToken = the hops the coordinator makes per decode token
 * ({stations, embed, lmhead}: measured by a run or from linkBudget). Over "ws" links each peer
 * costs one subrequest (the upgrade) and one connection for the whole session; over "http"
 * every hop is a subrequest. Returns {subrequests, connections, ok, problems[]}.
 */
export function checkLimits(t, {tokens, mode = "ws", perToken = linkBudget(t).perToken, limits = LIMITS}) {
  const b = linkBudget(t);
  const peers = b.links;
  const subrequests = mode === "ws" ? peers : Math.ceil(perToken * tokens);
  // http: a token's shard fan-out is in flight at once; ws: every link stays open (a chain's
  // station leaders and the shard hubs hold links of their own)
  const connections = mode === "ws" ? Math.max(peers, b.stationLinks, b.hubLinks)
    : Math.max(t.shards.length, ...t.stations.map((s) => s.members.length));
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
 * chunk, prefill_chunk). Slices of one layer range become the members of one station; a fat station of the
 * plan ("fat": true) a member {fat: true} whose url is set at deployment (withUrls). Script names are
 * short (st<i>[s<j>], sh<i>); the plan's ids are kept as `id`.
 */
export function topologyFromPlan(config, plan, {knot, maxLinks = LIMITS.connections, chain} = {}) {
  const stations = [];
  for (const s of plan.stations) {
    const last = stations.at(-1);
    const same = last && last.layers[0] === s.layers[0] && last.layers[1] === s.layers[1] && s.slice && s.slice[0] > 0;
    const st = same ? last : {layers: [...s.layers], role: s.layers[1] === config.n_layer ? "exit" : s.layers[0] === 0 ? "entry" : "mid",
                              resident: s.mode !== "fluid", members: []};
    if (!same) stations.push(st);
    const i = stations.length - 1;
    st.members.push({name: s.slice ? `st${i}s${s.slice[0]}` : `st${i}`, id: s.id,
                     ...(s.slice ? {heads: s.heads, cols: s.ffn_cols} : {}), ...(s.fat ? {fat: true} : {})});
  }
  const shards = plan.shards.map((s, i) => ({name: `sh${i}`, id: s.id, vocab: [...s.vocab]}));
  const t = {knot, n_embd: config.n_embd, n_vocab: config.n_vocab, stations, shards,
             ...(plan.context ? {context: plan.context} : {}), ...(plan.chunk ? {chunk: plan.chunk} : {}),
             // the latency objective's prefill chunk (the earliest first token), when it is not the chunk
             ...(plan.prefill_chunk && plan.prefill_chunk !== plan.chunk ? {prefill_chunk: plan.prefill_chunk} : {}),
             ...(plan.replicas > 1 ? {replicas: plan.replicas} : {})};
  return validateTopology(config, fitLinks(t, maxLinks, chain));
}
