// The control actions of a session's timeline (pause, resume, guidance,
// destroy), drawn between its steps where they were made.  Steps are sorted
// by iteration, not by clock, so an action goes just above the newest shown
// step made at or before it; it is drawn only while the steps around it are
// shown (the window, step_window.js, may hold any run of them), and drawn
// again only when its outcome or its place changes.
import { actionNode } from "./step_node.js";

const pad = (i) => String(i).padStart(12, "0");

// model: the timeline's StepWindow; place(node): inserts a node by its data-key.
export function timelineActions(model, place) {
  let actions = new Map();  // action id -> action (all read)
  const nodes = new Map();  // action id -> its <li>, while drawn

  function keyOf(a) {
    if (a.type === "create" || !model.size) return null;
    let lo = model.lo, hi = model.hi, anchor = null;
    while (lo <= hi) {  // the newest shown step made at or before it
      const mid = (lo + hi) >> 1;
      if ((model.step(mid).created_at || "") <= (a.created_at || "")) { anchor = mid; lo = mid + 1; } else hi = mid - 1;
    }
    if (anchor === null) return model.lo === model.floor ? `${pad(model.lo)}|a|${a.created_at}|${a.id}` : null;
    if (anchor === model.hi && !model.following) return null;  // it may follow steps not shown
    return `${pad(anchor)}|t|${a.created_at}|${a.id}`;
  }

  return {
    reset() {
      actions = new Map();
      nodes.clear();
    },
    // A new action, or a known one's outcome (from HTTP or live).
    upsert(action) {
      const known = actions.get(action.id);
      actions.set(action.id, { ...(known || {}), ...action, payload: action.payload || (known && known.payload) });
      const node = nodes.get(action.id);
      if (node && (!known || known.status !== action.status || known.error !== action.error)) {
        node.remove();  // drawn again with its outcome
        nodes.delete(action.id);
      }
    },
    // After the window changed: each action in place, or gone when its steps are.
    draw() {
      for (const a of actions.values()) {
        const key = keyOf(a);
        const node = nodes.get(a.id);
        if (node && node.dataset.key === key) continue;
        if (node) { node.remove(); nodes.delete(a.id); }
        if (key === null) continue;
        const fresh = actionNode(a, key);
        nodes.set(a.id, fresh);
        place(fresh);
      }
    },
  };
}
