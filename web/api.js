// The REST API and its SSE output, with the token: asked for once when the server answers 401,
// kept for the tab (sessionStorage), sent as a bearer token. Every call goes through here.

const BASE = '/api/v1';
const TOKEN_KEY = 'weir.token';

/** An error the server answered (its JSON error body), or a failure to reach it. */
export class ApiError extends Error {
  constructor(status, body) {
    super(body?.message || `HTTP ${status}`);
    this.status = status;
    this.code = body?.code;
    this.line = body?.line ?? null;
    this.column = body?.column ?? null;
  }
}

let asking = null;

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

function headers(extra = {}) {
  const value = token();
  return value ? { ...extra, Authorization: `Bearer ${value}` } : extra;
}

/** Shows the token dialog (once, however many calls are waiting) and keeps what is entered. */
function askToken(refused) {
  if (!asking) {
    asking = new Promise((resolve) => {
      const dialog = document.getElementById('token-dialog');
      const input = document.getElementById('token-input');
      document.getElementById('token-message').textContent = refused
        ? 'The server refused that token. Enter the token it was started with.'
        : 'This weir server needs its API token (weir serve --token).';
      input.value = '';
      dialog.addEventListener('close', function onClose() {
        dialog.removeEventListener('close', onClose);
        if (input.value) sessionStorage.setItem(TOKEN_KEY, input.value);
        asking = null;
        document.dispatchEvent(new CustomEvent('weir-token'));
        resolve();
      });
      dialog.showModal();
      input.focus();
    });
  }
  return asking;
}

async function errorOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = { message: `${response.status} ${response.statusText}` };
  }
  return new ApiError(response.status, body);
}

/** One request; asks for the token and tries again while the server answers 401. */
export async function request(method, path, body) {
  for (let attempt = 0; ; attempt += 1) {
    const init = { method, headers: headers(body === undefined ? {} : { 'Content-Type': 'application/json' }) };
    if (body !== undefined) init.body = JSON.stringify(body);
    let response;
    try {
      response = await fetch(BASE + path, init);
    } catch (error) {
      throw new ApiError(0, { message: `the server does not answer (${error.message})` });
    }
    if (response.status === 401) {
      await askToken(attempt > 0 || token() !== null);
      continue;
    }
    if (!response.ok) throw await errorOf(response);
    if (response.status === 202 || response.status === 204) return null;
    return response.json();
  }
}

export const get = (path) => request('GET', path);
export const post = (path, body) => request('POST', path, body);
export const del = (path) => request('DELETE', path);

/**
 * Server-Sent Events of `path`, read with fetch (EventSource cannot send the token): calls
 * `onEvent(name, data)` for each until the stream ends or `signal` aborts.
 */
export async function events(path, signal, onEvent) {
  let response;
  for (;;) {
    response = await fetch(BASE + path, { headers: headers({ Accept: 'text/event-stream' }), signal });
    if (response.status !== 401) break;
    await askToken(token() !== null);
  }
  if (!response.ok) throw await errorOf(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replaceAll('\r\n', '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'event') name = text;
        else if (field === 'data') data.push(text);
      }
      if (data.length) onEvent(name, data.join('\n'));
    }
  }
}
