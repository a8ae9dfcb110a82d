// The session page's "Sub-agents" panel: the tree the session belongs to
// (sessions started with the spawn_agent tool), from its root down, with
// each session's status, name, moniker and latest result, the open session
// marked, and links both ways (up to the parent, down to each child).  Hidden
// for a session with no parent and no children.
//
// Data: GET /api/sessions/<id>/children (the session's parent and tree root),
// then, when there is a tree, GET /api/sessions/<root>/children?descendants=true
// (the whole tree) and the root's snapshot (the page's own when it is the root).
// It is read on every catch-up of the session (first load, reconnects) and
// then from live events, never on a timer: the page also follows the rooms of
// the tree's unfinished sessions and of children spawned but not read yet
// (core/live.js followAlso), and a change of
// status in the tree, a new child (an agent_state whose parent is in the tree)
// or a spawn_agent call of a session in it (the first child of a session
// whose panel is still hidden) reads the tree again, debounced with a maximum
// wait (core/debounce.js) so a burst of events makes one read.
//
// After each read it tells the page how many unfinished sessions are below
// the open one (a "subagents-below" event on document, {sessionId, open}), so
// the page's controls can offer to act on them too.
//
// Plugged in with one import in main.js, through registerSessionHook.
import { get } from "../core/api.js";
import { debouncer } from "../core/debounce.js";
import { $, h, replace } from "../core/dom.js";
import { agentLabel, badge, short } from "../core/format.js";
import { followAlso } from "../core/live.js";
import { registerLiveEvent, registerSessionHook } from "../core/registry.js";

const FINISHED = ["stopped", "done", "error"];
let sessionId = null;
let generation = 0;
const shown = new Map();  // session id -> its status as the panel shows it (the open session included)
// Children spawned in the tree that no read has shown yet.  A spawn_agent call
// ends when its child's create is queued, and the create may land after the
// read its events start; the child's own events go only to its room, so the
// page follows that room (the child's session id is the call's id) until a
// read shows the child.
const spawned = new Set();
const later = debouncer(() => shownPage() && refresh(sessionId, generation), { delay: 300, maxWait: 2000 });

const shownPage = () => sessionId !== null && !$("#view-session")?.hidden;

function panel() {
  let root = $("[data-testid=session-tree]");
  if (root) return root;
  const anchor = $("#view-session [data-testid=session-record]");
  if (!anchor) return null;
  root = h("div.panel.session-tree", { dataset: { testid: "session-tree" }, "aria-labelledby": "tree-title", hidden: true },
    h("h2", { id: "tree-title" }, "Sub-agents ", h("small", "the tree this session belongs to")),
    h("p.tree-parent", { dataset: { testid: "tree-parent" } }),
    h("ul.tree", { dataset: { testid: "tree" } }));
  anchor.before(root);
  return root;
}

function label(row) {
  return row.name || agentLabel(row);
}

function node(row, rows, open) {
  const here = row.session_id === open;
  const link = here
    ? h("strong", { "aria-current": "page" }, label(row), " (this session)")
    : h("a", { href: "#/session/" + row.session_id, dataset: { testid: "tree-link" } }, label(row));
  const kids = rows.filter((r) => r.parent_session_id === row.session_id);
  return h("li", { dataset: { testid: "tree-node", session: row.session_id, status: row.status } },
    badge(row.status), " ", link, " ", h("small", `${row.moniker || ""} · ${short(row.session_id)}`),
    row.result_text ? h("p.tree-result", row.result_text) : null,
    row.status === "error" && row.last_error ? h("p.tree-result.error-text", row.last_error.split("\n")[0]) : null,
    kids.length ? h("ul", ...kids.map((k) => node(k, rows, open))) : null);
}

async function refresh(id, mine, snapshot = null) {
  const root = panel();
  if (!root) return;
  let here, tree, top;
  try {
    here = await get(`/api/sessions/${encodeURIComponent(id)}/children`);
    if (here.parent || here.children.length) {  // else no tree: nothing more to read
      const rootId = here.root_session_id || id;
      tree = await get(`/api/sessions/${encodeURIComponent(rootId)}/children`, { descendants: true });
      top = rootId === id && snapshot ? snapshot : await get("/api/sessions/" + encodeURIComponent(rootId));
    }
  } catch (err) {
    return;  // the next catch-up or event tries again
  }
  if (mine !== generation) return;
  if (!tree) {
    below(id, 0);
    root.hidden = true;
    const status = snapshot ? snapshot.status : shown.get(id) ?? null;  // a read from an event keeps the event's
    shown.clear();
    shown.set(id, status);
    if (spawned.size) await follow([], mine);  // its first child, not readable yet
    return;
  }
  const rows = [{ ...top, depth: 0, result_text: top.result && top.result.text }, ...tree.children];
  root.hidden = false;
  const parentRow = here.parent && rows.find((r) => r.session_id === here.parent.session_id);
  replace(root.querySelector("[data-testid=tree-parent]"), here.parent
    ? ["Parent: ", h("a", { href: "#/session/" + here.parent.session_id, title: here.parent.session_id,
      dataset: { testid: "tree-parent-link" } },
    parentRow ? label(parentRow) : "session " + short(here.parent.session_id))]
    : `${here.children.length} sub-agent${here.children.length > 1 ? "s" : ""}`);
  replace(root.querySelector("[data-testid=tree]"), node(rows[0], rows, id));
  below(id, descendants(id, rows).filter((r) => !FINISHED.includes(r.status)).length);
  shown.clear();
  rows.forEach((r) => shown.set(r.session_id, r.status));
  rows.forEach((r) => spawned.delete(r.session_id));
  await follow(rows.filter((r) => r.session_id !== id && !FINISHED.includes(r.status)).map((r) => r.session_id), mine);
}

// Follow the rooms of the tree's unfinished sessions and of its children not
// read yet.  A room joined only now may have had events before the join: read once more.
async function follow(unfinished, mine) {
  const watched = [...unfinished, ...spawned].map((s) => "session:" + s);
  if (await followAlso("session-tree", watched) && mine === generation) later();
}

function descendants(id, rows) {
  const kids = rows.filter((r) => r.parent_session_id === id);
  return kids.concat(...kids.map((k) => descendants(k.session_id, rows)));
}

function below(id, open) {
  document.dispatchEvent(new CustomEvent("subagents-below", { detail: { sessionId: id, open } }));
}

// What may change the tree: a status in it, a new child, a spawn in it.
registerLiveEvent("agent_state", (s) => {
  if (!s || !shownPage()) return;
  const known = shown.has(s.session_id);
  if (known && shown.get(s.session_id) !== s.status) {
    shown.set(s.session_id, s.status);  // once per change, also when the read shows nothing new
    later();
  } else if (!known && shown.has(s.parent_session_id)) later();
});
registerLiveEvent("tool_call", (call) => {
  if (!call || call.name !== "spawn_agent" || !shown.has(call.session_id) || !shownPage()) return;
  if (["failed", "denied"].includes(call.status)) spawned.delete(call.id);  // no child comes
  else if (!shown.has(call.id)) spawned.add(call.id);
  later();
});

registerSessionHook((id, snapshot) => {
  if (id !== sessionId) {
    sessionId = id;
    shown.clear();
    spawned.clear();
    const root = panel();
    if (root) root.hidden = true;
  }
  shown.set(id, snapshot ? snapshot.status : shown.get(id) ?? null);
  generation += 1;
  return refresh(id, generation, snapshot);
});
