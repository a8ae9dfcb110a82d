// Approve all / Deny all on Needs you: one decision for every call waiting for
// approval that matches the page's filters, through POST /api/tool-calls/bulk.
// As the fleet controls do (bulk_bar.js), a decision is previewed first
// (dry_run): a dialog says how many calls match, of which tools, and names
// some of them before anything is queued; a deny may carry a reason for the
// models.  Questions and external results are never decided in bulk: each
// needs its own answer.
import { post } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { agentLabel } from "../core/format.js";
import { toast } from "../core/toast.js";

const MAX_DECISIONS = 500;  // api/routes/decisions.py
const SAMPLE = 8;

const plural = (n, one, many = one + "s") => `${n.toLocaleString()} ${n === 1 ? one : many}`;

// filter() -> {tool?}: the page's filters; done(): after a decision is queued.
export function decideAll({ filter, done }) {
  const approve = h("button", { type: "button", dataset: { testid: "approve-all" },
    onclick: () => start("approve") }, "Approve all…");
  const deny = h("button.danger", { type: "button", dataset: { testid: "deny-all" },
    onclick: () => start("deny") }, "Deny all…");
  const dialog = makeDialog();
  const root = h("div.decide-all", { role: "group", "aria-label": "Decide every approval shown" },
    approve, deny, dialog.node);

  // approvals: how many calls waiting for approval the filters show
  function refresh(approvals) {
    root.hidden = !approvals;
    approve.textContent = `Approve all ${plural(approvals, "call")}…`;
    deny.textContent = `Deny all ${plural(approvals, "call")}…`;
  }

  async function start(decision) {
    let preview;
    try {
      preview = await post("/api/tool-calls/bulk", { filter: filter(), decision, dry_run: true });
    } catch (err) {
      return toast("Could not preview: " + err.message, true);
    }
    const answer = await dialog.ask(decision, preview);
    if (!answer) return;
    const body = { filter: filter(), decision, ...(decision === "deny" && answer.reason ? { reason: answer.reason } : {}) };
    try {
      const made = await post("/api/tool-calls/bulk", body);
      const rest = made.remaining ? ` (${plural(made.remaining, "more call")} left: run it again)` : "";
      toast(`${decision === "approve" ? "Approved" : "Denied"}: queued for ${plural(made.actions.length, "call")}${rest}`);
      done();
    } catch (err) {
      toast(`Could not ${decision}: ${err.message}`, true);
    }
  }

  return { root, refresh };
}

function makeDialog() {
  const title = h("h2", { id: "decide-dialog-title", dataset: { testid: "decide-dialog-title" } });
  const counts = h("p", { dataset: { testid: "decide-preview" } });
  const explain = h("p.hint");
  const sample = h("ul.plain.bulk-sample", { "aria-label": "Some of the matching calls" });
  const reason = h("input", { id: "decide-reason", maxlength: 4000, placeholder: "told to each model",
    dataset: { testid: "decide-reason" } });
  const reasonField = h("div", h("label", { for: "decide-reason" }, "Reason (optional)"), reason);
  const confirm = h("button", { value: "confirm", dataset: { testid: "decide-confirm" } });
  const node = h("dialog.bulk-dialog", { "aria-labelledby": "decide-dialog-title",
    dataset: { testid: "decide-dialog" } },
  h("form", { method: "dialog" }, title, counts, explain, sample, reasonField,
    h("div.controls",
      h("button", { value: "cancel", formnovalidate: true, dataset: { testid: "decide-cancel" } }, "Cancel"),
      confirm)));

  function ask(decision, preview) {
    const n = Math.min(preview.matched, MAX_DECISIONS);
    const verb = decision === "approve" ? "Approve" : "Deny";
    title.textContent = n ? `${verb} ${plural(n, "call")}?` : "Nothing waits for approval";
    counts.textContent = n ? Object.entries(preview.tools).map(([tool, k]) => `${tool}: ${k}`).join(", ") +
      (preview.matched > MAX_DECISIONS ? `; only the oldest ${MAX_DECISIONS} this time` : "") + "." : "";
    explain.textContent = decision === "approve"
      ? "Each call runs with the args its model asked for, when its session next steps."
      : "None of them runs; each model is told it was denied.";
    replace(sample, preview.calls.slice(0, SAMPLE).map((c) => h("li", c.tool, " ",
      h("small", `asked by ${agentLabel(c)} at step ${c.iteration + 1}`))),
    n > SAMPLE ? h("li", h("small", `and ${plural(n - SAMPLE, "other")}`)) : null);
    reasonField.hidden = decision !== "deny" || !n;
    reason.value = "";
    confirm.textContent = verb;
    confirm.className = decision === "deny" ? "danger" : "";
    confirm.disabled = !n;
    node.returnValue = "";
    return new Promise((resolve) => {
      node.addEventListener("close", () => resolve(node.returnValue === "confirm"
        ? { reason: reason.value.trim() } : null), { once: true });
      node.showModal();
      node.querySelector("[value=cancel]").focus();
    });
  }

  return { node, ask };
}
