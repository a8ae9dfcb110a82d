// One session: who and what it is, its usage and cost, its controls (with the
// reason when one cannot apply), a budget pause explained with a way to raise
// the budget and resume, its record (summary, where a fork came from), and its
// timeline of steps and control actions, headed by the step being generated
// (the model's output so far, from step_delta live events).  A link may point
// into the page: ?iteration=N (&tool_call=ID) scrolls to that step, ?summary=1
// to the summary.
import { get, post } from "../core/api.js";
import { $, h, replace } from "../core/dom.js";
import { agentLabel, attemptCounts, badge, errorBlock, money, reasonWords, short, stepNumber, tokens, when }
  from "../core/format.js";
import { merged, omittedOf, scheduleCatchUp } from "../core/live.js";
import { registerPage, sessionHooks } from "../core/registry.js";
import { toast } from "../core/toast.js";
import { generating } from "../components/generating.js";
import { jsonView } from "../components/json_view.js";
import { sessionRecord } from "../components/session_record.js";
import { agentSessions } from "../components/agent_sessions.js";
import { stepFilter } from "../components/step_filter.js";
import { timeline } from "../components/timeline.js";

const FINISHED = ["stopped", "done", "error"];
const RECORD_GAP_MS = 1000;  // the session is read again for what events left out at most this often
let ui = null;
// record: the session as last read over HTTP; live: what agent_state events newer
// than that read said (null when none); snapshot: what is shown, the two merged.
let current = { id: null, record: null, live: null, snapshot: null, linked: null };
let recordRead = null;  // the session whose record refreshRecord is reading
let readAgain = false;

// What a link asks to be shown: {iteration, callId} or {summary: true}, or null.
function linkedOf(query) {
  const iteration = query.get("iteration");
  if (iteration !== null && /^\d+$/.test(iteration)) return { iteration: Number(iteration), callId: query.get("tool_call") };
  return query.get("summary") ? { summary: true } : null;
}

function mount(section) {
  const steps = timeline();
  const filter = stepFilter({
    onChange: (on) => { ui.fullTimeline.hidden = on; },  // the matching steps stand in for it
    linkTo: stepLink,
    goTo: goToStep,
  });
  const record = sessionRecord();
  const button = (verb, label, cls) => h("button" + (cls ? "." + cls : ""), { type: "button",
    dataset: { verb, testid: "btn-" + verb }, onclick: () => verb === "destroy" ? confirmDestroy() : control(verb) },
  label);
  ui = {
    steps,
    filter,
    record,
    sessions: agentSessions(),
    generating: generating(),
    title: h("h1", { id: "s-title", tabindex: "-1" }),
    // the session's waterfall (pages/trace.js): its steps, model attempts, tool calls and sub-agents in time
    trace: h("a", { dataset: { testid: "trace-link" } }, "Trace (waterfall of steps, calls and sub-agents)"),
    facts: h("dl.facts"),
    notice: h("div.notice", { hidden: true, dataset: { testid: "session-notice" } }),
    usage: h("dl.facts.usage", { dataset: { testid: "session-usage" } }),
    json: h("div.step-json"),
    controls: h("div.controls", button("pause", "Pause"), button("resume", "Resume"),
      button("destroy", "Destroy", "danger")),
    why: h("p.hint", { dataset: { testid: "controls-why" } }),
    guidance: h("input", { name: "guidance", required: true, "aria-label": "Guidance for the next step",
      placeholder: "Guidance for the next step, e.g. tell jokes about dogs", dataset: { testid: "interrupt-text" } }),
    missing: h("p.empty", { hidden: true, dataset: { testid: "session-missing" } }),
    dialog: destroyDialog(),
    // Offered when sessions are at work below this one (components/session_tree.js says how many).
    tree: h("input", { type: "checkbox", id: "tree-scope", dataset: { testid: "tree-scope" } }),
    treeLabel: h("label", { for: "tree-scope", dataset: { testid: "tree-scope-label" } }),
  };
  ui.treeScope = h("p.tree-scope", { hidden: true }, ui.tree, " ", ui.treeLabel);
  ui.fullTimeline = h("div.full-timeline", ui.generating.root, steps.root);
  ui.sendGuidance = h("button", { type: "submit", dataset: { testid: "btn-interrupt" } }, "Send guidance");
  // On a wide screen the usage, record and sessions go beside the timeline
  // (dashboard.css .session-layout), so the timeline starts on the first screen
  // (it started ~850 px down at 1400x900); on a narrow one they come before it.
  ui.body = h("div.session-layout",
    h("div.panel.session-head", ui.title, h("p.head-links", ui.trace), ui.facts, ui.notice,
      ui.controls, ui.treeScope, ui.why,
      h("form.inline", { id: "interrupt-form", dataset: { testid: "interrupt-form" }, onsubmit: sendGuidance },
        ui.guidance, ui.sendGuidance)),
    h("div.session-side",
      h("div.panel", h("h2", "Usage ", h("small", "model calls of this session")), ui.usage, ui.json),
      record.root,
      ui.sessions.root),
    h("div.panel.session-timeline", h("h2", "Timeline ", h("small", { id: "s-count" }, "")), timelineTools(),
      filter.results, ui.fullTimeline));
  replace(section, h("a.back", { href: "#/" }, "← all agents"), ui.missing, ui.body, ui.dialog);
}

// Moving in a long history: go straight to step N (as a ?iteration= link does),
// and take the whole record away as JSON lines (GET /api/sessions/<id>/export).
function timelineTools() {
  ui.goTo = h("input", { type: "number", min: "1", step: "1", id: "go-to-step", required: true,
    placeholder: "step", dataset: { testid: "go-to-step" } });
  ui.download = h("a", { dataset: { testid: "download-record" }, download: "" }, "Download the record (JSON lines)");
  const go = (event) => {
    event.preventDefault();
    const n = Number(ui.goTo.value);
    if (!Number.isInteger(n) || n < 1 || !current.id) return;
    ui.filter.clear();  // the step is shown in the full timeline
    goToStep(n - 1);
  };
  return h("div.timeline-tools",
    h("form.inline.go-to", { onsubmit: go, dataset: { testid: "go-to-form" } },
      h("label", { for: "go-to-step" }, "Go to step"), ui.goTo, h("button", { type: "submit" }, "Go")),
    ui.filter.controls,
    ui.download);
}

const stepLink = (iteration) => `#/session/${current.id}?iteration=${iteration}`;

// Show step `iteration` in the timeline as a link to it does; the link already
// followed (no hashchange) is shown again directly.
function goToStep(iteration) {
  if (location.hash !== stepLink(iteration)) {
    location.hash = stepLink(iteration);
  } else {
    ui.steps.reveal(iteration).then((found) => found || toast(`Step ${stepNumber(iteration)} is not in this session's timeline.`, true));
  }
}

function destroyDialog() {
  const dialog = h("dialog", { "aria-labelledby": "destroy-title", dataset: { testid: "destroy-dialog" } },
    h("form", { method: "dialog" },
      h("h2", { id: "destroy-title" }, "Destroy this agent?"),
      h("p", "It stops at its next step boundary (a step that hangs is cancelled after a grace period). ",
        "Its steps stay readable, but it cannot be resumed."),
      h("p", { id: "destroy-children", dataset: { testid: "destroy-children" }, hidden: true }),
      h("div.controls",
        h("button", { value: "cancel", dataset: { testid: "destroy-cancel" } }, "Cancel"),
        h("button.danger", { value: "destroy", dataset: { testid: "destroy-confirm" } }, "Destroy"))));
  dialog.addEventListener("close", () => {
    if (dialog.returnValue === "destroy") control("destroy");
  });
  return dialog;
}

function confirmDestroy() {
  ui.dialog.returnValue = "";
  ui.dialog.showModal();
  showDoomedChildren(current.id);
}

// The dialog says what goes with it: destroy cascades down the sub-agent tree
// (runtime/session/session_tree.py), to every unfinished session below this one except
// those started with on_parent_destroy "abandon".
async function showDoomedChildren(id) {
  const line = ui.dialog.querySelector("[data-testid=destroy-children]");
  line.hidden = true;
  let below;
  try {
    below = (await get(`/api/sessions/${encodeURIComponent(id)}/children`, { descendants: true })).children;
  } catch (err) {
    return;  // the dialog still says what happens to this session
  }
  const open = below.filter((c) => !["stopped", "done", "error"].includes(c.status));
  if (id !== current.id || !open.length) return;
  line.textContent = `Its ${open.length === 1 ? "unfinished sub-agent goes" : open.length + " unfinished sub-agents go"} `
    + "too: each is destroyed after it (except one started with on_parent_destroy \"abandon\").";
  line.hidden = false;
}

// Pause, resume and guidance go to the sessions below too when the person
// ticked the box (the API's tree: true); destroy always does (its dialog says so).
const TREE_VERBS = ["pause", "resume", "interrupt"];

document.addEventListener("subagents-below", ({ detail }) => {
  if (!ui || detail.sessionId !== current.id) return;
  ui.treeScope.hidden = !detail.open;
  if (!detail.open) ui.tree.checked = false;
  ui.treeLabel.textContent = `Pause, resume and guidance also go to its ${detail.open === 1
    ? "unfinished sub-agent" : detail.open + " unfinished sub-agents"} (all the sessions below this one)`;
  ui.treeScope.dataset.open = String(detail.open);
});

async function control(verb, extra = {}) {
  const s = current.snapshot;
  if (!s) return false;
  const tree = TREE_VERBS.includes(verb) && ui.tree.checked && !ui.treeScope.hidden;
  try {
    await post(`/api/agents/${s.agent_id}/${verb}`, { session_id: s.session_id, ...extra, ...(tree ? { tree } : {}) });
    const what = verb === "interrupt" ? "guidance sent" : verb + " requested";
    toast(tree ? `${what} for this session and the ${ui.treeScope.dataset.open} below it` : what);
    return true;
  } catch (err) {
    toast(verb + " failed: " + err.message, true);
    return false;
  }
}

async function sendGuidance(event) {
  event.preventDefault();
  if (await control("interrupt", { guidance: ui.guidance.value })) ui.guidance.value = "";
}

function fact(label, ...value) {
  return h("div", h("dt", label), h("dd", ...value));
}

function render(s) {
  current.snapshot = s;
  ui.steps.setSession(s);
  ui.generating.setSession(s);
  ui.record.update(s);
  ui.sessions.show(s);
  ui.title.replaceChildren(agentLabel(s), " ", badge(s.status),
    s.status_reason ? h("small", { dataset: { testid: "session-reason" } }, " " + reasonWords(s.status_reason, s.status)) : "");
  replace(ui.facts,
    fact("Status", h("span", { dataset: { testid: "session-status" } }, s.status)),
    fact("Agent", h("code", { title: s.agent_id }, short(s.agent_id))),
    fact("Session", h("code", { title: s.session_id }, short(s.session_id))),
    fact("Moniker", s.moniker || ""),
    fact("Steps", h("span", { dataset: { testid: "session-iteration" } }, s.iteration >= 0 ? String(stepNumber(s.iteration)) : "none yet")),
    fact("Task", s.task || "—"),
    fact("Conversation", s.conversation_id
      ? h("a", { href: "#/conversation/" + s.conversation_id }, short(s.conversation_id)) : "—"),
    fact("Created", when(s.created_at)),
    fact("Updated", when(s.updated_at)));
  renderNotice(s);
  renderUsage(s);
  renderControls(s);
  replace(ui.json, jsonView("config", s.config, "session-config"), jsonView("state", s.state),
    jsonView("pending guidance", s.pending_guidance && s.pending_guidance.length ? s.pending_guidance : null));
  const count = stepNumber(s.iteration);
  $("#s-count").textContent = s.iteration >= 0 ? `${count} step${count === 1 ? "" : "s"}, newest first` : "";
}

// A field of the raise-budget form.  The notice is drawn again on every update
// of the session, so what the person typed is carried over from the field it
// replaces; only a field they have not touched shows the suggested budget.
function budgetInput(id, attrs, suggested) {
  const old = ui.notice.querySelector(`#${id}`);
  const typed = old && old.dataset.typed ? old.value : null;
  return h("input", { type: "number", id, ...attrs, value: typed ?? suggested,
    dataset: { testid: id, ...(typed !== null ? { typed: "1" } : {}) },
    oninput: (e) => { e.target.dataset.typed = "1"; } });
}

// A budget pause says what was spent and offers to raise the budget; an error
// says what failed in one sentence, with the details folded.
function renderNotice(s) {
  const cfg = s.config || {};
  if (s.status === "paused" && s.status_reason === "budget") {
    const used = s.usage || {};
    const spentTokens = (used.input_tokens || 0) + (used.output_tokens || 0);
    const tokensIn = budgetInput("raise-tokens", { min: "1", step: "1" },
      cfg.budget_tokens ? String(Math.max(cfg.budget_tokens * 2, spentTokens * 2)) : "");
    const costIn = budgetInput("raise-cost", { min: "0", step: "any" },
      cfg.budget_cost ? String(Math.max(cfg.budget_cost * 2, (used.cost || 0) * 2)) : "");
    const focused = ui.notice.contains(document.activeElement) ? document.activeElement.id : null;
    const raise = async (e) => {
      e.preventDefault();
      const extra = {};
      if (tokensIn.value) extra.budget_tokens = Number(tokensIn.value);
      if (costIn.value) extra.budget_cost = Number(costIn.value);
      await control("resume", extra);
    };
    ui.notice.hidden = false;
    ui.notice.className = "notice warn";
    replace(ui.notice,
      h("p", h("strong", "Paused: its budget is reached. "),
        `It has used ${tokens(spentTokens)} tokens` + (used.cost != null ? ` and ${money(used.cost)}` : "") +
        `; the next step would pass the budget (${cfg.budget_tokens ? tokens(cfg.budget_tokens) + " tokens" : ""}` +
        `${cfg.budget_tokens && cfg.budget_cost ? ", " : ""}${cfg.budget_cost ? money(cfg.budget_cost) : ""}).`),
      s.last_error ? h("p.hint", s.last_error.replace(/^budget: /, "")) : null,
      h("form.inline.raise", { onsubmit: raise, dataset: { testid: "raise-form" } },
        cfg.budget_tokens ? h("label", { for: "raise-tokens" }, "Token budget", tokensIn) : null,
        cfg.budget_cost ? h("label", { for: "raise-cost" }, "Cost budget ($)", costIn) : null,
        h("button.primary", { type: "submit", dataset: { testid: "raise-budget" } }, "Raise budget and resume")));
    if (focused) $(`#${focused}`, ui.notice)?.focus();
  } else if (s.status === "error" && s.last_error) {
    ui.notice.hidden = false;
    ui.notice.className = "notice bad";
    replace(ui.notice, h("p", h("strong", "It failed: ")), errorBlock(s.last_error),
      h("p.hint", "Resume retries the failed step."));
  } else {
    ui.notice.hidden = true;
  }
}

function renderUsage(s) {
  const u = s.usage;
  if (!u) return replace(ui.usage, fact("Model calls", "none yet (this moniker may not call a model)"));
  replace(ui.usage,
    fact("Tokens in", h("span", { dataset: { testid: "usage-input" } }, tokens(u.input_tokens))),
    fact("Tokens out", h("span", { dataset: { testid: "usage-output" } }, tokens(u.output_tokens))),
    fact("Cost", h("span", { dataset: { testid: "usage-cost" } }, money(u.cost))),
    fact("Calls", tokens(u.calls)),
    fact("Model time", u.duration_ms != null ? (u.duration_ms / 1000).toFixed(1) + " s" : "—"),
    attemptsFact(u),
    s.config && s.config.budget_tokens ? fact("Token budget", tokens(s.config.budget_tokens)) : null,
    s.config && s.config.budget_cost ? fact("Cost budget", money(s.config.budget_cost)) : null);
}

// "HTTP attempts: 12, failed 9 (8,400 tokens)": the failed ones apart, as
// their tokens were spent for nothing.  Shown once attempts are counted.
function attemptsFact(u) {
  const { attempts, failed, failedTokens } = attemptCounts(u);
  if (!attempts && !failed) return null;
  return fact("HTTP attempts", h("span", { dataset: { testid: "usage-attempts" } }, tokens(attempts)),
    failed ? h("span", { dataset: { testid: "usage-failed" } },
      `, failed ${tokens(failed)} (${tokens(failedTokens)} tokens)`) : null);
}

// Controls that cannot apply are disabled, and the page says why.
function renderControls(s) {
  const finished = FINISHED.includes(s.status) && s.status !== "error";
  const reasons = {
    pause: s.status === "paused" ? "it is paused already" : s.status === "error" ? "it has failed (resume retries)"
      : finished ? "it has finished" : s.status === "pending" ? "it has not started yet" : "",
    resume: s.status === "running" ? "it is running" : finished ? "it has finished"
      : s.status === "pending" ? "it has not started yet" : s.status === "stopping" ? "it is stopping"
        : s.status === "waiting" ? `it waits ${reasonWords(s.status_reason, s.status) || "for something"}, not paused`
          : "",
    destroy: finished ? "it has finished" : s.status === "stopping" ? "it is stopping" : "",
  };
  const why = [];
  for (const [verb, reason] of Object.entries(reasons)) {
    const button = ui.controls.querySelector(`[data-verb="${verb}"]`);
    button.disabled = Boolean(reason);
    button.title = reason ? `Cannot ${verb}: ${reason}` : "";
    if (reason) why.push(`${verb[0].toUpperCase() + verb.slice(1)} is off: ${reason}.`);
  }
  const noGuidance = finished ? "it has finished" : s.status === "stopping" ? "it is stopping" : "";
  ui.guidance.disabled = ui.sendGuidance.disabled = Boolean(noGuidance);
  ui.guidance.placeholder = noGuidance ? `No guidance: ${noGuidance}` : "Guidance for the next step, e.g. tell jokes about dogs";
  ui.why.textContent = why.join(" ");
}

async function load(params) {
  const id = params.id;
  try {
    current.loading = true;  // fromEvent: this read is on its way, no need for another
    const s = await get("/api/sessions/" + encodeURIComponent(id)).finally(() => {
      if (id === current.id) current.loading = false;
    });
    if (id !== current.id) return;
    ui.missing.hidden = true;
    ui.body.hidden = false;
    fromRecord(s);
    await ui.steps.catchUp();
    await Promise.all(sessionHooks.map((hook) => hook(id, s)));
    await showLinked(id);
  } catch (err) {
    if (id !== current.id) return;
    if (err.status === 404 || err.status === 400) {
      ui.body.hidden = true;
      ui.missing.hidden = false;
      ui.missing.textContent = `There is no session ${id}. It may have been removed after its retention period.`;
    } else {
      toast("Could not load the session: " + err.message, true);
    }
  }
}

// What the page shows of the session: its record as last read over HTTP, with
// the fields of the live agent_state events newer than that read laid over it.
// Events are small (domain/events.py): no guidance lists, the config only when
// it changed, and a field too big left out (`omitted`), so those come from the
// record, which is read again (at most every RECORD_GAP_MS) when an event left
// a field out or came before the first read with no read on its way (an event
// that overtakes the page's own read is laid over what that read returns).
function fromRecord(s) {
  current.record = s;
  if (current.live && (s.updated_at || "") >= (current.live.updated_at || "")) current.live = null;
  show();
}

function fromEvent(s) {
  const newest = current.live || current.record;
  if (newest && (s.updated_at || "") < (newest.updated_at || "")) return;
  current.live = merged(current.live, s);
  show();
  if (omittedOf(s).length || (!current.record && !current.loading)) refreshRecord();
}

function show() {
  const s = current.live ? { ...(current.record || {}), ...current.live } : current.record;
  if (s) render(s);
}

function refreshRecord() {
  const id = current.id;
  if (recordRead === id) {
    readAgain = true;
    return;
  }
  recordRead = id;
  (async () => {
    do {
      readAgain = false;
      try {
        const s = await get("/api/sessions/" + encodeURIComponent(id));
        if (id === current.id) fromRecord(s);
      } catch (err) {
        return;  // the next catch-up reads it
      }
      await new Promise((done) => setTimeout(done, RECORD_GAP_MS));
    } while (readAgain && id === current.id);
  })().finally(() => { if (recordRead === id) recordRead = null; });
}

// Once per link followed (not on every catch-up): scroll to what it points at.
async function showLinked(id) {
  const linked = current.linked;
  if (!linked || id !== current.id) return;
  current.linked = null;
  if (linked.summary) ui.record.focus();
  else if (!(await ui.steps.reveal(linked.iteration, linked.callId)) && id === current.id) {
    toast(`Step ${stepNumber(linked.iteration)} is not in this session's timeline.`, true);
  }
}

registerPage({
  name: "session",
  match: (parts) => (parts[0] === "session" && parts[1] ? { id: parts[1] } : null),
  mount,
  enter(params) {
    const linked = linkedOf(params.query);
    if (params.id === current.id) {
      current.linked = linked;  // the catch-up that follows shows it
      if (linked && linked.iteration !== undefined) ui.steps.aim(linked.iteration);  // reading its page directly
      return;
    }
    current = { id: params.id, record: null, live: null, snapshot: null, linked, loading: false };
    ui.download.href = `/api/sessions/${encodeURIComponent(params.id)}/export`;
    ui.trace.href = `#/trace/${encodeURIComponent(params.id)}`;
    readAgain = false;
    ui.steps.reset(params.id);
    ui.filter.reset(params.id);
    if (linked && linked.iteration !== undefined) ui.steps.aim(linked.iteration);
    ui.generating.reset(params.id);
    ui.record.reset(params.id);
    ui.sessions.reset();
    ui.treeScope.hidden = true;  // until the tree of this one is read
    ui.tree.checked = false;
    ui.body.hidden = true;  // nothing of the previous session stays on screen
    ui.missing.hidden = true;
    ui.title.textContent = "";
  },
  rooms: (params) => ["session:" + params.id],
  catchUp: (params) => load(params),
  on: {
    agent_state(s) {
      if (s.session_id !== current.id) return;
      fromEvent(s);
      ui.body.hidden = false;
    },
    agent_step(step) {
      ui.steps.onStep(step, scheduleCatchUp);
      ui.filter.onStep(step);
      ui.generating.onStep(step);
    },
    step_delta(delta) {
      ui.generating.onDelta(delta);
    },
    action(action) {
      if (action.session_id !== current.id) return;
      ui.steps.onAction(action);
      if (action.type !== "create" && action.status === "failed") toast(`${action.type} failed: ${action.error}`, true);
      else if (action.type !== "create" && action.status === "done") toast(action.type + " applied");
    },
  },
});
