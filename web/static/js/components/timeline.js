// A session's timeline: its steps, newest first, with the control actions
// (pause, resume, guidance, destroy: when, and whether they applied) between
// them at the time they were made.
//
// Paging: the newest page is read first; older pages are read when the end of
// the list scrolls into view, each page once (the cursor is the lowest
// iteration shown; iterations of a session have no gaps).  Live steps join at
// the top; a gap (a live step beyond the newest shown) is filled from HTTP.
// Follow: while the top of the timeline is in view new steps simply appear
// there; when you have scrolled down, a "jump to latest" button counts them.
// Reveal: a link to one step (#/session/ID?iteration=N, from search) pages older
// steps in until that step is shown, then marks it and scrolls to it.
import { get } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { attemptCounts, errorBlock, money, reasonWords, stepNumber, tokens, when } from "../core/format.js";
import { stepParts, timelineHooks } from "../core/registry.js";
import { jsonView } from "./json_view.js";

const PAGE = 100;
const FIRST_PAGE = 50;

export function timeline() {
  const list = h("ol.timeline", { dataset: { testid: "steps" }, "aria-label": "Steps, newest first" });
  const sentinel = h("div.sentinel", { "aria-hidden": "true" });
  const status = h("p.empty", { dataset: { testid: "timeline-status" } });
  const jump = h("button.jump", { type: "button", hidden: true, dataset: { testid: "jump-latest" },
    onclick: () => { list.scrollIntoView({ block: "start" }); jump.hidden = true; unseen = 0; } });
  const older = h("button", { type: "button", hidden: true, dataset: { testid: "load-older" },
    onclick: () => loadOlder() }, "Load older steps");
  const root = h("div.timeline-wrap", jump, list, status, older, sentinel);

  let session = null;      // snapshot, for step parts
  let sessionId = null;
  let loaded = false;      // the first read is done (before it, live steps wait for it)
  let lo = null;           // lowest iteration shown (null: none yet)
  let loKey = "";          // sort key of that step
  const waiting = [];      // live steps that arrived before the first read finished
  let catchUpLater = () => {};
  let hi = -1;             // highest iteration shown; everything in [lo, hi] is shown
  let loadingOlder = null;
  let actions = new Map(); // action id -> action (all read; drawn once in range)
  let unseen = 0;
  let generation = 0;      // bumps on reset, so answers for an old view are dropped
  const fetched = new Set(); // cursors of older pages already asked for

  const observer = new IntersectionObserver((entries) => {
    if (entries.some((e) => e.isIntersecting)) loadOlder();
  }, { rootMargin: "600px" });
  observer.observe(sentinel);

  function reset(id) {
    sessionId = id;
    loaded = false;
    waiting.length = 0;
    lo = null;
    loKey = "";
    hi = -1;
    unseen = 0;
    generation += 1;
    loadingOlder = null;
    actions = new Map();
    fetched.clear();
    jump.hidden = true;
    older.hidden = true;
    replace(list);
    status.textContent = "Loading steps…";
  }

  const topInView = () => list.getBoundingClientRect().top > -40;

  function keyOf(item) {
    return item.kind === "step" ? `${item.created_at}|s|${String(item.iteration).padStart(12, "0")}`
      : `${item.created_at}|a|${item.id}`;
  }

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

  function addSteps(steps, live = false) {
    const wasTop = topInView();
    for (const step of steps) {
      if (lo !== null && step.iteration >= lo && step.iteration <= hi) continue;  // shown already
      const node = stepNode(step);
      place(node);
      if (lo === null || step.iteration < lo) {
        lo = step.iteration;
        loKey = node.dataset.key;
      }
      hi = Math.max(hi, step.iteration);
      if (live && !wasTop) unseen += 1;
    }
    if (unseen) {
      jump.hidden = false;
      jump.textContent = `↑ ${unseen} new step${unseen > 1 ? "s" : ""} — jump to latest`;
    }
    drawActions();
    status.textContent = lo === null ? "No steps yet — the first one appears here as soon as it is taken." : "";
    older.hidden = lo === null || lo === 0;
    timelineHooks.forEach((hook) => hook({ list, sessionId }));
  }

  function stepNode(step) {
    const usage = step.usage;
    const li = h("li.step." + step.status, { dataset: { key: keyOf({ ...step, kind: "step" }), iteration: step.iteration,
      testid: "step" } },
    h("div.step-head", h("strong", `Step ${stepNumber(step.iteration)}`), " · ", when(step.created_at),
      step.latency_ms != null ? ` · ${Math.round(step.latency_ms)} ms` : "",
      step.attempts > 1 ? ` · ${step.attempts} attempts` : "",
      step.status !== "ok" ? h("span.step-status", " · " + (step.status === "done" ? "done" : step.status)) : null),
    step.text ? h("div.step-text", step.text) : null,
    step.error ? errorBlock(step.error, "step-error") : null,
    (step.guidance || []).map((g) => h("div.guidance", g.source && g.source.conversation_id
      ? `guidance (message from ${g.source.sender || "user"}): ` : "guidance: ", g.text)),
    step.notes ? h("div.notes", step.notes) : null,
    usage ? h("div.usage", `${tokens(usage.input_tokens)} in · ${tokens(usage.output_tokens)} out tokens` +
      (usage.cost != null ? ` · ${money(usage.cost)}` : "") + failedWords(usage) +
      (usage.rate_wait_ms ? ` · waited ${(usage.rate_wait_ms / 1000).toFixed(1)} s for the model's rate limit` : ""))
      : null,
    stepParts.map((part) => part(step, { session })),
    h("div.step-json", jsonView("state", step.state), jsonView("data", step.data),
      jsonView("usage", usage), jsonView("inputs", { step: step.step_token, guidance: step.guidance },
        "step-inputs"), h("span.hint", `${step.step_token ?? ""} → ${step.next_step_token ?? ""}`)));
    return li;
  }

  // " · 2 failed attempts (1,200 tokens)", when the step's model calls had any.
  function failedWords(usage) {
    const { failed, failedTokens } = attemptCounts(usage);
    return failed ? ` · ${failed} failed attempt${failed > 1 ? "s" : ""} (${tokens(failedTokens)} tokens)` : "";
  }

  // An action is drawn once the steps around its time are shown.
  function drawActions() {
    const floor = lo === 0 || lo === null ? "" : loKey;
    for (const action of actions.values()) {
      if (action.drawn || action.type === "create") continue;
      const key = keyOf({ ...action, kind: "action" });
      if (key < floor) continue;
      action.drawn = true;
      place(actionNode(action, key));
    }
  }

  function actionNode(a, key) {
    const what = {
      pause: "Pause", resume: "Resume", destroy: "Destroy", interrupt: "Guidance",
    }[a.type] || a.type;
    const payload = a.payload || {};
    const extra = a.type === "interrupt" ? `: “${payload.guidance || ""}”`
      : a.type === "resume" && (payload.budget_tokens || payload.budget_cost)
        ? ` with the budget raised to ${[payload.budget_tokens && tokens(payload.budget_tokens) + " tokens",
          payload.budget_cost && money(payload.budget_cost)].filter(Boolean).join(" and ")}` : "";
    const outcome = a.status === "done" ? "applied" : a.status === "failed" ? "failed" : "waiting to apply";
    return h("li.action." + a.status, { id: "action-" + a.id, dataset: { key, testid: "action" } },
      h("div.step-head", h("strong", what + extra), " · ", outcome, " · ", when(a.created_at)),
      a.status === "failed" && a.error ? errorBlock(a.error, "step-error") : null);
  }

  function upsertAction(action) {
    const known = actions.get(action.id);
    action = { ...(known || {}), ...action, payload: action.payload || (known && known.payload) };
    actions.set(action.id, { ...action, drawn: known ? known.drawn : false });
    const node = document.getElementById("action-" + action.id);
    if (node) node.replaceWith(actionNode(action, node.dataset.key));
    else drawActions();
  }

  function onStep(step) {
    if (step.session_id !== sessionId) return;
    if (!loaded) return void waiting.push(step);
    if (step.iteration <= hi) return;
    if (step.iteration === hi + 1) addSteps([step], true);
    else catchUpLater();
  }

  // Reads the steps after the newest shown.  The page catches up on every
  // (re)connect and view change, so two reads can be in flight at once; each
  // judges its answer by the `hi` it asked from, not by what the other one has
  // drawn meanwhile (else the later answer to a first read looks like "a page
  // of new steps" and the whole list is redrawn under the reader).
  async function loadNewest() {
    const mine = generation;
    const since = hi;
    const [steps, acts] = await Promise.all([
      get("/api/agent-steps", { session_id: sessionId, order: "desc", limit: FIRST_PAGE,
        min_iteration: since >= 0 ? since + 1 : undefined })
        .catch((err) => { if (err.status === 404) return { steps: [] }; throw err; }),  // create still queued
      get("/api/actions", { session_id: sessionId, limit: 500 }),
    ]);
    if (mine !== generation) return;
    if (since >= 0 && steps.steps.length === FIRST_PAGE) {
      // More new steps than a page: start again from the newest (older ones page in on scroll).
      const id = sessionId;
      reset(id);
    }
    acts.actions.forEach((a) => actions.has(a.id) ? upsertAction(a) : actions.set(a.id, a));
    addSteps(steps.steps, hi >= 0);
    loaded = true;
    const early = waiting.splice(0);  // live steps that came during the read
    early.forEach((step) => onStep(step));
  }

  function loadOlder() {
    if (loadingOlder || lo === null || lo === 0 || fetched.has(lo)) return loadingOlder;
    const cursor = lo;
    const mine = generation;
    fetched.add(cursor);
    loadingOlder = get("/api/agent-steps", { session_id: sessionId, order: "desc", limit: PAGE,
      max_iteration: cursor - 1 })
      .then((page) => { if (mine === generation) addSteps(page.steps); })
      .finally(() => { if (mine === generation) loadingOlder = null; });
    return loadingOlder;
  }

  // Show step `iteration` (paging older steps in as needed), mark it (and the
  // tool call `callId` inside it, when given) as the linked one, scroll to it.
  async function reveal(iteration, callId) {
    const mine = generation;
    while (lo !== null && iteration < lo && mine === generation) {
      const before = lo;
      await loadOlder();
      if (lo === before) break;  // nothing older came: the step does not exist
    }
    if (mine !== generation) return false;
    const node = list.querySelector(`li.step[data-iteration="${iteration}"]`);
    if (!node) return false;
    list.querySelectorAll(".linked").forEach((n) => n.classList.remove("linked"));
    node.classList.add("linked");
    const call = callId ? node.querySelector(`[data-call="${CSS.escape(callId)}"]`) : null;
    if (call) call.classList.add("linked");
    node.tabIndex = -1;
    node.scrollIntoView({ block: "center" });
    node.focus({ preventScroll: true });
    return true;
  }

  return {
    root,
    reset,
    reveal,
    setSession: (s) => (session = s),
    catchUp: loadNewest,
    onStep(step, scheduleCatchUp) {
      catchUpLater = scheduleCatchUp;
      onStep(step);
    },
    onAction(action) {
      if (action.session_id === sessionId) upsertAction(action);
    },
    get size() { return list.querySelectorAll("li.step").length; },
  };
}
