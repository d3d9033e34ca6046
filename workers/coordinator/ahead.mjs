// ahead.mjs — drafting ahead on the mesh: while a verify pass is out at the stations, the
// coordinator's draft model drafts the tokens after it as if the stations keep every draft,
// one draft step per turn of the event loop (the stations' answers are relayed between steps).
// Where the isolates run elsewhere (other machines; other workerd processes) these steps run
// while the stations compute, and the next pass takes them when every draft was kept and the
// token the last row gave is the first of them. Greedy drafts only: deterministic, no RNG drawn,
// so the output is that of plain decoding whichever drafts are used.
//
//   const a = new DraftAhead(drafter, base, max).start();  // base: hist and the pass's drafts
//   ... the pass ...
//   await a.stop();                                          // the step under way ends first
//   a.take(hist, room) -> ids | null   (null: hist is not base + a.ids[0]; else up to room drafts)
export class DraftAhead {
  /** drafter: bindings/drafter.mjs Drafter; base: the ids the drafts follow; max: draft steps at most */
  constructor(drafter, base, max) {
    this.drafter = drafter;
    this.base = base;
    this.max = max;
    this.ids = [];    // the draft's greedy tokens after base, in order
    this.ms = 0;      // time spent in draft steps
    this.stopped = false;
    this.run = Promise.resolve();
  }
  start() {
    this.run = (async () => {
      while (!this.stopped && this.ids.length < this.max) {
        await new Promise((r) => setTimeout(r, 0));  // the pass's I/O first
        if (this.stopped) break;
        const t = Date.now();
        const {ids} = this.drafter.propose(this.base.concat(this.ids), 1);  // the draft's KV holds base + ids but the last
        this.ms += Date.now() - t;
        if (!ids.length) break;  // the draft's context is full
        this.ids.push(ids[0]);
      }
    })();
    return this;
  }
  async stop() {
    this.stopped = true;
    await this.run;
  }
  /** The drafts after hist (at most room) when hist is base and the first drafted token, else null. */
  take(hist, room) {
    const n = this.base.length;
    if (hist.length !== n + 1 || this.ids.length === 0 || hist[n] !== this.ids[0]) return null;
    for (let i = n - 1; i >= 0; i--) if (hist[i] !== this.base[i]) return null;
    return this.ids.slice(1, 1 + Math.max(0, room));
  }
}
