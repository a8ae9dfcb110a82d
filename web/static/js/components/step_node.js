// How one step, and one control action, of a session's timeline look.  Both
// are drawn once per key (a step's iteration, an action's id) by timeline.js;
// a step never changes once recorded, an action is drawn again when its outcome comes.
import { h } from "../core/dom.js";
import { attemptCounts, errorBlock, money, stepNumber, tokens, when } from "../core/format.js";
import { stepParts } from "../core/registry.js";
import { jsonView } from "./json_view.js";

export function stepNode(step, key, session) {
  const usage = step.usage;
  return h("li.step." + step.status, { dataset: { key, iteration: step.iteration, stepId: step.id, testid: "step" } },
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
}

// " · 2 failed attempts (1,200 tokens)", when the step's model calls had any.
function failedWords(usage) {
  const { failed, failedTokens } = attemptCounts(usage);
  return failed ? ` · ${failed} failed attempt${failed > 1 ? "s" : ""} (${tokens(failedTokens)} tokens)` : "";
}

export function actionNode(a, key) {
  const what = {
    pause: "Pause", resume: "Resume", destroy: "Destroy", interrupt: "Guidance", create: "Start",
    tool_approve: "Approve a tool call", tool_deny: "Deny a tool call", tool_result: "A tool's result posted",
    answer: "An answer", child_result: "A sub-agent's result", child_message: "A sub-agent's message",
  }[a.type] || a.type.replace(/_/g, " ");
  const payload = a.payload || {};
  const extra = a.type === "interrupt" ? `: “${payload.guidance || ""}”`
    : a.type === "resume" && (payload.budget_tokens || payload.budget_cost)
      ? ` with the budget raised to ${[payload.budget_tokens && tokens(payload.budget_tokens) + " tokens",
        payload.budget_cost && money(payload.budget_cost)].filter(Boolean).join(" and ")}` : "";
  const outcome = a.status === "done" ? "applied" : a.status === "failed" ? "failed" : "waiting to apply";
  return h("li.action." + a.status, { id: "action-" + a.id, dataset: { key, testid: "action" } },
    h("div.step-head", h("strong", what + extra), " · ", outcome, " · ", when(a.created_at),
      a.actor ? h("span.actor", { dataset: { testid: "action-actor" } }, " · by " + a.actor) : null),
    a.status === "failed" && a.error ? errorBlock(a.error, "step-error") : null);
}
