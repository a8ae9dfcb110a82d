// Saved views of the agents list: the person names the filters shown now
// (status, moniker, search, sort: the address's query, "#/?status=error&q=owl")
// and gets a button that brings them back; each can be removed.  A view is its
// address, so applying one is following a link, and the address can be
// bookmarked or shared as it is.  Views are kept in this browser's
// localStorage (per browser and per origin, not on the server, not shared
// between people); a browser that refuses storage keeps them for the page's life.
import { h, replace } from "../core/dom.js";

const KEY = "agentsvc.agents.savedViews";
const MAX_VIEWS = 30;
const MAX_NAME = 60;

function readViews() {
  try {
    const views = JSON.parse(localStorage.getItem(KEY) || "[]");
    return Array.isArray(views) ? views.filter((v) => v && typeof v.name === "string" && typeof v.hash === "string"
      && v.hash.startsWith("#/")) : [];
  } catch (err) {
    return [];
  }
}

// `current()`: the address of the filters shown now (without the page offset).
export function savedViews({ current }) {
  let views = readViews();
  const list = h("ul.saved-views", { "aria-label": "Saved views", dataset: { testid: "saved-views" } });
  const name = h("input", { id: "saved-view-name", maxlength: String(MAX_NAME), required: true,
    placeholder: "e.g. failed jokes", dataset: { testid: "saved-view-name" } });
  const form = h("form.inline.save-view", { dataset: { testid: "save-view-form" }, onsubmit: save },
    h("label", { for: "saved-view-name" }, "Save these filters as"), name,
    h("button", { type: "submit", dataset: { testid: "save-view" } }, "Save view"));
  const root = h("div.views", { dataset: { testid: "views" } }, list, form);

  function store() {
    try {
      localStorage.setItem(KEY, JSON.stringify(views));
    } catch (err) {
      console.warn("saved views are kept for this page only:", err.message);
    }
  }

  function save(event) {
    event.preventDefault();
    const label = name.value.trim().slice(0, MAX_NAME);
    if (!label) return;
    // a name saved again takes the filters shown now
    views = [...views.filter((v) => v.name !== label), { name: label, hash: current() }].slice(-MAX_VIEWS);
    store();
    name.value = "";
    draw();
  }

  function remove(view) {
    views = views.filter((v) => v !== view);
    store();
    draw();
  }

  function draw() {
    const here = current();
    replace(list, views.map((view) => h("li", { dataset: { testid: "saved-view" } },
      h("a.view-link", { href: view.hash, dataset: { testid: "saved-view-link" },
        "aria-current": view.hash === here ? "true" : null }, view.name),
      h("button.remove-view", { type: "button", "aria-label": `Remove the view ${view.name}`,
        title: `Remove the view ${view.name}`, dataset: { testid: "saved-view-remove" },
        onclick: () => remove(view) }, "×"))));
    list.hidden = !views.length;
  }

  // Another tab saved or removed one.
  window.addEventListener("storage", (event) => {
    if (event.key === KEY) { views = readViews(); draw(); }
  });

  draw();
  return { root, update: draw };
}
