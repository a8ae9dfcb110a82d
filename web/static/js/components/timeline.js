// A session's timeline: its steps, newest first, with the control actions
// (pause, resume, guidance, destroy: when, and whether they applied) between
// them at the time they were made.
//
// Which steps are shown is a StepWindow (step_window.js): one contiguous run
// of iterations, keyed by iteration, at most about MAX of them in the page.
// This file draws it: every change of the window is reconciled with the DOM by
// key (a step's node is made once and kept; an action's is made again only
// when its outcome or place changes), so nothing is redrawn under the reader.
// Hand-written rather than a rendering library: steps never change once
// recorded, so keyed rendering is a Map and a sorted insert; and other
// components decorate this same list (turn headers, tool calls, fork buttons,
// through core/registry.js), which a library owning the list would undo.
//
// Reading: the newest page first (or, for a link to one step, the page around
// it, by iteration range); older pages as the end of the list nears the view,
// newer ones as its top does when the window is not at the newest.  Live steps
// join at the top; one ahead of the window waits while every missing range is
// read (no debounce: a step every 65 ms never holds the reads back).
// Follow: while the top is in view new steps appear there; scrolled away, a
// "jump to latest" button counts them.  A link (#/session/ID?iteration=N, from
// search) shows that step, marks it and scrolls to it.
import { get } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { stepNumber } from "../core/format.js";
import { timelineHooks } from "../core/registry.js";
import { stepNode } from "./step_node.js";
import { StepWindow } from "./step_window.js";
import { timelineActions } from "./timeline_actions.js";

const PAGE = 100;
const FIRST_PAGE = 50;
const MAX = 300;        // steps kept in the page; beyond, those far from the view are dropped
const RANGES = 10;      // missing ranges read at once
const FLUSH_MS = 50;    // live steps are drawn together, at most this often
// A read in the background that fails (app.py restarting) is dropped: the
// catch-up on reconnect, or the next live step, reads it again.
const quietly = (promise) => promise.catch((err) => console.warn("timeline read failed:", err.message));
const stepKey = (i) => `${String(i).padStart(12, "0")}|s`;  // sorts with timeline_actions.js's keys

export function timeline() {
  const list = h("ol.timeline", { dataset: { testid: "steps" }, "aria-label": "Steps, newest first" });
  const top = h("div.sentinel", { "aria-hidden": "true" });
  const bottom = h("div.sentinel", { "aria-hidden": "true" });
  const status = h("p.empty", { dataset: { testid: "timeline-status" } });
  const jump = h("button.jump", { type: "button", hidden: true, dataset: { testid: "jump-latest" },
    onclick: () => quietly(jumpLatest()) });
  const older = h("button", { type: "button", hidden: true, dataset: { testid: "load-older" },
    onclick: () => quietly(loadOlder()) }, "Load older steps");
  const origin = h("p.hint", { hidden: true, dataset: { testid: "fork-origin" } });
  const root = h("div.timeline-wrap", jump, top, list, status, older, origin, bottom);

  const model = new StepWindow();
  const nodes = new Map();        // iteration -> its <li>
  const actions = timelineActions(model, place);
  let session = null;             // snapshot, for step parts
  let sessionId = null;
  let generation = 0;             // bumps on reset, so answers for an old view are dropped
  let busy = {};                  // reads in flight: older, newer, gaps
  let aim = null;                 // a linked step the next catch-up reads directly
  let unseen = 0;
  let flushTimer = null;          // live steps offered, to be drawn

  const observer = new IntersectionObserver((entries) => {
    for (const e of entries) {
      if (!e.isIntersecting) continue;
      if (e.target === bottom) quietly(loadOlder());
      else if (!model.following) quietly(loadNewer());
    }
  }, { rootMargin: "600px" });
  observer.observe(top);
  observer.observe(bottom);

  function reset(id) {
    sessionId = id;
    session = null;
    generation += 1;
    busy = {};
    aim = null;
    clearTimeout(flushTimer);
    flushTimer = null;
    unseen = 0;
    model.reset();
    actions.reset();
    nodes.clear();
    replace(list);
    replace(origin);
    decorate();
  }

  const topInView = () => list.getBoundingClientRect().top > -40;
  const scope = (extra) => ({ session_id: sessionId, ...extra });
  const readSteps = (params) => get("/api/agent-steps", scope(params))
    .catch((err) => { if (err.status === 404) return { steps: [] }; throw err; });  // create still queued

  // Insert in descending key order; the common cases (newest at the top, an
  // older page at the bottom) touch only the ends of the list.
  function place(node) {
    const key = node.dataset.key;
    const first = list.firstElementChild;
    if (!first || first.dataset.key < key) return list.prepend(node);
    const last = list.lastElementChild;
    if (last.dataset.key > key) return list.append(node);
    for (const child of list.children) {
      if (child.dataset.key < key) return list.insertBefore(node, child);
    }
    list.append(node);
  }

  // Make the DOM hold exactly the window's steps, and the actions between them.
  function sync(live = false) {
    const wasTop = live && topInView();
    if (model.following && model.size > MAX && !trim("old")) trim("new");
    let changed = 0;
    for (const [i, node] of nodes) {
      if (!model.has(i)) { node.remove(); nodes.delete(i); changed += 1; }
    }
    let added = 0;
    for (const [i, step] of model.shown) {
      if (nodes.has(i)) continue;
      const node = stepNode(step, stepKey(i), session);
      nodes.set(i, node);
      place(node);
      added += 1;
    }
    if (live && !wasTop && model.following) unseen += added;
    actions.draw();
    decorate();
    if (added || changed || live) timelineHooks.forEach((hook) => hook({ list, sessionId }));
  }

  // The words and buttons around the list.
  function decorate() {
    status.textContent = !model.started ? "Loading steps…"
      : model.size ? "" : "No steps yet — the first one appears here as soon as it is taken.";
    older.hidden = !model.size || model.lo <= model.floor;
    const newer = model.following ? unseen : model.newer;
    jump.hidden = model.following ? !unseen : !model.started;
    const what = `${newer} new${model.following ? "" : "er"} step${newer > 1 ? "s" : ""}`;
    jump.textContent = newer ? `↑ ${what} — jump to latest` : "↑ jump to latest";
    const from = session && session.forked_from;
    origin.hidden = !(from && model.size && model.lo <= model.floor);
    if (from && !origin.hidden && !origin.firstChild) {
      replace(origin, `Steps up to step ${stepNumber(from.iteration)} are in `,
        h("a", { href: `#/session/${from.session_id}?iteration=${from.iteration}` }, "the session it was forked from"),
        ".");
    }
  }

  // Bound the page: drop steps from `end` ("old" or "new") while there are too
  // many and they lie far from the view (never the ones being read).
  function trim(end) {
    const far = 2 * window.innerHeight;
    while (model.size > MAX) {
      const node = nodes.get(end === "old" ? model.lo : model.hi);
      if (!node) return false;  // just read, not drawn yet: the reader asked for it
      const r = node.getBoundingClientRect();
      if (r.height && r.bottom > -far && r.top < window.innerHeight + far) return false;
      model.drop(end);
    }
    return true;
  }

  // After steps were offered at the newest end: draw, and read what is missing.
  function advance(live = false) {
    if (model.tooFar()) {
      if (topInView()) {  // the reader follows: start again at the newest
        quietly(readNewest(true));
      } else {
        model.detach();
      }
    } else if (model.gaps().length) {
      quietly(fillGaps());
    }
    sync(live);
  }

  // The newest page: after the newest shown step, or (`restart`: the reader
  // follows but is too far behind to read the gap) the window starts again there.
  function readNewest(restart = false) {
    if (restart && busy.restart) return busy.restart;
    const mine = generation;
    const mineBusy = busy;
    const since = model.started && !restart ? model.hi : -1;
    const read = readSteps({ order: "desc", limit: FIRST_PAGE, min_iteration: since >= 0 ? since + 1 : undefined })
      .then((page) => {
        if (mine !== generation) return;
        if (!model.started || restart) model.start(page.steps);
        else if (model.following) model.offer(page.steps);
        else page.steps.forEach((s) => model.note(s.iteration));
        advance();
      });
    if (restart) mineBusy.restart = read.catch(() => {}).finally(() => { mineBusy.restart = null; });
    return read;
  }

  // Read every missing range (again, while live steps open new ones), each
  // once per round; a range not readable yet is tried again a little later.
  function fillGaps() {
    if (busy.gaps) return busy.gaps;
    const mine = generation;
    const mineBusy = busy;
    mineBusy.gaps = (async () => {
      for (let stuck = 0; stuck < 4 && mine === generation;) {
        const gaps = model.gaps().slice(0, RANGES);
        if (!gaps.length || model.tooFar()) break;
        const before = model.hi;
        const pages = await Promise.all(gaps.map(([from, to]) =>
          readSteps({ min_iteration: from, max_iteration: to, limit: Math.min(to - from + 1, 1000) })));
        if (mine !== generation) return;
        pages.forEach((page) => model.offer(page.steps));
        if (model.hi === before) {
          stuck += 1;
          await new Promise((done) => setTimeout(done, 250 * stuck));
        }
        sync();
      }
    })().finally(() => { mineBusy.gaps = null; if (mine === generation && model.tooFar()) advance(); });
    return mineBusy.gaps;
  }

  function loadOlder() {
    if (busy.older || !model.size || model.lo <= model.floor) return busy.older || Promise.resolve();
    const mine = generation;
    const mineBusy = busy;
    const cursor = model.lo;
    mineBusy.older = readSteps({ order: "desc", limit: PAGE, max_iteration: cursor - 1 })
      .then((page) => {
        if (mine !== generation) return;
        if (!page.steps.length && model.lo === cursor) model.floor = cursor;  // nothing older (a fork's first step)
        model.merge(page.steps);
        trim("new");
        sync();
      })
      .finally(() => { mineBusy.older = null; });
    return mineBusy.older;
  }

  function loadNewer() {
    if (busy.newer || model.following || !model.started) return busy.newer || Promise.resolve();
    const mine = generation;
    const mineBusy = busy;
    const cursor = model.hi;
    mineBusy.newer = readSteps({ limit: PAGE, min_iteration: cursor + 1 })
      .then((page) => {
        if (mine !== generation) return;
        model.merge(page.steps);
        if (page.steps.length < PAGE) model.following = true;  // it reached the newest: follow again
        trim("old");
        keepInPlace(nodes.get(cursor), () => sync());
        if (model.following) quietly(readNewest());  // what came while it read
      })
      .finally(() => { mineBusy.newer = null; });
    return mineBusy.newer;
  }

  // Steps drawn above the reader do not move what they read (scroll anchoring
  // picks a node above the list when its top is in view, so it is done here).
  function keepInPlace(anchor, change) {
    const before = anchor && anchor.isConnected ? anchor.getBoundingClientRect().top : null;
    change();
    if (before === null || !anchor.isConnected) return;
    const moved = anchor.getBoundingClientRect().top - before;
    if (moved) window.scrollBy(0, moved);
  }

  // Show the newest steps and scroll to them.
  async function jumpLatest() {
    unseen = 0;
    if (!model.following) {
      model.clear();
      sync();  // empty, until the newest page comes
      await readNewest();
    }
    decorate();
    list.scrollIntoView({ block: "start" });
  }

  // The page of steps around `iteration`, read by iteration range: the window
  // starts there.  False when the session has no such step.
  function showAround(iteration) {
    const mine = generation;
    const mineBusy = busy;
    const from = Math.max(model.floor, iteration - PAGE / 2);
    const read = readSteps({ min_iteration: from, limit: PAGE }).then((page) => {
      if (mine !== generation || !page.steps.some((s) => s.iteration === iteration)) return false;
      model.start(page.steps, { following: page.steps.length < PAGE });
      sync();
      return true;
    }).finally(() => { if (mineBusy.around === read) mineBusy.around = null; });
    mineBusy.around = read;
    return read;
  }

  // Catch up: the newest steps (or a linked step's page) and the actions.
  async function catchUp() {
    const mine = generation;
    const acts = get("/api/actions", { session_id: sessionId, limit: 500 }).catch(() => null);
    const target = aim;
    aim = null;
    const inFirstPage = target !== null && target > model.last - FIRST_PAGE && (model.following || !model.started);
    if (target !== null && !model.has(target) && !inFirstPage) await showAround(target);
    else if (busy.around) await busy.around.catch(() => {});  // another catch-up reads a linked step's page
    if (mine !== generation) return;
    if (!model.started || model.following) await readNewest();
    const answer = await acts;
    if (mine !== generation || !answer) return;
    answer.actions.forEach((a) => actions.upsert(a));
    sync();
  }

  // Show step `iteration` (reading its page when it is not shown), mark it (and
  // the tool call `callId` inside it, when given) as the linked one, scroll to it.
  async function reveal(iteration, callId) {
    const mine = generation;
    if (!model.has(iteration) && iteration >= model.floor) await showAround(iteration);
    const node = nodes.get(iteration);
    if (mine !== generation || !node) return false;
    list.querySelectorAll(".linked").forEach((n) => n.classList.remove("linked"));
    node.classList.add("linked");
    const call = callId ? node.querySelector(`[data-call="${CSS.escape(callId)}"]`) : null;
    if (call) call.classList.add("linked");
    node.tabIndex = -1;
    node.scrollIntoView({ block: "center" });
    node.focus({ preventScroll: true });
    return true;
  }

  // A live step that left fields out for their size (domain/events.py: a big
  // state, data or text) is not drawn from the event: the steps past the
  // window's newest are read over HTTP instead, one read at a time (a step
  // coming meanwhile asks for one more read after it).
  function readLeftOut() {
    if (!model.started || !model.following) return;  // counted (note) until the window follows again
    const mineBusy = busy;
    if (mineBusy.leftOut) {
      mineBusy.leftOutAgain = true;
      return;
    }
    mineBusy.leftOut = quietly(readNewest()).finally(() => {
      mineBusy.leftOut = null;
      if (mineBusy.leftOutAgain) {
        mineBusy.leftOutAgain = false;
        readLeftOut();
      }
    });
  }

  // A live step: taken into the window at once, drawn with the others of the
  // next FLUSH_MS (a step every few ms must not cost a layout each).
  function onStep(step) {
    if (step.session_id !== sessionId) return;
    if (step.omitted) {
      model.note(step.iteration);
      readLeftOut();
      return;
    }
    model.offer([step]);
    if (flushTimer === null) {
      flushTimer = setTimeout(() => {
        flushTimer = null;
        advance(true);
      }, FLUSH_MS);
    }
  }

  return {
    root,
    reset,
    reveal,
    catchUp,
    // The next catch-up reads the page of this step (a link to it) instead of the newest.
    aim(iteration) { aim = iteration; },
    setSession(s) {
      session = s;
      if (!s || s.session_id !== sessionId) return;
      if (s.iteration >= 0) model.note(s.iteration);
      if (s.forked_from && model.floor === 0) model.setFloor(s.forked_from.iteration + 1);
      decorate();
    },
    onStep,
    onAction(action) {
      if (action.session_id !== sessionId) return;
      actions.upsert(action);
      actions.draw();
    },
    get size() { return nodes.size; },
  };
}
