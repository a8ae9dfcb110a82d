// The HTTP API, with the optional API token (asked once, kept in localStorage).
// Errors become Error objects whose message is the API's plain message.

const TOKEN_KEY = "agentsvc.apiToken";

export class ApiError extends Error {
  constructor(message, status, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export async function api(method, path, body, retried = false) {
  const options = { method, headers: {} };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) options.headers["Authorization"] = "Bearer " + token;
  let response;
  try {
    response = await fetch(path, options);
  } catch (err) {
    throw new ApiError("the service cannot be reached (" + err.message + ")", 0, "unreachable");
  }
  if (response.status === 401 && !retried) {
    const given = window.prompt("This service needs its API token to make changes:");
    if (given) {
      localStorage.setItem(TOKEN_KEY, given.trim());
      return api(method, path, body, true);
    }
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
