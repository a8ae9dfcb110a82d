// The session page's "Sub-agents" panel: the tree the session belongs to
// (sessions started with the spawn_agent tool), from its root down, with
// each session's status, name, moniker and latest result, the open session
// marked, and links both ways (up to the parent, down to each child).  Hidden
// for a session with no parent and no children.
//
// Data: GET /api/sessions/<id>/children (the session's parent and tree root),
// then GET /api/sessions/<root>/children?descendants=true (the whole tree).
// It is read on every catch-up of the session (first load, reconnects) and,
// while any session of the tree is unfinished and the page is shown, again
// every few seconds, so children's statuses stay current without subscribing
// to each child's room.  The poll runs while the panel is still hidden too:
// a running session may spawn its first child at any step (often while it
// then waits on that child, so no step event of its own would wake us), and
// the panel must appear without a reload.
//
// Plugged in with one import in main.js, through registerSessionHook.
import { get } from "../core/api.js";
import { $, h, replace } from "../core/dom.js";
import { agentLabel, badge, short } from "../core/format.js";
import { registerSessionHook } from "../core/registry.js";

const FINISHED = ["stopped", "done", "error"];
const REFRESH_MS = 2500;
let sessionId = null;
let timer = null;
let generation = 0;

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

async function refresh(id, mine) {
  const root = panel();
  if (!root) return;
  let here, tree, top;
  try {
    here = await get(`/api/sessions/${encodeURIComponent(id)}/children`);
    const rootId = here.root_session_id || id;
    tree = await get(`/api/sessions/${encodeURIComponent(rootId)}/children`, { descendants: true });
    top = await get("/api/sessions/" + encodeURIComponent(rootId));
  } catch (err) {
    return;  // the next catch-up tries again
  }
  if (mine !== generation) return;
  const rows = [{ ...top, depth: 0, result_text: top.result && top.result.text }, ...tree.children];
  root.hidden = !here.parent && here.children.length === 0;
  replace(root.querySelector("[data-testid=tree-parent]"), here.parent
    ? ["Parent: ", h("a", { href: "#/session/" + here.parent.session_id, dataset: { testid: "tree-parent-link" } },
      "session " + short(here.parent.session_id))]
    : here.children.length ? `${here.children.length} sub-agent${here.children.length > 1 ? "s" : ""}` : "");
  replace(root.querySelector("[data-testid=tree]"), node(rows[0], rows, id));
  clearTimeout(timer);
  if (rows.some((r) => !FINISHED.includes(r.status))) {
    timer = setTimeout(() => {
      if (mine === generation && sessionId === id && !$("#view-session")?.hidden) refresh(id, mine);
    }, REFRESH_MS);
  }
}

registerSessionHook((id) => {
  if (id !== sessionId) {
    sessionId = id;
    const root = panel();
    if (root) root.hidden = true;
  }
  generation += 1;
  clearTimeout(timer);
  return refresh(id, generation);
});
