// A collapsed JSON value: <details> whose body is drawn only when first opened,
// so a timeline of thousands of steps pays nothing for the JSON it never shows.
import { h } from "../core/dom.js";

export function jsonView(label, value, testid) {
  if (value === undefined || value === null) return null;
  const details = h("details.json", { dataset: testid ? { testid } : undefined }, h("summary", label));
  details.addEventListener("toggle", () => {
    if (details.open && details.childElementCount === 1) {
      details.appendChild(h("pre", JSON.stringify(value, null, 2)));
    }
  });
  return details;
}
