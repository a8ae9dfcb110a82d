// Which steps of a session the timeline shows: a window of them, keyed by
// iteration.  Pure logic, no DOM (tests/js/step_window.test.mjs drives it in node).
//
// The window is one contiguous run of iterations [lo, hi]: a session's
// iterations have no gaps (store/steps.py), so "the steps shown equal the
// record's for the shown range" is "every iteration in [lo, hi] is shown once".
// Steps that arrive ahead of the window (a live step after a missed one, a
// catch-up page newer than a gap) wait in `pending` until the steps between are
// read; gaps() lists every missing range, so each is read and drawn, however
// many there are (treating a page as one block was issue 27's dropped steps).
//
// Following: the window reaches the session's newest step and grows with it.
// Detached: the window shows older steps (a link to step 1 of 2,000, or the
// reader scrolled far down); newer steps are only counted until it follows again.
// `floor` is the session's first iteration: 0, or a fork's first own step.

export class StepWindow {
  constructor({ gapMax = 250 } = {}) {
    this.gapMax = gapMax;  // a longer gap is not read: the window starts again at the newest
    this.reset();
  }

  reset() {
    this.floor = 0;
    this.last = -1;  // the newest iteration known to exist
    this.clear();
  }

  // Nothing shown and nothing read yet (hi === null until the first page).
  clear() {
    this.shown = new Map();  // iteration -> step, exactly lo..hi
    this.pending = new Map();
    this.lo = null;
    this.hi = null;
    this.following = true;
  }

  get size() { return this.shown.size; }
  get started() { return this.hi !== null; }
  has(iteration) { return this.shown.has(iteration); }
  step(iteration) { return this.shown.get(iteration); }

  // Learn the newest iteration (a live step, the snapshot, a read).
  note(iteration) {
    if (iteration > this.last) this.last = iteration;
  }

  setFloor(floor) {
    this.floor = floor;
    if (this.started && this.size === 0) { this.lo = floor; this.hi = floor - 1; this.drain(); }
  }

  // The first read, or a new start: the window becomes the contiguous run of
  // `steps` that ends at their newest (an empty page: nothing yet, from floor).
  start(steps, { following = true } = {}) {
    const keep = this.following && following ? this.pending : new Map();
    this.clear();
    this.following = following;
    this.pending = keep;
    const byIteration = new Map(steps.map((s) => [s.iteration, s]));
    if (!byIteration.size) {
      this.lo = this.floor;
      this.hi = this.floor - 1;
    } else {
      this.hi = Math.max(...byIteration.keys());
      this.lo = this.hi;
      while (byIteration.has(this.lo - 1)) this.lo -= 1;
      for (let i = this.lo; i <= this.hi; i++) this.shown.set(i, byIteration.get(i));
      this.note(this.hi);
    }
    if (this.following) this.drain();
    else this.pending.clear();
  }

  // Steps at or past the window's newest end (live ones, or a read of the
  // newest or of a gap): drawn when they join it, else kept until they can.
  offer(steps) {
    for (const s of steps) {
      this.note(s.iteration);
      if (this.following && (this.hi === null || s.iteration > this.hi)) this.pending.set(s.iteration, s);
    }
    return this.drain();
  }

  // A page read next to the window (older below it, newer above it): the steps
  // that extend it are drawn, the rest dropped (or kept, above it, when following).
  merge(steps) {
    if (!this.started) return 0;
    const byIteration = new Map(steps.map((s) => [s.iteration, s]));
    let added = 0;
    while (this.lo > this.floor && byIteration.has(this.lo - 1)) {
      this.lo -= 1;
      this.shown.set(this.lo, byIteration.get(this.lo));
      added += 1;
    }
    for (const s of steps) {
      this.note(s.iteration);
      if (s.iteration > this.hi) this.pending.set(s.iteration, s);
    }
    added += this.drain();
    if (!this.following) this.pending.clear();
    return added;
  }

  // Move what joins the window from pending into it.
  drain() {
    if (!this.started) return 0;
    let added = 0;
    while (this.pending.has(this.hi + 1)) {
      this.hi += 1;
      this.shown.set(this.hi, this.pending.get(this.hi));
      this.pending.delete(this.hi);
      added += 1;
    }
    for (const i of this.pending.keys()) if (i <= this.hi) this.pending.delete(i);
    return added;
  }

  // Every range of iterations missing between the window and the steps waiting
  // above it: [[from, to], ...], oldest first.
  gaps() {
    if (!this.started || !this.following || !this.pending.size) return [];
    const waiting = [...this.pending.keys()].sort((a, b) => a - b);
    const out = [];
    let next = this.hi + 1;
    for (const i of waiting) {
      if (i > next) out.push([next, i - 1]);
      next = i + 1;
    }
    return out;
  }

  // The steps waiting are too far ahead to read what lies between.
  tooFar() {
    return this.pending.size > 0 && Math.max(...this.pending.keys()) - this.hi > this.gapMax;
  }

  // Stop following: newer steps are counted, not drawn.
  detach() {
    this.following = false;
    this.pending.clear();
  }

  // How many steps are newer than the window (detached).
  get newer() {
    return this.started ? Math.max(0, this.last - this.hi) : 0;
  }

  // Drop the oldest (end "old") or newest (end "new") step shown, to bound the window.
  drop(end) {
    if (!this.size) return null;
    const at = end === "old" ? this.lo : this.hi;
    this.shown.delete(at);
    if (end === "old") this.lo += 1;
    else { this.hi -= 1; this.detach(); }
    return at;
  }
}
