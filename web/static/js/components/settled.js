// What to tell a person whose answer, approval or result came too late: the
// call was settled meanwhile (in another tab, by someone else, by its
// timeout).  The API's 409 is written for programs ("question 01M8… is
// success: it was answered already or timed out"); here the call is read
// again (GET /api/tool-calls/<id>) and what happened to it is said in plain
// words, with the answer it got.  Used by the Needs-you page and the session
// timeline (components/tool_calls.js).
import { get } from "../core/api.js";

const ENDED = {
  success: "it has run already", failed: "it has failed meanwhile", denied: "it was denied already",
  running: "it was approved already and is running", pending: "it was approved already",
  unknown: "its outcome is unknown", replayed: "a replay served its recorded result",
};

// A sentence for ``err`` (an ApiError of a POST about tool call ``callId``).
export async function refusedWords(err, callId) {
  if (err.status !== 409) return err.message;
  let call;
  try {
    call = await get(`/api/tool-calls/${encodeURIComponent(callId)}`);
  } catch (readErr) {
    return "This was settled already (in another tab, or by someone else).";
  }
  const result = call.result || {};
  if (call.name === "ask_user") {
    if (call.status === "success" && result.timed_out) {
      return `Too late: this question timed out and took its default answer “${result.answer}”.`;
    }
    if (call.status === "success") {
      return `This question was answered already${result.answer != null ? ` (“${result.answer}”)` : ""}, `
        + "in another tab or by someone else.";
    }
    if (call.status === "failed") return "Too late: this question timed out unanswered.";
    if (call.status === "waiting_result") return "An answer to this question is on its way already.";
  }
  if (call.status === "waiting_approval" || call.status === "waiting_result") {
    return "Another decision about this call is on its way already.";
  }
  return `Nothing to do: ${call.name} ${ENDED[call.status] || "was settled already"} (in another tab, or by `
    + "someone else).";
}
