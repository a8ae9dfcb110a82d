// The timeline's window logic (web/static/js/components/step_window.js) and the
// catch-up debounce (core/debounce.js), in node: `node --test` in tests/js
// (run by tests/service/test_live_js.py).  A random sequence of live steps
// (some lost, some late, some twice), catch-up reads and reconnects must leave
// exactly the record's steps in the window, in one run, whatever the seed.
import assert from "node:assert/strict";
import { mock, test } from "node:test";

import { StepWindow } from "../../web/static/js/components/step_window.js";
import { debouncer } from "../../web/static/js/core/debounce.js";

const step = (i) => ({ iteration: i, id: "s" + i });

// A tiny seeded generator (mulberry32), so a failure names its seed.
function random(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// What GET /api/agent-steps answers, from the `recorded` first steps.
const newest = (recorded, since, limit) => {
  const out = [];
  for (let i = recorded - 1; i >= Math.max(since, 0) && out.length < limit; i--) out.push(step(i));
  return out;
};
const range = (recorded, from, to) => {
  const out = [];
  for (let i = from; i <= Math.min(to, recorded - 1); i++) out.push(step(i));
  return out;
};

function assertExact(w, lo, hi, seed) {
  assert.equal(w.lo, lo, `seed ${seed}: lowest shown`);
  assert.equal(w.hi, hi, `seed ${seed}: newest shown`);
  assert.equal(w.size, hi - lo + 1, `seed ${seed}: size`);
  for (let i = lo; i <= hi; i++) assert.equal(w.step(i).id, "s" + i, `seed ${seed}: step ${i}`);
}

// One page-like client: live steps, and the reads the timeline makes for gaps.
function client(w, recorded) {
  return {
    catchUp() {
      if (!w.started) w.start(newest(recorded(), 0, 50));
      else w.offer(newest(recorded(), w.hi + 1, 50));
      if (w.tooFar()) w.start(newest(recorded(), 0, 50));
    },
    fill() {
      for (const [from, to] of w.gaps()) w.offer(range(recorded(), from, to));
    },
  };
}

for (const seed of [1, 2, 3, 27, 1578]) {
  test(`a random mix of lost, late and repeated live steps and catch-ups (seed ${seed})`, () => {
    const rnd = random(seed);
    const w = new StepWindow({ gapMax: 250 });
    let recorded = 0;
    const late = [];
    const c = client(w, () => recorded);
    for (let tick = 0; tick < 800; tick++) {
      recorded += 1;
      const live = step(recorded - 1);
      const r = rnd();
      if (r < 0.15) { /* lost (a disconnect, a dropped relay batch) */ } else if (r < 0.3) late.push(live);
      else w.offer([live]);
      if (rnd() < 0.1 && late.length) w.offer([late.splice(Math.floor(rnd() * late.length), 1)[0]]);
      if (rnd() < 0.05) w.offer([step(Math.floor(rnd() * recorded))]);  // a repeat
      if (rnd() < 0.1) c.fill();
      if (rnd() < 0.03) c.catchUp();  // navigation back, a reconnect, app.py restarted
      if (rnd() < 0.01) w.start(newest(recorded, 0, 50));  // "jump to latest"
      if (w.started) {  // whatever happened, the window is one run of the record
        for (let i = w.lo; i <= w.hi; i++) assert.equal(w.step(i).id, "s" + i, `seed ${seed}: step ${i}`);
      }
    }
    late.forEach((s) => w.offer([s]));
    c.catchUp();
    c.fill();
    assert.deepEqual(w.gaps(), [], `seed ${seed}: gaps left`);
    assertExact(w, w.lo, recorded - 1, seed);
  });
}

test("a catch-up page after a gap is drawn whole, not only its newest step (issue 27, item 1)", () => {
  const w = new StepWindow();
  w.start(range(50, 0, 42).reverse());
  w.offer(range(50, 43, 49).reverse());  // newest first, as the API answers
  assertExact(w, 0, 49);
  w.offer([step(60)]);
  assert.deepEqual(w.gaps(), [[50, 59]]);
  w.offer([step(55)]);
  assert.deepEqual(w.gaps(), [[50, 54], [56, 59]]);
  w.offer(range(61, 50, 54));
  assert.deepEqual(w.gaps(), [[56, 59]]);
  assert.equal(w.hi, 55);
  w.offer(range(61, 56, 59));
  assertExact(w, 0, 60);
});

test("older and newer pages extend a detached window; a fork's floor stops older reads", () => {
  const w = new StepWindow();
  w.setFloor(3);
  w.start(range(2000, 3, 102), { following: false });
  assert.equal(w.following, false);
  w.offer([step(1999)]);  // live, while detached: counted, not drawn
  assert.equal(w.newer, 1999 - 102);
  assert.deepEqual(w.gaps(), []);
  w.merge(range(2000, 103, 202));
  assertExact(w, 3, 202);
  w.merge([step(1), step(2)]);  // below the floor: nothing
  assertExact(w, 3, 202);
  assert.equal(w.drop("old"), 3);
  assert.equal(w.drop("new"), 202);
  assertExact(w, 4, 201);
});

test("a gap too long to read restarts the window at the newest", () => {
  const w = new StepWindow({ gapMax: 250 });
  w.start(range(10, 0, 9));
  w.offer([step(400)]);
  assert.ok(w.tooFar());
  w.start(newest(401, 0, 50));
  assertExact(w, 351, 400);
  assert.ok(w.following);
});

test("an empty session starts at its floor and draws its first live step", () => {
  const w = new StepWindow();
  w.offer([step(5)]);  // before the first read: waits
  w.setFloor(5);
  w.start([]);
  assertExact(w, 5, 5);
});

test("the catch-up debounce runs during a burst, at most maxWait after it began", (t) => {
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  let runs = 0;
  const schedule = debouncer(() => { runs += 1; }, { delay: 200, maxWait: 1000 });
  for (let i = 0; i < 30; i++) {  // an event every 65 ms for ~2 s
    schedule();
    t.mock.timers.tick(65);
  }
  assert.ok(runs >= 1, `ran ${runs} times during a 2 s burst`);
  const during = runs;
  t.mock.timers.tick(200);
  assert.equal(runs, during + 1, "one more run after the burst");
  schedule();
  t.mock.timers.tick(199);
  assert.equal(runs, during + 1);
  t.mock.timers.tick(1);
  assert.equal(runs, during + 2, "a lone event waits only the delay");
  mock.reset();
});
