// A debounce with a maximum wait.  Calls of schedule() within `delay` of each
// other are folded into one run of `fn`, but that run never comes later than
// `maxWait` after the first call folded into it: events arriving every 65 ms
// kept pushing a plain 200 ms debounce back, so it never ran (issue 27: a fast
// session's page froze).  No DOM: tests/js/debounce.test.mjs runs it in node.
export function debouncer(fn, { delay = 200, maxWait = 1000, clock = Date } = {}) {
  let timer = null;
  let due = 0;  // when the run waiting now happens at the latest
  return function schedule(wait = delay) {
    const now = clock.now();
    if (timer === null) due = now + maxWait;
    else clearTimeout(timer);
    timer = setTimeout(() => {
      timer = null;
      fn();
    }, Math.max(0, Math.min(wait, due - now)));
  };
}
