// Where pages and components plug in.  A page module calls registerPage() once
// when imported; a component that adds to each step (tool calls, ...) calls
// registerStepPart().  main.js imports the modules; nothing else is needed.

export const pages = [];
export const stepParts = [];
export const navLinks = [];

// page = {
//   name,                         unique, e.g. "agents"
//   match(parts) -> params|null   parts of the hash: "#/session/ID" -> ["session", "ID"]; the
//                                 router adds params.query, the hash's "?…" part (URLSearchParams)
//   fallback: true?               shown when no page matches (the agents page)
//   nav: {label, href, order?}?   adds a link to the top bar (lower order first; agents 10,
//                                 conversations 20)
//   mount(section, params)        first time shown: build the DOM into its <section>
//   enter(params)                 each time shown (params may have changed)
//   rooms(params) -> [room]       Socket.IO rooms while shown ("all", "session:ID", ...)
//   catchUp()                     read over HTTP what live events may have missed
//   on: {agent_state, agent_step, action, conversation_message, step_delta}: live event handlers
// }
export function registerPage(page) {
  pages.push(page);
  if (page.nav) {
    navLinks.push({ order: 50, ...page.nav, name: page.name });
    navLinks.sort((a, b) => a.order - b.order);
  }
}

// part(step, context) -> Node | null, appended to each step of a session's timeline
// (context: {session}).  Keep it cheap: a long timeline renders many steps.
export function registerStepPart(part) {
  stepParts.push(part);
}

// Live events beyond the ones every page knows (agent_state, agent_step, action,
// conversation_message, step_delta): handler(data, event) runs for each, on every page.
export const liveHandlers = new Map();
export function registerLiveEvent(name, handler) {
  if (!liveHandlers.has(name)) liveHandlers.set(name, []);
  liveHandlers.get(name).push(handler);
}

// Called by the session page after each catch-up of a session (its first load,
// and after every reconnect): hook(sessionId, snapshot) reads what live events may
// have missed (snapshot: the session as the page read it at the start of that catch-up).
export const sessionHooks = [];
export function registerSessionHook(hook) {
  sessionHooks.push(hook);
}

// Called by a session's timeline after it drew steps (a page, a live step, an
// older page): hook({list, sessionId}) may decorate the list (the <ol> of step
// and action <li>s, newest first, each with a data-key it is sorted by; a node
// it inserts needs a data-key too).  components/turns.js groups steps by turn.
export const timelineHooks = [];
export function registerTimelineHook(hook) {
  timelineHooks.push(hook);
}
