// How many questions and approvals are open, beside the "Needs you" link in the
// nav, on every page.  Refreshed from GET /api/waiting (limit 1: only its total
// is read) when a tool_call event arrives (throttled), when the page changes,
// and every 15 s (pages that follow only one session get no events of others).
import { get } from "../core/api.js";
import { h } from "../core/dom.js";
import { registerLiveEvent } from "../core/registry.js";

const EVERY_MS = 15000;
let timer = null;

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
  if (total === undefined) {
    try {
      total = (await get("/api/waiting", { limit: 1 })).total;
    } catch (err) {
      return;  // unreachable for now: the next refresh tries again
    }
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
  }, 500);
}

registerLiveEvent("tool_call", soon);
window.addEventListener("hashchange", soon);
setInterval(() => refreshCount(), EVERY_MS);
setTimeout(() => refreshCount(), 0);  // once the nav is built
