// Station / shard wire frame under seeded mutation (tests/fuzz/fuzz_frame.mjs): truncated,
// extended, bit-flipped and spliced frames and edge values in every header field either
// decode to a frame that encodes back to the same bytes or are refused with a FrameError
// naming what is wrong. scripts/fuzz.sh runs the same harness for longer.
import test from "node:test";
import assert from "node:assert/strict";
import {decodeFrame, encodeFrame, FrameError} from "../../workers/lib/frame.mjs";
import {fuzzFrames} from "../fuzz/fuzz_frame.mjs";

const frame = (over = {}) => encodeFrame({kind: "decode", sid: "s-1", reqId: 7, pos: 3, layer: 2, phase: "attn", nCtx: 64,
                                          width: 4, data: new Float32Array([1, 2, 3, 4, 5, 6, 7, 8]), ...over});
const refuses = (bytes, re) => assert.throws(() => decodeFrame(bytes), (e) => e instanceof FrameError && re.test(e.message));

test("frame fuzz: 4 seeds x 5,000 mutated frames, every one canonical or a named FrameError", () => {
  let accepted = 0;
  for (const seed of [1, 2, 3, 4]) {
    const r = fuzzFrames({seed, iterations: 5_000});
    assert.deepEqual(r.findings, [], `seed ${seed}: ${JSON.stringify(r.findings[0])}`);
    assert.equal(r.execs, 5_000);
    accepted += r.accepted;
  }
  // the mutations reach both outcomes (valid frames and mutated-but-valid ones decode)
  assert.ok(accepted > 2_000 && accepted < 18_000, `accepted ${accepted} of 20,000`);
});

test("frame fuzz regressions: rows of width 0, session id padding, every truncation", () => {
  const f = frame();
  assert.deepEqual(encodeFrame(decodeFrame(f)), f);
  // rows > 0 with width 0 has no payload to carry them: refused (was accepted with 0 values)
  const w0 = encodeFrame({kind: "embed", sid: "s-1", width: 0});
  new DataView(w0.buffer).setUint32(16, 0x80000000, true);
  refuses(w0, /^frame: 2147483648 rows of width 0$/);
  // a non-zero byte in the session id's padding (was ignored: two byte strings, one frame)
  const pad = frame();
  pad[36 + 3] = 0x41;
  refuses(pad, /^frame: session id padding byte at offset 39 is 0x41, not zero$/);
  // every truncation of a valid frame
  for (let n = 0; n < f.length; n++) refuses(f.subarray(0, n), /^frame: /);
  // version, kind, dtype, phase, session id length, reserved bytes: named
  const field = (off, bytes, val, re) => {
    const x = f.slice();
    const v = new DataView(x.buffer);
    if (bytes === 4) v.setUint32(off, val, true); else if (bytes === 2) v.setUint16(off, val, true); else v.setUint8(off, val);
    refuses(x, re);
  };
  field(0, 4, 0x3246574b, /bad magic 0x3246574b/);
  field(4, 2, 2, /version 2, this worker speaks version 1/);
  field(6, 1, 9, /unknown kind 9/);
  field(7, 1, 2, /unknown dtype 2/);
  field(26, 1, 4, /unknown phase 4/);
  field(32, 2, 129, /session id of 129 bytes \(max 128\)/);
  field(34, 2, 1, /reserved header bytes are not zero/);
  field(16, 4, 0xffffffff, /says 4294967295 rows x 4 values/);
});
