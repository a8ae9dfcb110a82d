// How many questions and approvals are open, beside the "Needs you" link in the
// nav, on every page, kept live from events rather than a timer: whatever the
// view, the page follows the "needs-you" room (api/live.py: every session's
// tool_call events, nothing else; core/live.js followAlways), and a tool call
// that changes anywhere reads the total again from GET /api/waiting (limit 1:
// only its total is read), at most once a second.  The socket's catch-ups (its
// connect, a gap in the events) read it too; a change of view does not need to.
// It used to poll every 15 s, as a session page got no events of other
// sessions: a new question took up to 15 s to show in the count (issue 40).
import { get } from "../core/api.js";
import { h } from "../core/dom.js";
import { followAlways } from "../core/live.js";
import { registerLiveEvent } from "../core/registry.js";

const GAP_MS = 1000;  // a burst of tool calls makes one read
let timer = null;
let reads = 0;  // only the newest read's total is shown (two reads may answer out of order)

function badgeNode() {
  const link = document.querySelector('nav a[data-page="needs_you"]');
  if (!link) return null;
  let node = link.querySelector(".nav-count");
  if (!node) {
    node = h("span.nav-count", { dataset: { testid: "needs-you-count" }, hidden: true });
    link.appendChild(node);
  }
  return node;
}

// Show ``total`` (a page that just read it passes it), or read it.
export async function refreshCount(total) {
  const mine = ++reads;
  if (total === undefined) {
    try {
      total = (await get("/api/waiting", { limit: 1 })).total;
    } catch (err) {
      return;  // unreachable for now: the next event or catch-up tries again
    }
    if (mine !== reads) return;
  }
  const node = badgeNode();
  if (!node) return;
  node.textContent = String(total);
  node.hidden = total === 0;
  node.setAttribute("aria-label", `${total} open`);
  node.title = `${total} question${total === 1 ? "" : "s"} and approvals wait for you`;
}

function soon() {
  if (timer) return;
  timer = setTimeout(() => {
    timer = null;
    refreshCount();
  }, GAP_MS);
}

followAlways(["needs-you"], () => refreshCount());
registerLiveEvent("tool_call", soon);
