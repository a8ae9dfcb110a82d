// The agentsvc dashboard: plain ES modules, no build step, every file served by
// the app (nothing from another host).
//
// How it is put together (one file per page or component):
//   core/      dom helpers, the HTTP client, formatting, live events, the registry
//   pages/     one module per page; each calls registerPage({...}) when imported
//   components/ pieces used by pages (the create form, the timeline, JSON views)
//
// To add a page or a component, write its module and import it below: ONE line.
//   - a page:      registerPage({name, match, nav?, mount, enter, rooms, catchUp, on})
//                  (see core/registry.js); e.g. import "./pages/search.js";
//   - a step part: registerStepPart((step, {session}) => Node | null), drawn inside
//                  every step of a session's timeline; e.g. import "./components/fork.js";
//                  A step part lives in web/static/js/components/ and imports
//                  registerStepPart from "../core/registry.js"; it may also use
//                  registerLiveEvent(name, fn) and registerSessionHook(fn) (tool_calls.js does).
// A page is shown in its own <section>; the router below picks the page whose
// match() accepts the location's hash, or else the agents page (the fallback).
// A hash may end in a query ("#/session/ID?iteration=3", "#/search?q=words"): it
// is not part of the path that match() sees, and reaches the page as params.query
// (a URLSearchParams), so a link can point into a page.
// Components register in import order: step parts are drawn, and session hooks
// and live handlers run, in the order below.
import "./pages/agents.js";
import "./pages/session.js";
import "./pages/conversations.js";
import "./pages/conversation.js";
import "./pages/search.js";
import "./pages/needs_you.js";
import "./pages/diff.js";
import "./pages/trace.js";
import "./pages/evals.js";
import "./components/turns.js";
import "./components/needs_you_count.js";
import "./components/tool_calls.js";
import "./components/fork.js";
import "./components/replay.js";
import "./components/search_box.js";
import "./components/session_tree.js";
import "./components/observers.js";
import "./components/model_seen.js";

import { $, h } from "./core/dom.js";
import { connect, follow } from "./core/live.js";
import { navLinks, pages } from "./core/registry.js";
import { showWho } from "./components/who.js";

const sections = new Map();  // page name -> its <section>

function route() {
  const [path, search] = splitHash(location.hash);
  const parts = path.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  let page = null;
  let params = null;
  for (const candidate of pages) {
    params = candidate.match(parts);
    if (params) {
      page = candidate;
      break;
    }
  }
  if (!page) {
    page = pages.find((p) => p.fallback);
    params = {};
  }
  params = { ...params, query: new URLSearchParams(search) };
  for (const [name, section] of sections) section.hidden = name !== page.name;
  let section = sections.get(page.name);
  if (!section) {
    section = h("section.view", { id: "view-" + page.name });
    $("main").appendChild(section);
    sections.set(page.name, section);
    page.mount(section, params);
  }
  document.querySelectorAll("nav a[data-page]").forEach((a) => {
    if (a.dataset.page === page.name) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  });
  page.enter(params);
  follow({ rooms: () => page.rooms(params), catchUp: () => page.catchUp(params), on: page.on || {} });
}

// "#/search?q=a?b" -> ["#/search", "q=a?b"]: only the first "?" starts the query.
function splitHash(hash) {
  const at = (hash || "#/").indexOf("?");
  return at < 0 ? [hash || "#/", ""] : [hash.slice(0, at), hash.slice(at + 1)];
}

function buildNav() {
  const nav = $("nav.pages");
  for (const link of navLinks) {
    nav.insertBefore(h("a", { href: link.href, dataset: { page: link.name, testid: "nav-" + link.name } },
      link.label), nav.querySelector("[data-static]"));
  }
}

// "Skip to content" moves focus to <main> and leaves the address alone ("#main" is no route).
$("a.skip").addEventListener("click", (e) => {
  e.preventDefault();
  $("#main").focus();
});

buildNav();
showWho();
connect();
window.addEventListener("hashchange", route);
route();
