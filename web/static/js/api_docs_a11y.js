// The API reference page's accessibility fixes to the markup Swagger UI draws
// (the vendored bundle is never edited; its colours are fixed in api_docs.css).
//
// Each operation's summary is a <button> (expand, collapse) holding the
// operation's deep link, an <a>: a link inside a button is two controls in one
// (axe-core "nested-interactive"), and a keyboard or screen reader user meets
// a link that cannot be followed without toggling the button.  The link loses
// its href, so it is plain text; the button still expands the operation, and
// with deepLinking on (js/api_docs.js) that puts the same link in the address.
// An example that scrolls sideways (a <pre>) is given a place in the tab order,
// so it can be scrolled with the keyboard (axe-core "scrollable-region-focusable").
// An operation's responses table is a region (Swagger UI's role): each gets a
// name of its own (axe-core "landmark-unique"); a parameter's choice list gets
// the parameter's name (axe-core "select-name").
// Only attributes change, never the element: Swagger UI's React keeps its
// nodes, and the fix holds for what it draws later (a MutationObserver).
(function () {
  function fix(root) {
    root.querySelectorAll(".opblock-summary-control a[href]").forEach((a) => a.removeAttribute("href"));
    root.querySelectorAll("pre.microlight:not([tabindex])").forEach((pre) => pre.setAttribute("tabindex", "0"));
    root.querySelectorAll("table.responses-table[role=region]:not([aria-label])").forEach((table) => {
      const op = table.closest(".opblock");
      const path = op && op.querySelector(".opblock-summary-path");
      const method = op && op.querySelector(".opblock-summary-method");
      table.setAttribute("aria-label", `Responses of ${method ? method.textContent : ""} ${path ? path.dataset.path : ""}`);
    });
    root.querySelectorAll("tr[data-param-name] select:not([aria-label])").forEach((select) => {
      select.setAttribute("aria-label", select.closest("tr").dataset.paramName);
    });
  }
  const docs = document.getElementById("swagger-ui");
  if (!docs) return;
  fix(docs);
  new MutationObserver(() => fix(docs)).observe(docs, { childList: true, subtree: true });
})();
