// The search box in the top bar, on every page: words typed here open the
// search page (#/search?q=…).  It is a plain form (role=search, labelled), so
// Enter or its button searches, from the keyboard as from the mouse.  On the
// search page new words keep the filters chosen there (and go back to page 1).
import { $, h } from "../core/dom.js";

const input = h("input", { type: "search", name: "q", id: "search-q", required: true, maxLength: 1000,
  autocomplete: "off", placeholder: "Search everything agents did…", dataset: { testid: "search-input" } });

// The search page's address for `words`, keeping its filters when it is the page shown.
export function searchHash(words, from = location.hash) {
  const at = from.indexOf("?");
  const onSearch = from.startsWith("#/search");
  const query = new URLSearchParams(onSearch && at >= 0 ? from.slice(at + 1) : "");
  query.set("q", words);
  query.delete("offset");
  return "#/search?" + query.toString();
}

const form = h("form.search-box", { role: "search", "aria-label": "Search the record",
  dataset: { testid: "search-form" }, onsubmit: (event) => {
    event.preventDefault();
    const words = input.value.trim();
    if (words) location.hash = searchHash(words);
  } },
h("label.visually-hidden", { for: "search-q" }, "Search steps, messages, tool calls and summaries"),
input, h("button", { type: "submit", dataset: { testid: "search-submit" } }, "Search"));

// The search page shows its words here, so they can be changed in place.
export function showWords(words) {
  input.value = words;
}

$("header.topbar").insertBefore(form, $("#live"));
