// Short notices in the corner, announced to screen readers (aria-live).
import { $, h } from "./dom.js";

export function toast(text, bad = false) {
  const node = h("div.toast" + (bad ? ".bad" : ""), { role: bad ? "alert" : "status" }, text);
  $("#toasts").appendChild(node);
  setTimeout(() => node.remove(), bad ? 8000 : 4000);
}
