// The conversations page: every thread, newest first, and a form to start one.
import { get, post } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { when } from "../core/format.js";
import { registerPage } from "../core/registry.js";
import { toast } from "../core/toast.js";

let ui = null;

function mount(section) {
  const error = h("p.form-error", { role: "alert" });
  const title = h("input", { id: "conversation-title", name: "title", placeholder: "Planning the launch",
    dataset: { testid: "conversation-title" } });
  const tags = h("input", { id: "conversation-tags", name: "tags", placeholder: "demo, jokes" });
  const form = h("form.panel.side", { id: "conversation-form", autocomplete: "off",
    dataset: { testid: "conversation-form" }, onsubmit: async (e) => {
      e.preventDefault();
      error.textContent = "";
      try {
        const made = await post("/api/conversations", { title: title.value,
          tags: tags.value.split(",").map((t) => t.trim()).filter(Boolean) });
        form.reset();
        location.hash = "#/conversation/" + made.conversation_id;
      } catch (err) {
        error.textContent = err.message;
      }
    } },
  h("h2", "New conversation"),
  h("label", { for: "conversation-title" }, "Title", title),
  h("label", { for: "conversation-tags" }, "Tags ", h("small", "comma separated, optional"), tags),
  h("button.primary", { type: "submit", dataset: { testid: "conversation-submit" } }, "Create conversation"),
  error);
  ui = { list: h("ul.cards", { dataset: { testid: "conversations" } }), empty: h("p.empty", { hidden: true },
    "No conversations yet. Create one; then start agents in it.") };
  replace(section, h("div.columns", h("div.panel.grow", h("h1", "Conversations"), ui.list, ui.empty), form));
}

async function load() {
  const data = await get("/api/conversations", { limit: 200 });
  replace(ui.list, data.conversations.map((c) => h("li", h("a", { href: "#/conversation/" + c.conversation_id },
    h("strong.card-title", c.title || "untitled"),
    h("span.hint", "started ", when(c.created_at)),
    c.tags && c.tags.length ? h("span.hint", c.tags.join(", ")) : null))));
  ui.empty.hidden = data.conversations.length > 0;
}

registerPage({
  name: "conversations",
  nav: { label: "Conversations", href: "#/conversations", order: 20 },
  match: (parts) => (parts[0] === "conversations" ? {} : null),
  mount,
  enter() {},
  rooms: () => [],
  catchUp: () => load().catch((err) => toast("Could not load: " + err.message, true)),
});
