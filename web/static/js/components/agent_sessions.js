// The session page's "Sessions of this agent" panel: every session of the
// agent (GET /api/agents/ID/sessions, newest first), each a link, the one shown
// marked.  A fork or a replay is a new session of the same agent, so this is
// how the original is reached from a fork and a fork from the original (the
// agents list shows an agent's latest session only).  It is read again when
// the page shows another session or the shown one changes status, not on
// every step.
import { get } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { badge, short, stepNumber, when } from "../core/format.js";

const SHOWN = 50;

export function agentSessions() {
  const list = h("ol.plain.agent-sessions", { dataset: { testid: "agent-sessions" } });
  const more = h("p.hint", { hidden: true });
  const root = h("div.panel", { "aria-labelledby": "sessions-title" },
    h("h2", { id: "sessions-title" }, "Sessions of this agent ", h("small", "forks and replays are sessions too")),
    list, more);
  let asked = "";  // "agent:session:status" last read
  let generation = 0;

  function reset() {
    asked = "";
    generation += 1;
    replace(list);
    more.hidden = true;
  }

  async function show(snapshot) {
    const key = `${snapshot.agent_id}:${snapshot.session_id}:${snapshot.status}`;
    if (key === asked || !snapshot.agent_id) return;
    asked = key;
    const mine = ++generation;
    let found;
    try {
      found = await get(`/api/agents/${encodeURIComponent(snapshot.agent_id)}/sessions`, { limit: SHOWN });
    } catch (err) {
      if (mine === generation) asked = "";  // asked again on the next update
      return;
    }
    if (mine !== generation) return;
    replace(list, found.sessions.map((s) => item(s, snapshot.session_id)));
    more.hidden = found.sessions.length < SHOWN;
    more.textContent = `The newest ${SHOWN} are listed.`;
  }

  return { root, reset, show };
}

function item(s, shownId) {
  const here = s.session_id === shownId;
  const from = s.forked_from || s.replayed_from;
  return h("li", { dataset: { testid: "agent-session", sessionId: s.session_id } },
    here ? h("strong", { "aria-current": "page" }, `session ${short(s.session_id)} (this one)`)
      : h("a", { href: "#/session/" + s.session_id, title: s.session_id }, `session ${short(s.session_id)}`),
    " ", badge(s.status),
    from ? h("span.hint", ` ${s.replayed_from ? "replay" : "fork"} of session ${short(from.session_id)} at step `
      + stepNumber(from.iteration ?? from.from_iteration ?? 0)) : null,
    h("span.hint", " · ", s.iteration >= 0 ? `${stepNumber(s.iteration)} steps · ` : "", "started ", when(s.created_at)));
}
