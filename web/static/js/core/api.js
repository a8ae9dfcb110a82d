// The HTTP API.  When the service has tokens, the page carries the login
// cookie (HttpOnly: no script ever sees a token) and a 401 sends the browser to
// the login page, which brings it back here.  Errors become Error objects whose
// message is the API's plain message.

export class ApiError extends Error {
  constructor(message, status, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// Set when the user logs out: the logout's answer clears the login cookie
// before the login page has loaded, and a read of this page answered 401 in
// that gap must not send the browser elsewhere (its navigation would cancel
// the logout's own, to /login).
let leaving = false;

export function leavingPage() {
  leaving = true;
}

export async function api(method, path, body) {
  const options = { method, headers: {}, credentials: "same-origin" };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, options);
  } catch (err) {
    throw new ApiError("the service cannot be reached (" + err.message + ")", 0, "unreachable");
  }
  if (response.status === 401) {  // not logged in, or the login's token was revoked
    if (!leaving) location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search + location.hash));
    throw new ApiError("log in to continue", 401, "unauthorized");
  }
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = data.error ? data.error.message : response.status + " " + response.statusText;
    throw new ApiError(message, response.status, data.error && data.error.code);
  }
  return data;
}

export const get = (path, params) => api("GET", params ? path + "?" + query(params) : path);
export const post = (path, body) => api("POST", path, body);

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  return q.toString();
}
