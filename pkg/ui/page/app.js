// The status page's data flow: sign in, fetch the admin API's JSON with
// the token as a bearer token, hand it to render.js, create and delete
// overrides. The token lives in this tab's sessionStorage only: never in
// a URL, a cookie or localStorage.
'use strict';

(() => {
  const render = window.tollgateRender;
  const tokenKey = 'tollgate.adminToken';
  const refreshEvery = 5000; // ms
  const topQuery = 'window=5m&by=rejected&limit=5';

  const $ = (id) => document.getElementById(id);

  // APIError is a call the admin API answered with an error, or that
  // failed.
  class APIError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // api calls the admin API and returns its JSON answer. A 401 signs the
  // page out.
  async function api(method, path, body) {
    const token = sessionStorage.getItem(tokenKey);
    if (!token) throw new APIError(401, 'not signed in');
    const headers = {Authorization: `Bearer ${token}`, Accept: 'application/json'};
    const init = {method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error'};
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (err) {
      throw new APIError(0, `the instance did not answer (${err.message})`);
    }
    const data = await resp.json().catch(() => null);
    if (resp.status === 401) signOut('The admin API refused the token.', true);
    if (!resp.ok) throw new APIError(resp.status, (data && data.error) || `${resp.status} ${resp.statusText}`);
    return data;
  }

  // shown remembers what each section last rendered, so that a refresh
  // that brings nothing new leaves the section, and the focus in it,
  // alone.
  const shown = new Map();

  // show puts what build returns in the content of section id, unless
  // the same key was shown last.
  function show(id, key, build) {
    if (shown.get(id) === key) return;
    shown.set(id, key);
    $(id).querySelector('.content').replaceChildren(build());
  }

  // load fetches path for section id and renders it with draw; a 404
  // says the instance does not serve it.
  async function load(id, path, draw) {
    if (!$(id).hasAttribute('data-served')) return;
    try {
      const data = await api('GET', path);
      show(id, JSON.stringify(data), () => draw(data, Date.now()));
    } catch (err) {
      if (err.status === 401) return;
      show(id, `error ${err.status} ${err.message}`, () => err.status === 404 ? render.unavailable() : render.failure(err));
    }
  }

  // topServed is false once /v1/top answered 404, until the page loads
  // again.
  let topServed = true;

  // loadRules fetches the rules, then the top limited clients of each.
  async function loadRules() {
    if (!$('rules').hasAttribute('data-served')) return;
    let data;
    try {
      data = await api('GET', '/v1/rules');
    } catch (err) {
      if (err.status !== 401) {
        show('rules', `error ${err.status} ${err.message}`, () => err.status === 404 ? render.unavailable() : render.failure(err));
      }
      return;
    }
    // One call per rule that rejected anything in 5 minutes, at once; a
    // rule that rejected nothing has no limited clients to ask for.
    const tops = new Map();
    const key = (r) => `${r.domain}\u0000${r.rule}`;
    const asked = new Map();
    for (const r of data.rules || []) {
      if (!topServed || asked.has(key(r)) || tops.has(key(r))) continue;
      if (r.rejected_per_second_5m === 0) {
        tops.set(key(r), {entries: []});
        continue;
      }
      const q = new URLSearchParams({domain: r.domain, rule: r.rule});
      asked.set(key(r), api('GET', `/v1/top?${q}&${topQuery}`).catch((err) => err));
    }
    for (const [k, call] of asked) {
      const answer = await call;
      if (answer instanceof APIError && answer.status === 401) return;
      if (answer instanceof APIError && answer.status === 404) topServed = false;
      else tops.set(k, answer);
    }
    const topOf = (r) => (topServed ? tops.get(key(r)) : null);
    const shownTops = [...tops].map(([k, v]) => [k, v instanceof Error ? `error ${v.message}` : v]);
    show('rules', JSON.stringify([data, shownTops, topServed]), () => render.rules(data, topOf));
  }

  let timer = null;

  // refresh reloads every section.
  async function refresh() {
    await Promise.all([
      load('status', '/v1/status', render.status),
      loadRules(),
      load('overrides', '/v1/overrides', render.overrides),
      load('history', '/v1/rules/history', render.history),
    ]);
    if (!sessionStorage.getItem(tokenKey)) return;
    const now = Date.now();
    render.refresh($('dashboard'), now);
    $('updated').textContent = `Updated ${new Date(now).toISOString().slice(11, 19)} UTC`;
  }

  // signIn keeps token, checks it with GET /v1/status, and shows the
  // sections.
  async function signIn(token) {
    sessionStorage.setItem(tokenKey, token);
    $('login-error').textContent = '';
    try {
      await api('GET', '/v1/status');
    } catch (err) {
      if (err.status !== 401) {
        sessionStorage.removeItem(tokenKey);
        $('login-error').textContent = `Could not sign in: ${err.message}`;
        $('login-error').className = 'error';
      }
      return;
    }
    $('login').hidden = true;
    $('dashboard').hidden = false;
    $('signed-in').hidden = false;
    await refresh();
    clearInterval(timer);
    timer = setInterval(() => {
      if (!document.hidden) refresh();
    }, refreshEvery);
    $('status-title').focus();
  }

  // signOut forgets the token and every section, and shows the sign-in
  // form with message; error marks it as one.
  function signOut(message, error) {
    sessionStorage.removeItem(tokenKey);
    clearInterval(timer);
    timer = null;
    shown.clear();
    for (const c of document.querySelectorAll('#dashboard .content')) c.replaceChildren();
    $('dashboard').hidden = true;
    $('signed-in').hidden = true;
    $('login').hidden = false;
    $('login-error').textContent = message || '';
    $('login-error').className = error ? 'error' : '';
    $('token').focus();
  }

  // say shows message under the override form; error marks it as one.
  function say(message, error) {
    const p = $('override-message');
    p.textContent = message;
    p.className = error ? 'error' : '';
  }

  // createOverride posts the override form.
  async function createOverride() {
    const list = [];
    for (const line of $('ov-entries').value.split('\n')) {
      const text = line.trim();
      if (!text) continue;
      const i = text.indexOf('=');
      if (i <= 0) {
        say(`"${text}" is not key=value.`, true);
        $('ov-entries').focus();
        return;
      }
      list.push({key: text.slice(0, i).trim(), value: text.slice(i + 1).trim()});
    }
    const body = {domain: $('ov-domain').value.trim(), entries: list, expires_in: $('ov-expires').value.trim()};
    if ($('ov-kind-limit').checked) {
      body.limit = {requests_per_unit: Number($('ov-requests').value), unit: $('ov-unit').value};
    } else {
      body.multiplier = Number($('ov-multiplier').value);
    }
    const reason = $('ov-reason').value.trim();
    if (reason) body.reason = reason;
    try {
      const created = await api('POST', '/v1/overrides', body);
      say(`Created override ${created.id}.`, false);
      $('ov-entries').value = '';
      $('ov-reason').value = '';
    } catch (err) {
      if (err.status !== 401) say(`Not created: ${err.message}`, true);
      return;
    }
    await refresh();
  }

  // deleteOverride deletes the override of id.
  async function deleteOverride(id) {
    try {
      await api('DELETE', `/v1/overrides/${encodeURIComponent(id)}`);
      say(`Deleted override ${id}.`, false);
    } catch (err) {
      if (err.status !== 401) say(`Not deleted: ${err.message}`, true);
      return;
    }
    await refresh();
    $('overrides-title').focus();
  }

  // kindChanged enables the inputs of the chosen change only.
  function kindChanged() {
    const limit = $('ov-kind-limit').checked;
    $('ov-multiplier').disabled = limit;
    $('ov-requests').disabled = !limit;
    $('ov-unit').disabled = !limit;
  }

  $('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const token = $('token').value.trim();
    $('token').value = '';
    if (token) signIn(token);
  });
  $('sign-out').addEventListener('click', () => signOut('Signed out.', false));
  $('refresh').addEventListener('click', () => refresh());
  $('override-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    createOverride();
  });
  $('ov-kind-multiplier').addEventListener('change', kindChanged);
  $('ov-kind-limit').addEventListener('change', kindChanged);
  $('overrides').addEventListener('click', (ev) => {
    const button = ev.target.closest('button[data-delete]');
    if (button) {
      button.disabled = true;
      deleteOverride(button.dataset.delete);
    }
  });
  kindChanged();

  const kept = sessionStorage.getItem(tokenKey);
  if (kept) signIn(kept);
})();
