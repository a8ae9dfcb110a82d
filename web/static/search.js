// The record in the dashboard (issue 13): a search box on every page, the
// results page (#/search?q=…), summaries on the session page, "fork from
// here" on each step, and scrolling to the step or message a result links to.
// Uses the helpers of dashboard.js (api, el, $, short, clock, toast).
"use strict";

const record = { lastSession: null };

function hashParams() {
  const [path, query] = (location.hash || "#/").split("?");
  return { parts: path.split("/"), params: new URLSearchParams(query || "") };
}

// ---- the search box, on every page ------------------------------------------

function installSearchBox() {
  const form = el("form", "search-box");
  form.setAttribute("role", "search");
  form.setAttribute("data-testid", "search-form");
  const input = Object.assign(el("input"), { name: "q", type: "search", placeholder: "Search everything agents did…",
                                             required: true, maxLength: 1000 });
  input.setAttribute("data-testid", "search-input");
  form.append(input);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    location.hash = "#/search?q=" + encodeURIComponent(input.value.trim());
  });
  document.querySelector(".topbar nav").after(form);
}

function searchView() {
  let view = $("view-search");
  if (view) return view;
  view = el("section", "view");
  view.id = "view-search";
  view.hidden = true;
  const panel = el("div", "panel");
  panel.append(el("h2", null, "Search"), Object.assign(el("p", "hint"), { id: "search-meta" }));
  const list = el("ol", "search-results");
  list.id = "search-results";
  list.setAttribute("data-testid", "search-results");
  panel.append(list, Object.assign(el("p", "empty", "Nothing found."), { id: "search-empty", hidden: true }));
  view.append(panel);
  document.querySelector("main").append(view);
  return view;
}

async function showSearch(params) {
  const view = searchView();
  document.querySelectorAll(".view").forEach((v) => (v.hidden = v !== view));
  const q = params.get("q") || "";
  document.querySelector(".search-box input").value = q;
  const list = $("search-results");
  list.replaceChildren();
  if (!q) return;
  const query = new URLSearchParams(params);
  let result;
  try {
    result = await api("GET", "/api/search?" + query.toString());
  } catch (err) {
    $("search-meta").textContent = "Search failed: " + err.message;
    return;
  }
  $("search-meta").textContent = `${result.hits.length} result(s) for “${q}” · ` +
    (result.mode === "hybrid" ? "full text + semantic" : "full text" + (result.semantic ? ` (semantic: ${result.semantic})` : ""));
  result.hits.forEach((hit) => list.append(renderHit(hit)));
  $("search-empty").hidden = result.hits.length > 0;
}

function renderHit(hit) {
  const li = el("li", "hit " + hit.kind);
  li.setAttribute("data-testid", "search-hit");
  const link = Object.assign(el("a", "hit-link"), { href: hit.link });
  link.append(el("span", "badge kind", hit.kind.replace("_", " ")));
  const where = [hit.session_id ? "session " + short(hit.session_id) : null,
                 hit.iteration != null ? "step " + hit.iteration : null,
                 hit.conversation_id ? "conversation " + short(hit.conversation_id) : null,
                 hit.name ? "tool " + hit.name : null, clock(hit.created_at)].filter(Boolean).join(" · ");
  link.append(el("span", "hit-where", " " + where));
  li.append(link, highlighted(hit.snippet, hit.highlights));
  return li;
}

function highlighted(text, spans) {
  // Text nodes and <mark>s only: nothing the record holds is parsed as HTML.
  const p = el("p", "snippet");
  let at = 0;
  (spans || []).forEach(([start, end]) => {
    if (start < at) return;
    p.append(document.createTextNode(text.slice(at, start)), el("mark", null, text.slice(start, end)));
    at = end;
  });
  p.append(document.createTextNode(text.slice(at)));
  return p;
}

// ---- the session page: summary, forked-from, fork from here ------------------

function sessionExtras() {
  let box = $("record-extras");
  if (box) return box;
  box = el("div", "panel record-extras");
  box.id = "record-extras";
  box.setAttribute("data-testid", "session-record");
  const steps = $("steps").closest(".panel");
  steps.before(box);
  return box;
}

async function showSessionRecord(sessionId, params, tries = 20) {
  const box = sessionExtras();
  if (record.lastSession !== sessionId) box.replaceChildren();
  record.lastSession = sessionId;
  const [snapshot, summaries] = await Promise.all([
    api("GET", "/api/sessions/" + sessionId).catch(() => null),
    api("GET", "/api/summaries?session_id=" + sessionId).catch(() => ({ summaries: [] }))]);
  if (record.lastSession !== sessionId) return;
  if (snapshot && snapshot.status === "pending" && tries > 0) {  // its create (or fork) is still queued
    setTimeout(() => showSessionRecord(sessionId, params, tries - 1).catch(() => {}), 500);
    return;
  }
  box.replaceChildren(el("h2", null, "Record"));
  if (snapshot && snapshot.forked_from) {
    const from = snapshot.forked_from;
    const p = el("p", "forked-from", "Forked from ");
    p.append(Object.assign(el("a", null, "session " + short(from.session_id) + " at step " + from.iteration),
                           { href: `#/session/${from.session_id}?iteration=${from.iteration}` }),
             document.createTextNode(`: its steps 0–${from.iteration} are read there; this session's own steps start at ${from.iteration + 1}.`));
    box.append(p);
  }
  const summary = summaries.summaries[0];
  if (summary) {
    const s = el("div", "summary");
    s.setAttribute("data-testid", "session-summary");
    s.append(el("h3", null, `Summary (${summary.method === "llm" ? "written by the session's model" : "extractive"})`),
             el("pre", "summary-text", summary.text));
    box.append(s);
  } else {
    box.append(el("p", "empty", "No summary yet: one is written when the session finishes."));
  }
  box.hidden = false;
  const iteration = params.get("iteration");
  if (iteration !== null) scrollToStep(iteration);
}

function scrollToStep(iteration, tries = 40) {
  const li = document.querySelector(`#steps li[data-iteration="${CSS.escape(iteration)}"]`);
  if (!li) {
    if (tries > 0) setTimeout(() => scrollToStep(iteration, tries - 1), 150);
    return;
  }
  li.classList.add("linked");
  li.scrollIntoView({ block: "center" });
}

function addForkButton(li) {
  if (li.querySelector(".fork-here") || !li.dataset.iteration) return;
  const button = el("button", "fork-here", "Fork from here");
  button.setAttribute("data-testid", "fork-here");
  button.title = "Start a new session of this agent that continues from this step";
  button.addEventListener("click", async (e) => {
    e.stopPropagation();
    const guidance = window.prompt("Guidance for the fork's first step (optional):", "");
    if (guidance === null) return;
    const body = { from_iteration: Number(li.dataset.iteration) };
    if (guidance.trim()) body.guidance = guidance.trim();
    try {
      const made = await api("POST", `/api/sessions/${record.lastSession}/fork`, body);
      toast("Fork accepted: session " + short(made.session_id));
      location.hash = "#/session/" + made.session_id;
    } catch (err) {
      toast("Could not fork: " + err.message, true);
    }
  });
  li.querySelector(".step-head").append(button);
}

new MutationObserver((changes) => {
  changes.forEach((c) => c.addedNodes.forEach((n) => n.nodeType === 1 && n.matches("li") && addForkButton(n)));
}).observe($("steps"), { childList: true });

// ---- a conversation: scroll to the linked message -----------------------------

function scrollToMessage(messageId, tries = 40) {
  const li = [...document.querySelectorAll("#messages li")].find((n) => (n.dataset.key || "").endsWith(" " + messageId));
  if (!li) {
    if (tries > 0) setTimeout(() => scrollToMessage(messageId, tries - 1), 150);
    return;
  }
  li.classList.add("linked");
  li.scrollIntoView({ block: "center" });
}

// ---- routing: runs after dashboard.js's own route() -----------------------------

function routeRecord() {
  const { parts, params } = hashParams();
  const [, name, id] = parts;
  if (name === "search") {
    showSearch(params);
    return;
  }
  const box = $("record-extras");
  if (name === "session" && id) {
    showSessionRecord(id, params).catch((err) => toast("Could not load the record: " + err.message, true));
  } else if (box) {
    box.hidden = true;
  }
  if (name === "conversation" && params.get("message")) scrollToMessage(params.get("message"));
}

installSearchBox();
window.addEventListener("hashchange", routeRecord);
routeRecord();
