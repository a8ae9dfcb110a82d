// A session's waterfall (GET /api/sessions/ID/trace): "#/trace/ID?from_iteration=N".
// One row per step, its bar placed by time on an axis shared by the rows shown
// and scaled to them; below each step its model attempts, its tool calls (the
// wait for a person's approval hatched, apart from the solid run; a question's
// wait for the user dotted) and the sub-agents its calls started, each linking
// to its own trace.  Every row says in words what its bar draws (durations,
// tokens, outcome): the bars are decoration.
//
// A long session is read a window of steps at a time (as the timeline reads a
// page of steps, components/step_window.js): earlier and later windows are
// links, so a 2,000-step session draws 200 rows, not 2,000.  While the session
// runs and the newest window is shown, its new steps redraw it (at most once a
// second).
import { get } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { absolute, badge, duration, short, statusWord, stepNumber, tokens } from "../core/format.js";
import { registerPage } from "../core/registry.js";

const LIMIT = 200;
const FINISHED = new Set(["done", "stopped", "error"]);

let ui = null;
let current = { id: null, from: null };
let shown = null;  // the last answer drawn
let generation = 0;
let timer = null;

function mount(section) {
  ui = {
    back: h("a.back", { href: "#/" }, "← session"),
    title: h("h1", { id: "trace-title", tabindex: "-1" }, "Trace"),
    meta: h("p", { role: "status", dataset: { testid: "trace-meta" } }),
    navTop: h("nav.trace-nav", { "aria-label": "Trace windows" }),
    navBottom: h("nav.trace-nav", { "aria-label": "Trace windows, below the steps" }),
    axis: h("p.trace-axis.hint", { dataset: { testid: "trace-axis" } }),
    rows: h("ol.trace", { dataset: { testid: "trace-rows" } }),
    children: h("div.panel", { hidden: true, dataset: { testid: "trace-children" } }),
  };
  replace(section, ui.back,
    h("div.panel", ui.title, ui.meta, legend(), ui.navTop),
    h("div.panel", h("h2", "Steps"), ui.axis, ui.rows, ui.navBottom),
    ui.children);
}

function legend() {
  const key = (cls, words) => h("li", h("span.swatch." + cls, { "aria-hidden": "true" }), " ", words);
  return h("ul.trace-legend", { "aria-label": "What the bars show" },
    key("step", "step"), key("attempt", "model attempt (start derived)"), key("approval", "waiting for approval"),
    key("run", "tool running"), key("question", "waiting for the user"), key("child", "sub-agent"));
}

async function load(params, { focus = true } = {}) {
  const from = params.query.get("from_iteration");
  current = { id: params.id, from };
  const mine = ++generation;
  ui.back.href = "#/session/" + encodeURIComponent(params.id);
  let out;
  try {
    out = await get(`/api/sessions/${encodeURIComponent(params.id)}/trace`, { from_iteration: from, limit: LIMIT });
  } catch (err) {
    if (mine !== generation) return;
    replace(ui.title, "Trace");
    replace(ui.meta, h("span.error-sentence", "Could not read the trace: " + err.message));
    [ui.navTop, ui.navBottom, ui.axis, ui.rows].forEach((n) => replace(n));
    ui.children.hidden = true;
    return;
  }
  if (mine !== generation) return;
  shown = out;
  draw(out);
  if (focus) ui.title.focus({ preventScroll: true });
}

function draw(out) {
  replace(ui.title, "Trace: ", out.name || short(out.session_id), " ", badge(out.status));
  const s = out.session;
  const range = out.steps.length
    ? `Steps ${stepNumber(out.steps[0].iteration)}–${stepNumber(out.steps.at(-1).iteration)}` : "No steps here";
  const total = out.last_iteration >= out.first_iteration ? out.last_iteration - out.first_iteration + 1 : 0;
  replace(ui.meta, `${range} of ${total.toLocaleString()}. `,
    `The session ${s.open ? "has run" : "ran"} ${duration(s.duration_ms)}${s.open ? " so far" : ""}`,
    ` (started ${absolute(s.start)})`, out.calls_truncated ? "; this window's tool calls were cut short." : ".");
  const nav = () => windowLinks(out);
  replace(ui.navTop, nav());
  replace(ui.navBottom, nav());
  const children = new Map(out.children.map((c) => [c.session_id, c]));
  const scale = scaleOf(out, children);
  replace(ui.axis, out.steps.length
    ? `The bars share one time axis: from ${clock(scale.t0)} (left) to ${clock(scale.t1)} (right), `
      + `${duration(scale.t1 - scale.t0)}.` : "");
  replace(ui.rows, out.steps.map((step) => stepRow(out, step, scale, children)));
  drawChildren(out);
}

// ---- moving between windows ------------------------------------------------

function windowLinks(out) {
  const href = (from) => `#/trace/${encodeURIComponent(out.session_id)}?from_iteration=${from}`;
  const newest = Math.max(out.first_iteration, out.last_iteration - LIMIT + 1);
  const links = [
    [out.earlier != null && out.earlier > out.first_iteration ? out.first_iteration : null, "First steps", "trace-first"],
    [out.earlier, "← Earlier steps", "trace-earlier"],
    [out.later, "Later steps →", "trace-later"],
    [out.later != null && newest > out.later ? newest : null, "Newest steps", "trace-newest"],
  ].filter(([from]) => from != null);
  if (!links.length) return h("span.hint", out.steps.length ? "All of its steps are shown." : "");
  return links.map(([from, words, testid]) => h("a", { href: href(from), dataset: { testid } }, words));
}

// ---- the time axis: the window's rows, left to right -------------------------

const ms = (iso) => (iso ? Date.parse(iso) : NaN);

function callEnd(call, now) {
  if (call.end) return ms(call.end);
  if (call.open) return now;
  if (call.run_start && call.run_ms != null) return ms(call.run_start) + call.run_ms;
  return ms(call.created_at);
}

function childSpan(child, now) {
  const start = ms(child.created_at);
  return [start, FINISHED.has(child.status) ? ms(child.updated_at) || start : now];
}

function scaleOf(out, children) {
  const now = ms(out.now);
  let t0 = Infinity;
  let t1 = -Infinity;
  const take = (a, b) => {
    if (Number.isFinite(a)) { t0 = Math.min(t0, a); t1 = Math.max(t1, a); }
    if (Number.isFinite(b)) { t0 = Math.min(t0, b); t1 = Math.max(t1, b); }
  };
  for (const step of out.steps) {
    take(ms(step.start), ms(step.end));
    for (const call of step.tool_calls) {
      take(ms(call.created_at), callEnd(call, now));
      const child = call.child_session_id && children.get(call.child_session_id);
      if (child) take(...childSpan(child, now));
    }
  }
  if (!Number.isFinite(t0)) t0 = t1 = now;
  if (t1 - t0 < 1) t1 = t0 + 1;
  return { t0, t1, now, at: (t) => (100 * (t - t0)) / (t1 - t0) };
}

const clock = (t) => new Date(t).toLocaleTimeString();

// A bar from a to b (times in ms) on the row's track.
function bar(scale, a, b, cls, title, testid) {
  if (!Number.isFinite(a)) return null;
  const left = Math.max(0, Math.min(100, scale.at(a)));
  const right = Math.max(left, Math.min(100, scale.at(Number.isFinite(b) ? b : a)));
  return h("span.bar." + cls, { title, dataset: testid ? { testid } : undefined,
    style: { left: left.toFixed(3) + "%", width: (right - left).toFixed(3) + "%" } });
}

const track = (...bars) => h("div.track", { "aria-hidden": "true" }, bars);

function row(cls, testid, data, label, bars, nested) {
  return h("li.trace-row." + cls, { dataset: { testid, ...data } },
    h("div.trace-head", h("div.trace-label", label), track(bars)),
    nested && nested.length ? h("ul.trace-nested", nested) : null);
}

// ---- rows ---------------------------------------------------------------------------

function stepRow(out, step, scale, children) {
  const words = [statusWord(step.status), duration(step.duration_ms)];
  if (step.input_tokens || step.output_tokens) words.push(`${tokens(step.input_tokens)} in, ${tokens(step.output_tokens)} out tokens`);
  const label = [h("a", { href: `#/session/${encodeURIComponent(out.session_id)}?iteration=${step.iteration}` },
    `Step ${stepNumber(step.iteration)}`), " · ", words.join(" · "),
  step.error ? h("span.trace-error", " · " + step.error) : null];
  const nested = [...step.attempts.map((a) => attemptRow(a, scale)),
    ...step.tool_calls.map((c) => callRow(c, scale, children))];
  return row("trace-step.status-" + step.status, "trace-step", { iteration: String(step.iteration) }, label,
    [bar(scale, ms(step.start), ms(step.end), "step.status-" + step.status, `step ${stepNumber(step.iteration)}`)],
    nested);
}

function attemptRow(a, scale) {
  const words = [`Model attempt ${a.n}`, a.outcome, duration(a.duration_ms),
    `${tokens(a.input_tokens)} in, ${tokens(a.output_tokens)} out tokens`];
  if (a.structured) words.push(`structured: ${a.structured}`);
  if (a.model) words.push(a.model);
  const ok = a.outcome === "ok";
  return row("depth-1.trace-attempt", "trace-attempt", { outcome: a.outcome },
    [words.join(" · "), a.error ? h("span.trace-error", " · " + a.error) : null],
    [bar(scale, ms(a.start), ms(a.start) + a.duration_ms, "attempt" + (ok ? "" : ".failed"), words.join(" · "))]);
}

function callRow(call, scale, children) {
  const words = [h("code", call.name), " · ", statusWord(call.status)];
  const bars = [];
  const created = ms(call.created_at);
  if (call.approval_wait_ms != null) {
    const still = call.status === "waiting_approval";
    words.push(` · ${still ? "waiting" : "waited"} ${duration(call.approval_wait_ms)} for approval`);
    bars.push(bar(scale, created, created + call.approval_wait_ms, "approval", "waiting for approval",
      "trace-approval"));
  }
  if (call.question) {
    words.push(` · ${call.open ? "waiting" : "waited"} ${duration(call.user_wait_ms)} for the user`);
    bars.push(bar(scale, created, created + (call.user_wait_ms || 0), "question", "waiting for the user",
      "trace-question"));
  }
  if (call.run_start) {
    words.push(` · ${call.open ? "running for" : "ran"} ${duration(call.run_ms)}`);
    const start = ms(call.run_start);
    bars.push(bar(scale, start, start + (call.run_ms || 0), "run", "running", "trace-run"));
  }
  if (!bars.length) bars.push(bar(scale, created, callEnd(call, scale.now), "run", call.status));
  if (call.error) words.push(h("span.trace-error", " · " + call.error));
  const child = call.child_session_id;
  const nested = child ? [childRow(child, children.get(child), scale)] : [];
  return row("depth-1.trace-call", "trace-call", { name: call.name, status: call.status, callId: call.id },
    words, bars, nested);
}

function childRow(id, child, scale) {
  const link = h("a", { href: "#/trace/" + encodeURIComponent(id), dataset: { testid: "trace-child-link" } },
    `Sub-agent ${(child && child.name) || short(id)}`);
  if (!child) return row("depth-2.trace-child", "trace-child", { session: id }, [link, " · starting"], []);
  const [a, b] = childSpan(child, scale.now);
  const words = [statusWord(child.status), `${FINISHED.has(child.status) ? "ran" : "running for"} ${duration(b - a)}`];
  return row("depth-2.trace-child", "trace-child", { session: id, status: child.status },
    [link, " · ", words.join(" · ")], [bar(scale, a, b, "child", "sub-agent")]);
}

function drawChildren(out) {
  ui.children.hidden = out.children.length === 0;
  replace(ui.children, h("h2", `Sub-agents (${out.children.length})`),
    h("ul.trace-children", out.children.map((c) => h("li", { dataset: { testid: "trace-child-item", session: c.session_id } },
      h("a", { href: "#/trace/" + encodeURIComponent(c.session_id) }, c.name || short(c.session_id)), " ",
      badge(c.status),
      c.spawned_at_iteration != null ? ` spawned at step ${stepNumber(c.spawned_at_iteration)}` : "",
      " · ", h("a", { href: "#/session/" + encodeURIComponent(c.session_id) }, "its session")))));
}

// ---- live: the newest window of a running session follows it ------------------

function changed(data) {
  if (!shown || data.session_id !== current.id || shown.later != null) return;
  if (!shown.session.open && FINISHED.has(shown.status)) return;
  clearTimeout(timer);
  const params = { id: current.id, query: new URLSearchParams(current.from ? { from_iteration: current.from } : {}) };
  timer = setTimeout(() => load(params, { focus: false }), 1000);
}

registerPage({
  name: "trace",
  match: (parts) => (parts[0] === "trace" && parts[1] ? { id: parts[1] } : null),
  mount,
  enter: (params) => {
    shown = null;
    load(params);
  },
  rooms: (params) => ["session:" + params.id],
  catchUp: () => {},
  on: { agent_step: changed, agent_state: changed },
});
