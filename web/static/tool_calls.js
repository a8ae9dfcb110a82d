// Tool calls in the session timeline (StepFrame-v1), live.
//
// Each call is shown inside the step that made it (the <li> of its iteration
// in #steps): name, status, duration, and its args and result in an
// expandable box.  A call waiting for approval has Approve / Deny buttons; a
// call waiting for an external result has a box to post it.  Rows come over
// HTTP on every catch-up (GET /api/tool-calls?session_id=…) and live as
// `tool_call` events, one per change of a row; the newest row per id wins
// (by updated_at), so an event seen both ways is shown once.
//
// Hooks in dashboard.js: `toolCalls.stepAdded(step, li)` when a step is shown,
// `toolCalls.catchUp(sessionId)` when the session is (re)loaded (after its steps).
"use strict";

const toolCalls = (() => {
  const rows = new Map();  // tool call id -> newest row (open session)
  let sessionId = null;

  function reset(id) {
    if (id === sessionId) return;
    sessionId = id;
    rows.clear();
  }

  function newer(row, known) {
    return !known || (row.updated_at || "") >= (known.updated_at || "");
  }

  function merge(row) {
    if (row.session_id !== sessionId) return;
    if (!newer(row, rows.get(row.id))) return;
    rows.set(row.id, row);
    render(row);
  }

  function stepItem(iteration) {
    return document.querySelector(`#steps li[data-iteration="${iteration}"]`);
  }

  function box(li) {
    let node = li.querySelector(":scope > .tool-calls");
    if (!node) {
      node = el("div", "tool-calls");
      li.appendChild(node);
    }
    return node;
  }

  function render(row) {
    const li = stepItem(row.iteration);
    if (!li) return;  // its step is not shown yet: stepAdded renders it
    const list = box(li);
    let node = list.querySelector(`[data-call="${row.id}"]`);
    const open = node ? node.querySelector("details")?.open : false;
    const fresh = el("div", "tool-call " + row.status);
    fresh.dataset.call = row.id;
    fresh.dataset.seq = row.seq;
    fresh.setAttribute("data-testid", "tool-call");
    fresh.appendChild(head(row));
    fresh.appendChild(details(row, open));
    const actions = controls(row);
    if (actions) fresh.appendChild(actions);
    if (node) node.replaceWith(fresh);
    else {
      const later = [...list.children].find((n) => Number(n.dataset.seq) > row.seq);
      list.insertBefore(fresh, later || null);
    }
  }

  function head(row) {
    const h = el("div", "tool-head");
    h.appendChild(el("span", "tool-name", "🔧 " + row.name));
    h.appendChild(badge(row.status));
    if (row.duration_ms != null) h.appendChild(el("span", "hint", ` ${Math.round(row.duration_ms)} ms`));
    if (row.attempts > 1) h.appendChild(el("span", "hint", ` · attempt ${row.attempts}`));
    if (row.error) h.appendChild(el("div", "step-error", row.error));
    return h;
  }

  function details(row, open) {
    const d = el("details");
    d.open = !!open;
    d.appendChild(el("summary", null, "args and result"));
    d.appendChild(el("div", "hint", "args"));
    d.appendChild(el("pre", "tool-json", JSON.stringify(row.args, null, 2)));
    if (row.status === "success") {
      d.appendChild(el("div", "hint", "result"));
      d.appendChild(el("pre", "tool-json", JSON.stringify(row.result, null, 2)));
    }
    return d;
  }

  function controls(row) {
    if (row.status === "waiting_approval") {
      const form = el("div", "tool-actions");
      const reason = Object.assign(el("input"), { placeholder: "reason (told to the model)", name: "reason" });
      const approve = el("button", null, "Approve");
      const deny = el("button", "danger", "Deny");
      approve.setAttribute("data-testid", "tool-approve");
      deny.setAttribute("data-testid", "tool-deny");
      approve.onclick = () => decide(row, "approve", {});
      deny.onclick = () => decide(row, "deny", reason.value ? { reason: reason.value } : {});
      form.append(approve, deny, reason);
      return form;
    }
    if (row.status === "waiting_result") {
      const form = el("form", "tool-actions");
      const text = Object.assign(el("textarea"), { placeholder: "result: JSON or plain text", name: "result", rows: 2 });
      const post = el("button", null, "Post result");
      post.setAttribute("data-testid", "tool-post-result");
      form.append(text, post);
      form.onsubmit = (e) => {
        e.preventDefault();
        let result = text.value;
        try { result = JSON.parse(text.value); } catch (err) { /* plain text is a fine result */ }
        decide(row, "result", { result });
      };
      return form;
    }
    return null;
  }

  async function decide(row, verb, body) {
    try {
      await api("POST", `/api/tool-calls/${row.id}/${verb}`, body);
      toast(`${verb} of ${row.name} requested`);
    } catch (err) {
      toast(`${verb} of ${row.name} failed: ${err.message}`, true);
    }
  }

  async function catchUp(id) {
    listen();
    reset(id);
    for (let offset = 0; ; offset += 1000) {
      const data = await api("GET", `/api/tool-calls?session_id=${id}&limit=1000&offset=${offset}`);
      if (id !== sessionId) return;
      data.tool_calls.forEach(merge);
      if (data.tool_calls.length < 1000) break;
    }
  }

  function stepAdded(step, li) {
    listen();
    reset(step.session_id);
    rows.forEach((row) => { if (row.iteration === step.iteration) render(row); });
  }

  // Loaded before dashboard.js (which owns `socket`, `page`, `api`…): listen
  // from the first use on, which is before any session's first catch-up.
  let listening = false;
  function listen() {
    if (listening) return;
    listening = true;
    socket.on("tool_call", (event) => {
      sequenced(event);
      if (page.view === "session" && event.data.session_id === page.sessionId) {
        reset(page.sessionId);
        merge(event.data);
      }
    });
  }

  return { catchUp, stepAdded };
})();
