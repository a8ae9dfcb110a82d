// Who is using the dashboard (GET /api/whoami): the token's name and role in
// the top bar, with a Log out button, when the service has tokens.  Nothing is
// shown on a service without tokens.
import { $, h } from "../core/dom.js";
import { get, leavingPage } from "../core/api.js";

export async function showWho() {
  let who;
  try {
    who = await get("/api/whoami");
  } catch (err) {
    return;  // a 401 has already sent the page to the login
  }
  if (!who.auth) return;
  const form = h("form.logout", { method: "post", action: "/logout", dataset: { testid: "logout" } },
    h("button", { type: "submit" }, "Log out"));
  form.addEventListener("submit", leavingPage);
  const badge = h("span.who", { dataset: { testid: "who" }, title: "the token this page is logged in with" },
    `${who.name} (${who.role})`);
  $("header.topbar").insertBefore(h("span.session-user", badge, form), $("#live"));
}
