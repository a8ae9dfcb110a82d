// Fleet controls on the agents list: the bar above the table that acts on the
// selected agents (ids) or on every agent matching the list's filters, through
// POST /api/agents/bulk.  Each action is previewed first (dry_run): a dialog
// says how many agents match and how many the action reaches before anything
// is queued; interrupt asks for its guidance there, and destroy says that
// sub-agents go too.  The page owns the selection; this bar only reads it.
import { post } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { agentLabel, statusWord } from "../core/format.js";
import { toast } from "../core/toast.js";

const MAX_ACTIONS = 1000;  // api/routes/bulk.py: more needs limit
const SAMPLE = 8;  // names listed in the dialog

const ACTIONS = {
  pause: { label: "Pause", verb: "pause", done: "paused",
    explain: "Each pauses at its next step boundary: a step in flight finishes first." },
  resume: { label: "Resume", verb: "resume", done: "resumed",
    explain: "Paused agents carry on; failed ones retry their failed step." },
  interrupt: { label: "Interrupt…", verb: "interrupt", done: "interrupted",
    explain: "Each gets this guidance at its next step." },
  destroy: { label: "Destroy…", verb: "destroy", done: "destroyed", danger: true,
    explain: "Each stops at its next step boundary, and its sub-agents are destroyed too (except those " +
      "started to outlive it). Their steps stay readable, but they cannot be resumed." },
};

const plural = (n, one, many = one + "s") => `${n.toLocaleString()} ${n === 1 ? one : many}`;

// selection() -> {mode: "none" | "ids" | "matching", ids: [agent_id], count, filter};
// selectAllMatching(), clear(): the page changes its selection; done(action): after a queued action.
export function bulkBar({ selection, selectAllMatching, clear, done }) {
  const summary = h("span.bulk-summary", { dataset: { testid: "bulk-summary" } });
  const matching = h("button", { type: "button", dataset: { testid: "bulk-select-matching" },
    onclick: selectAllMatching }, "Select all matching");
  const clearButton = h("button", { type: "button", dataset: { testid: "bulk-clear" }, onclick: clear },
    "Clear selection");
  const buttons = Object.entries(ACTIONS).map(([action, a]) => h("button" + (a.danger ? ".danger" : ""), {
    type: "button", dataset: { testid: "bulk-" + action }, onclick: () => start(action) }, a.label));
  const dialog = makeDialog();
  const root = h("div.bulk-bar", { role: "group", "aria-label": "Act on selected agents",
    dataset: { testid: "bulk-bar" } }, summary, matching, clearButton, h("span.bulk-actions", buttons), dialog.node);

  // Drawn in place (the same buttons every time), so focus on one survives.
  function refresh(total) {
    const sel = selection();
    summary.textContent = sel.mode === "matching" ? `All ${plural(sel.count, "matching agent")} selected`
      : sel.mode === "ids" ? `${plural(sel.count, "agent")} selected` : "No agent selected";
    matching.textContent = `Select all ${plural(total || 0, "matching agent")}`;
    matching.disabled = sel.mode === "matching" || !total;
    clearButton.disabled = sel.mode === "none";
    buttons.forEach((b) => { b.disabled = sel.mode === "none"; });
  }

  async function start(action) {
    const sel = selection();
    if (sel.mode === "none") return;
    const filter = sel.mode === "matching" ? sel.filter : { ids: sel.ids };
    let preview;
    try {
      preview = await post("/api/agents/bulk", { filter, action, dry_run: true });
    } catch (err) {
      return toast("Could not preview: " + err.message, true);
    }
    const answer = await dialog.ask(action, preview);
    if (!answer) return;
    const body = { filter, action, ...(action === "interrupt" ? { guidance: answer.guidance } : {}) };
    if (preview.applies > MAX_ACTIONS) body.limit = MAX_ACTIONS;
    try {
      const made = await post("/api/agents/bulk", body);
      const rest = made.remaining ? ` (${plural(made.remaining, "more agent")} left: run it again)` : "";
      toast(`${ACTIONS[action].label.replace("…", "")}: queued for ${plural(made.actions.length, "agent")}${rest}`);
      done(action, made);
    } catch (err) {
      toast(`Could not ${ACTIONS[action].verb}: ${err.message}`, true);
    }
  }

  return { root, refresh };
}

// One <dialog> for every action: the preview, the guidance of an interrupt,
// and a confirm button that names what it does.
function makeDialog() {
  const title = h("h2", { id: "bulk-dialog-title", dataset: { testid: "bulk-dialog-title" } });
  const counts = h("p", { dataset: { testid: "bulk-preview" } });
  const explain = h("p.hint");
  const sample = h("ul.plain.bulk-sample", { "aria-label": "Some of the matching agents" });
  const guidance = h("textarea", { id: "bulk-guidance", rows: 3, maxlength: 20000,
    dataset: { testid: "bulk-guidance" } });
  const guidanceField = h("div", h("label", { for: "bulk-guidance" }, "Guidance for each agent"), guidance);
  const confirm = h("button", { value: "confirm", dataset: { testid: "bulk-confirm" } });
  const node = h("dialog.bulk-dialog", { "aria-labelledby": "bulk-dialog-title", dataset: { testid: "bulk-dialog" } },
    h("form", { method: "dialog" }, title, counts, explain, sample, guidanceField,
      h("div.controls",
        h("button", { value: "cancel", formnovalidate: true, dataset: { testid: "bulk-cancel" } }, "Cancel"),
        confirm)));
  guidance.addEventListener("input", () => guidance.setCustomValidity(""));
  confirm.addEventListener("click", () => {
    const blank = !guidanceField.hidden && !guidance.value.trim();
    guidance.setCustomValidity(blank ? "Write the guidance to send." : "");
  });

  function ask(action, preview) {
    const a = ACTIONS[action];
    const n = Math.min(preview.applies, MAX_ACTIONS);
    const skipped = preview.matched - preview.applies;
    title.textContent = n ? `${a.label.replace("…", "")} ${plural(n, "agent")}?` : `Nothing to ${a.verb}`;
    counts.textContent = `${plural(preview.matched, "agent")} ${preview.matched === 1 ? "matches" : "match"}; ` +
      (n ? `${n.toLocaleString()} will be ${a.done}` : `none can be ${a.done}`) +
      (skipped ? `, ${plural(skipped, "is", "are")} skipped (their status does not allow it)` : "") +
      (preview.applies > MAX_ACTIONS ? `; only the oldest ${MAX_ACTIONS.toLocaleString()} this time` : "") + ".";
    explain.textContent = a.explain;
    replace(sample, preview.sessions.filter((s) => s.applies).slice(0, SAMPLE).map((s) =>
      h("li", agentLabel(s), " ", h("small", statusWord(s.status)))),
    n > SAMPLE ? h("li", h("small", `and ${plural(n - SAMPLE, "other")}`)) : null);
    guidanceField.hidden = action !== "interrupt" || !n;
    guidance.required = !guidanceField.hidden;
    guidance.value = "";
    confirm.textContent = a.label.replace("…", "");
    confirm.className = a.danger ? "danger" : "";
    confirm.disabled = !n;
    node.returnValue = "";
    return new Promise((resolve) => {
      node.addEventListener("close", () => resolve(node.returnValue === "confirm"
        ? { guidance: guidance.value.trim() } : null), { once: true });
      node.showModal();
      (guidanceField.hidden ? node.querySelector("[value=cancel]") : guidance).focus();
    });
  }

  return { node, ask };
}
