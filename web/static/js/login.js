// The login page: a browser never sends an address's #fragment to the server,
// so the page the user was going to (#/session/…) is added to the form's
// "next" here, and the login brings them back to it.
const next = document.querySelector("input[name=next]");
if (next && location.hash && !next.value.includes("#")) next.value += location.hash;
