// How things are said on the page: times, ids, statuses, errors, money.
import { h } from "./dom.js";

// ---- time: relative, with the absolute date on hover --------------------------

// "5 minutes ago" for a time past, "in 23 hours" for one to come (a question's
// deadline): the same units both ways, counted down (23 h 59 min is "23 hours").
export function relative(iso, now = Date.now()) {
  if (!iso) return "";
  const s = Math.round((now - new Date(iso).getTime()) / 1000);
  const n = Math.abs(s);
  if (n < 5) return "just now";
  const span = n < 60 ? [n, "second"] : n < 3600 ? [Math.floor(n / 60), "minute"]
    : n < 86400 ? [Math.floor(n / 3600), "hour"] : n < 7 * 86400 ? [Math.floor(n / 86400), "day"] : null;
  if (!span) return absolute(iso);
  const [count, unit] = span;
  const words = `${count} ${unit}${count === 1 ? "" : "s"}`;
  return s > 0 ? words + " ago" : "in " + words;
}

export const absolute = (iso) => (iso ? new Date(iso).toLocaleString() : "");

// A <time> element that keeps saying how long ago, or how long until (refreshed every 20 s).
export function when(iso) {
  if (!iso) return h("span", "—");
  return h("time", { datetime: iso, title: absolute(iso), dataset: { rel: "1" } }, relative(iso));
}

setInterval(() => {
  document.querySelectorAll("time[data-rel]").forEach((t) => (t.textContent = relative(t.dateTime)));
}, 20000);

// ---- ids: ULIDs made in the same millisecond differ only in their last letters,
// so a short id alone is not enough to tell agents apart; a two-word tag drawn
// from a hash of the whole id is.

const ADJECTIVES = ["amber", "brisk", "calm", "dusty", "eager", "fuzzy", "gentle", "hazel", "icy", "jolly",
  "keen", "lucky", "mellow", "nimble", "olive", "proud", "quiet", "rusty", "sunny", "tidy", "urban", "vivid",
  "witty", "young", "zesty", "bold", "crisp", "dreamy", "fancy", "grand", "happy", "ivory"];
const ANIMALS = ["otter", "fox", "heron", "lynx", "panda", "koala", "moose", "newt", "owl", "puffin", "quail",
  "raven", "seal", "tapir", "urchin", "viper", "walrus", "yak", "zebra", "bison", "camel", "dingo", "eagle",
  "ferret", "gecko", "hippo", "ibis", "jackal", "lemur", "marmot", "ocelot", "pelican"];

export function tag(id) {
  let hash = 2166136261;
  for (let i = 0; i < id.length; i++) hash = Math.imul(hash ^ id.charCodeAt(i), 16777619) >>> 0;
  return ADJECTIVES[hash % 32] + "-" + ANIMALS[(hash >>> 5) % 32];
}

export const short = (id) => (id ? id.slice(-8) : "");

// An agent as people see it: its name, or its tag; the id on hover.
export function agentLabel(agent) {
  return agent.name || tag(agent.agent_id);
}

// ---- steps are counted from 1 everywhere on the page (iteration 0 is step 1),
// matching "fails at step 3" in the monikers' own messages.
export const stepNumber = (iteration) => iteration + 1;

// ---- statuses and reasons in plain words --------------------------------------

const REASONS = {
  user: "by you", budget: "budget reached", done: "the moniker said it is done", max_steps: "step limit reached",
  max_runtime: "time limit reached", repetition: "it kept saying the same thing", destroyed: "destroyed",
  pause_expired: "paused too long", stuck: "a step hung past its timeout", runner: "the runner failed",
  resumed_after_error: "retrying after an error", "step_failed:error": "a step failed",
  "step_failed:timeout": "a step timed out", "step_failed:transient": "a step kept failing after retries",
  "step_failed:invalid_output": "the moniker returned something that is not a frame",
  step_failed: "a step failed",
};

export const STATUS_WORDS = {
  pending: "starting", running: "running", paused: "paused", stopping: "stopping", stopped: "stopped",
  done: "finished", error: "failed", waiting: "waiting",
};

export const statusWord = (status) => STATUS_WORDS[status] || status || "unknown";
// A waiting session's reason says what it waits for ("user" there is not "by you");
// a running one's "user" is the resume that set it going (runtime/session/agent.py
// status_after_resume): "running by you" said nothing true.
const WAITING_REASONS = { user: "for your answer", approval: "for an approval", tool_result: "for a tool's result" };
const RUNNING_REASONS = { user: "resumed by you" };

export const reasonWords = (reason, status) => (!reason ? ""
  : (status === "waiting" && WAITING_REASONS[reason]) || (status === "running" && RUNNING_REASONS[reason])
    || REASONS[reason] || reason.replace(/[_:]/g, " "));

export function badge(status) {
  return h("span.badge." + (status || "unknown"), statusWord(status));
}

// ---- errors: one plain sentence first, the details folded -----------------------

export function splitError(text) {
  if (!text) return { sentence: "", details: "" };
  let rest = String(text).replace(/^(StepError|RuntimeError|Exception): /, "");
  const newline = rest.indexOf("\n");
  if (newline > 0) return { sentence: rest.slice(0, newline), details: rest.slice(newline + 1) };
  if (rest.length > 200) return { sentence: rest.slice(0, 160).replace(/\s+\S*$/, "") + "…", details: rest };
  return { sentence: rest, details: "" };
}

export function errorBlock(text, cls = "error-text") {
  const { sentence, details } = splitError(text);
  if (!sentence) return null;
  return h("div." + cls, h("span.error-sentence", sentence),
    details ? h("details.error-details", h("summary", "details"), h("pre", details)) : null);
}

// ---- numbers ---------------------------------------------------------------------

export const tokens = (n) => (n == null ? "—" : Number(n).toLocaleString());
// dollars: cents from $1 up, three significant digits below ($0.0036)
export const money = (x) => (x == null ? "—" : "$" + (x >= 1 ? Number(x).toFixed(2) : String(Number(Number(x).toPrecision(3)))));

// The HTTP attempts a step's (or a session's) model calls took, and those that
// failed with the tokens they spent (already counted in the usage's tokens).
// Rows from before attempts were counted have none: 0.
export function attemptCounts(usage) {
  const u = usage || {};
  return { attempts: u.attempts || 0, failed: u.failed_attempts || 0, failedTokens: u.failed_tokens || 0 };
}

// ---- durations: "850 ms", "2.5 s", "3 min 4 s", "1 h 2 min" ---------------------
export function duration(ms) {
  if (ms == null || !Number.isFinite(Number(ms))) return "—";
  const n = Math.max(0, Number(ms));
  if (n < 1000) return `${Math.round(n)} ms`;
  if (n < 60_000) return `${(n / 1000).toFixed(n < 10_000 ? 1 : 0)} s`;
  const s = Math.round(n / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ""}`;
  const m = Math.round(s / 60);
  return `${Math.floor(m / 60)} h${m % 60 ? ` ${m % 60} min` : ""}`;
}
