// Talking to the server's OpenAI-compatible API. The API key lives in this
// module's variable only: never in localStorage, sessionStorage or a cookie,
// so it is gone when the page closes or reloads.

let apiKey = '';

export function setApiKey(key) {
  apiKey = key;
}

export function hasApiKey() {
  return apiKey !== '';
}

// fetch() for /v1/* with the key, if one was given.
export function apiFetch(path, init = {}) {
  const headers = { ...(init.headers || {}) };
  if (apiKey) headers.Authorization = `Bearer ${apiKey}`;
  return fetch(path, { ...init, headers });
}

// The message of an OpenAI-style error body {"error": {"message": ...}},
// else the HTTP status line: the page shows it, it never throws.
export async function errorMessage(response) {
  let text = '';
  try {
    text = await response.text();
    const body = JSON.parse(text);
    if (body && body.error) return String(body.error.message || body.error);
  } catch {
    // Not JSON: fall back to the raw text below.
  }
  const status = `HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ''}`;
  return text.trim() ? `${status}: ${text.trim().slice(0, 300)}` : status;
}

// GET /v1/models -> {ok, ids} | {unauthorized} | {error}
export async function listModels() {
  let r;
  try {
    r = await apiFetch('/v1/models', { cache: 'no-store' });
  } catch (e) {
    return { error: `cannot reach the server (${e.message})` };
  }
  if (r.status === 401) {
    await r.body?.cancel();
    return { unauthorized: true };
  }
  if (!r.ok) return { error: await errorMessage(r) };
  try {
    const body = await r.json();
    return { ok: true, ids: (body.data || []).map((m) => String(m.id)) };
  } catch (e) {
    return { error: `bad /v1/models answer (${e.message})` };
  }
}
