// A call's args before it is approved: shown as JSON, and editable.  "Edit
// args" turns the block into a text box holding the same JSON; what is in the
// box when the person approves is sent as the call's new args (POST
// /api/tool-calls/<id>/approve {args}), which the service checks against the
// tool's schema (a 400 names the problem) and records beside the model's own
// (original_args).  Text that is not a JSON object is refused here, unsent.
import { h } from "../core/dom.js";

export function argsEditor(args, { tool, testid }) {
  const shown = JSON.stringify(args, null, 2);
  const view = h("pre.tool-json", { dataset: { testid } }, shown);
  const box = h("textarea.tool-json", { rows: Math.min(12, shown.split("\n").length + 1), hidden: true,
    spellcheck: "false", "aria-label": `Args of ${tool}, as JSON`, dataset: { testid: testid + "-edit" } }, shown);
  const problem = h("p.form-error", { role: "alert", dataset: { testid: testid + "-problem" } });
  const toggle = h("button", { type: "button", dataset: { testid: testid + "-toggle" }, onclick: () => {
    const editing = box.hidden;
    box.hidden = !editing;
    view.hidden = editing;
    toggle.textContent = editing ? "Keep the model's args" : "Edit args";
    if (editing) box.focus(); else { box.value = shown; problem.textContent = ""; }
  } }, "Edit args");
  return {
    root: h("div.args-editor", { style: { flexBasis: "100%" } }, view, box, problem, toggle),
    // The approval's body: {} for the model's args, {args} for edited ones, null when the text is not usable.
    approval() {
      problem.textContent = "";
      if (box.hidden || box.value === shown) return {};
      let edited;
      try {
        edited = JSON.parse(box.value);
      } catch (err) {
        problem.textContent = "These args are not JSON: " + err.message;
        return null;
      }
      if (!edited || typeof edited !== "object" || Array.isArray(edited)) {
        problem.textContent = "The args must be a JSON object, like {\"key\": \"value\"}.";
        return null;
      }
      return { args: edited };
    },
  };
}
