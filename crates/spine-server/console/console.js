// Spine console: a client of the Connect API (spine.v1.MemoryService) on this origin.
// Every value from the server is set as text, never parsed as HTML. With OIDC on, it signs
// in with the authorization-code flow and PKCE as a public client; the token lives in this
// script's memory only (sessionStorage holds only the PKCE verifier, state and nonce across
// the redirect).
'use strict';

const API = '/spine.v1.MemoryService/';
const STATES = ['live', 'archived', 'superseded', 'scheduled', 'expired', 'all'];
const CATEGORIES = ['', 'decision', 'preference', 'convention', 'gotcha', 'discovery', 'rule'];
const PAGE = 50;
let config = { auth: null };
let token = null; // bearer token, memory only
let who = null;

// ---------- DOM ----------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const main = () => document.getElementById('main');
function show(title, ...nodes) {
  document.title = `${title} · Spine console`;
  const body = nodes.flat(Infinity).filter((n) => n !== null && n !== undefined && n !== false);
  main().replaceChildren(h('h1', {}, title), ...body);
  for (const a of document.querySelectorAll('nav a')) {
    a.toggleAttribute('aria-current', location.hash.startsWith(a.getAttribute('href')));
    if (a.hasAttribute('aria-current')) a.setAttribute('aria-current', 'page');
  }
}
function status(text) { document.getElementById('status').textContent = text || ''; }
function errorBox(e) { return h('p', { class: 'error', role: 'alert' }, e.message || String(e)); }
const chip = (t, cls) => h('span', { class: 'chip' + (cls ? ' ' + cls : '') }, t);
const when = (t) => (t ? new Date(t).toLocaleString() : '');
const pick = (o, snake) => o[snake] ?? o[snake.replace(/_(\w)/g, (_, c) => c.toUpperCase())];
function recordLink(m) { return h('a', { href: `#/record/${encodeURIComponent(m.id)}` }, pick(m, 'short_id') || m.id); }
function preview(m) {
  const text = m.summary || m.content || '';
  const line = text.split('\n')[0];
  return line.length > 160 ? line.slice(0, 157) + '…' : line;
}

// ---------- API ----------
class ApiError extends Error {
  constructor(message, code, http) { super(message); this.code = code; this.http = http; }
}
// Bumped by every route(): an answer that arrives after the page it was for was left (a
// slow call, then a sign-out or another link) must not draw over the page shown since.
let routeSeq = 0;
class Stale extends Error {}

async function rpc(method, body) {
  const headers = { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' };
  if (token) headers.Authorization = `Bearer ${token}`;
  const seq = routeSeq;
  let r;
  try {
    r = await fetch(API + method, { method: 'POST', headers, body: JSON.stringify(body || {}) });
  } catch (e) {
    if (seq !== routeSeq) throw new Stale('stale');
    throw new ApiError('The Spine server is unreachable. Is `spine serve` running?', 'unavailable', 0);
  }
  let j = null;
  try { j = await r.json(); } catch (e) { j = null; }
  if (seq !== routeSeq) throw new Stale('stale');
  if (r.status === 401 || (j && j.code === 'unauthenticated')) {
    const had = token !== null;
    token = null; who = null; renderIdentity();
    throw new ApiError(had ? 'Your session expired. Sign in again.' : 'Sign in to see your memory.', 'unauthenticated', 401);
  }
  if (!r.ok) throw new ApiError((j && j.message) || `HTTP ${r.status}`, j && j.code, r.status);
  return j || {};
}

// ---------- sign-in (authorization code + PKCE) ----------
const b64url = (bytes) => btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
const randomString = () => b64url(crypto.getRandomValues(new Uint8Array(32)));
function claims(jwt) {
  try { return JSON.parse(atob(jwt.split('.')[1].replace(/-/g, '+').replace(/_/g, '/'))); } catch (e) { return null; }
}
async function discovery() {
  const r = await fetch(config.auth.issuer.replace(/\/$/, '') + '/.well-known/openid-configuration');
  if (!r.ok) throw new Error(`The identity provider's discovery document failed: HTTP ${r.status}`);
  return r.json();
}
async function signIn() {
  const d = await discovery();
  const verifier = randomString();
  const state = randomString();
  const nonce = randomString();
  const challenge = b64url(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)));
  sessionStorage.setItem('spine.pkce', JSON.stringify({ verifier, state, nonce, back: location.hash || '#/scopes' }));
  const q = new URLSearchParams({
    response_type: 'code', client_id: config.auth.client_id, redirect_uri: location.origin + '/console/callback',
    scope: config.auth.scope || 'openid email profile', state, nonce, code_challenge: challenge,
    code_challenge_method: 'S256', audience: config.auth.audience,
  });
  location.assign(`${d.authorization_endpoint}?${q}`);
}
async function finishSignIn() {
  const params = new URLSearchParams(location.search);
  const saved = JSON.parse(sessionStorage.getItem('spine.pkce') || 'null');
  sessionStorage.removeItem('spine.pkce');
  history.replaceState(null, '', '/console/' + ((saved && saved.back) || '#/scopes'));
  if (params.get('error')) throw new Error(`Sign-in failed: ${params.get('error_description') || params.get('error')}`);
  if (!saved || params.get('state') !== saved.state) throw new Error('Sign-in failed: the answer does not match this sign-in. Try again.');
  const d = await discovery();
  const r = await fetch(d.token_endpoint, {
    method: 'POST',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({
      grant_type: 'authorization_code', code: params.get('code'), redirect_uri: location.origin + '/console/callback',
      client_id: config.auth.client_id, code_verifier: saved.verifier,
    }),
  });
  const t = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(`Sign-in failed at the identity provider: ${t.error_description || t.error || r.status}`);
  const id = t.id_token && claims(t.id_token);
  if (id && id.nonce !== saved.nonce) throw new Error('Sign-in failed: the ID token is not for this sign-in.');
  // The access token when it is a JWT for Spine's audience (or the console), else the ID token.
  const access = t.access_token && claims(t.access_token);
  const auds = access ? [].concat(access.aud || []) : [];
  const forSpine = access && (auds.includes(config.auth.audience) || auds.includes(config.auth.client_id));
  token = forSpine ? t.access_token : t.id_token || t.access_token;
  const c = claims(token) || id || {};
  who = c.email || c.preferred_username || c.sub || 'signed in';
}
function renderIdentity() {
  const box = document.getElementById('identity');
  if (!config.auth) { box.replaceChildren(h('span', { class: 'muted' }, 'Local (no sign-in)')); return; }
  if (token) {
    box.replaceChildren(h('span', { 'data-testid': 'signed-in' }, `Signed in as ${who}`),
      h('button', { type: 'button', onclick: () => { token = null; who = null; renderIdentity(); route(); } }, 'Sign out'));
  } else if (!config.auth.client_id) {
    box.replaceChildren(h('span', { class: 'error' }, 'Sign-in is not configured: start spine serve with --console-client-id'));
  } else {
    box.replaceChildren(h('button', { type: 'button', class: 'primary', onclick: () => signIn().catch((e) => status(e.message)) }, 'Sign in'));
  }
}

// ---------- confirmation ----------
function confirmAction(text, verb) {
  const d = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-ok').textContent = verb;
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
    d.returnValue = '';
    d.showModal();
    document.getElementById('confirm-ok').focus();
  });
}
async function curate(ids, restore) {
  const verb = restore ? 'Restore' : 'Archive';
  const n = ids.length;
  if (!(await confirmAction(`${verb} ${n} record${n === 1 ? '' : 's'}?`, verb))) return false;
  const r = await rpc(restore ? 'RestoreMemory' : 'ArchiveMemory', { ids });
  const outcomes = (r.results || []).map((x) => x.outcome);
  status(`${verb}: ${outcomes.join(', ')}`);
  return true;
}

// ---------- pages ----------
async function scopesPage() {
  const r = await rpc('ListScopes', {});
  const scopes = r.scopes || [];
  if (!scopes.length) return show('Scopes', h('p', { class: 'empty' }, 'No records yet: nothing your agents stored is readable here.'));
  show('Scopes', h('table', {},
    h('thead', {}, h('tr', {}, h('th', {}, 'Scope'), h('th', {}, 'Live records'))),
    h('tbody', {}, scopes.map((s) => h('tr', {},
      h('td', {}, h('a', { href: `#/scope/${encodeURIComponent(s.scope)}` }, s.scope)),
      h('td', { 'data-testid': 'count' }, String(s.records ?? 0)))))),
  r.truncated ? h('p', { class: 'muted' }, 'More scopes exist than are listed.') : null);
}

function recordRows(memories, selected, opts) {
  return h('table', { 'data-testid': 'records' },
    h('thead', {}, h('tr', {}, opts.select ? h('th', {}, h('span', { class: 'muted' }, 'Select')) : null,
      h('th', {}, 'Id'), h('th', {}, 'Category'), h('th', {}, 'Text'), h('th', {}, 'Tags'),
      opts.score ? h('th', {}, 'Score') : null, h('th', {}, 'Created'))),
    h('tbody', {}, memories.map((m) => h('tr', { 'data-id': m.id },
      opts.select ? h('td', {}, h('input', { type: 'checkbox', 'aria-label': `Select ${pick(m, 'short_id')}`,
        onchange: (e) => (e.target.checked ? selected.add(m.id) : selected.delete(m.id)) })) : null,
      h('td', {}, recordLink(m)),
      h('td', {}, m.category || ''),
      h('td', {}, h('span', { class: 'text' }, preview(m)), ' ', (m.states || []).map((s) => chip(s, 'state'))),
      h('td', {}, (m.tags || []).map((t) => chip(t))),
      opts.score ? h('td', {}, [m.score != null ? Number(m.score).toFixed(3) : '', m.relevance != null ? ` (relevance ${Number(m.relevance).toFixed(2)})` : ''].join('')) : null,
      h('td', { class: 'muted' }, when(pick(m, 'created_at')))))));
}

async function scopePage(scope, q) {
  const state = STATES.includes(q.get('state')) ? q.get('state') : 'live';
  const category = q.get('category') || '';
  const tags = (q.get('tags') || '').split(',').map((t) => t.trim()).filter(Boolean);
  const go = (k, v) => { const n = new URLSearchParams(q); if (v) n.set(k, v); else n.delete(k); location.hash = `#/scope/${encodeURIComponent(scope)}?${n}`; };
  const filters = h('form', { class: 'filters', onsubmit: (e) => { e.preventDefault(); go('tags', e.target.tags.value); } },
    h('label', { for: 'f-state' }, 'State'),
    h('select', { id: 'f-state', name: 'state', onchange: (e) => go('state', e.target.value === 'live' ? '' : e.target.value) },
      STATES.map((s) => h('option', { value: s, selected: s === state }, s))),
    h('label', { for: 'f-category' }, 'Category'),
    h('select', { id: 'f-category', name: 'category', onchange: (e) => go('category', e.target.value) },
      CATEGORIES.map((c) => h('option', { value: c, selected: c === category }, c || 'any'))),
    h('label', { for: 'f-tags' }, 'Tags'),
    h('input', { id: 'f-tags', name: 'tags', value: tags.join(', '), placeholder: 'all of: a, b' }),
    h('button', { type: 'submit' }, 'Apply'));
  const selected = new Set();
  const list = h('div', {});
  const more = h('div', {});
  const restore = state === 'archived';
  const toolbar = h('div', { class: 'toolbar' },
    h('button', { type: 'button', onclick: async () => {
      if (!selected.size) return status('Select records first.');
      try { if (await curate([...selected], restore)) route(); } catch (e) { if (!(e instanceof Stale)) status(e.message); }
    } }, restore ? 'Restore selected' : 'Archive selected'));
  show(scope, filters, toolbar, list, more);
  let cursor = '';
  let shown = 0;
  const load = async () => {
    const body = { scope, limit: PAGE, state, full: false };
    if (category) body.categories = [category];
    if (tags.length) body.tags = tags;
    if (cursor) body.cursor = cursor;
    const r = await rpc('ListMemories', body);
    const ms = r.memories || [];
    shown += ms.length;
    if (ms.length) list.append(recordRows(ms, selected, { select: true }));
    if (!shown) list.replaceChildren(h('p', { class: 'empty' }, state === 'live' ? 'No records in this scope.' : `No ${state} records in this scope.`));
    cursor = pick(r, 'next_cursor') || '';
    more.replaceChildren(cursor ? h('button', { type: 'button', onclick: () => load().catch((e) => more.replaceChildren(errorBox(e))) }, 'Load more') : '');
  };
  await load();
}

async function recordPage(id) {
  const r = await rpc('GetMemory', { id });
  const m = r.memory || {};
  const states = m.states || [];
  const archived = states.includes('archived');
  const field = (name, value) => (value === undefined || value === null || value === '' || (Array.isArray(value) && !value.length)) ? [] : [h('dt', {}, name), h('dd', {}, value)];
  const citations = (m.citations || []).map((c) => h('li', {}, `${c.kind}: ${c.ref}`, c.locator ? ` (${c.locator})` : '', c.pin ? ` @ ${c.pin}` : '', c.excerpt ? h('div', { class: 'content' }, c.excerpt) : ''));
  const chain = h('div', {}, h('p', { class: 'muted' }, 'Loading the chain…'));
  const related = h('div', {});
  const history = h('div', {});
  show(`Record ${pick(m, 'short_id') || m.id}`,
    h('div', { class: 'toolbar' }, h('button', { type: 'button', onclick: async () => {
      try { if (await curate([m.id], archived)) route(); } catch (e) { if (!(e instanceof Stale)) status(e.message); }
    } }, archived ? 'Restore' : 'Archive')),
    m.summary ? h('p', {}, h('strong', {}, 'Summary: '), m.summary) : null,
    h('div', { class: 'content', 'data-testid': 'content' }, m.content || ''),
    h('dl', { class: 'fields' },
      field('States', states.length ? states.map((s) => chip(s, 'state')) : 'active'),
      field('Scope', h('a', { href: `#/scope/${encodeURIComponent(m.scope)}` }, m.scope)),
      field('Category', m.category), field('Source', m.source), field('Kind', m.kind),
      field('Tags', (m.tags || []).map((t) => chip(t))),
      field('Id', m.id), field('Short id', pick(m, 'short_id')),
      field('Owner', m.owner || '(none)'), field('Visibility', m.visibility || 'private'), field('Actor', m.actor),
      field('Created', when(pick(m, 'created_at'))), field('Not before', when(pick(m, 'not_before'))), field('Not after', when(pick(m, 'not_after'))),
      field('Archived', when(pick(m, 'archived_at'))), field('Last accessed', when(pick(m, 'last_accessed_at'))),
      field('Repository', m.repo), field('Summary source', pick(m, 'summary_source'))),
    citations.length ? [h('h2', {}, 'Citations'), h('ul', {}, citations)] : null,
    h('h2', {}, 'Supersession chain'), chain,
    h('h2', {}, 'Related records'), related,
    h('h2', {}, 'History'), history);
  // The chain: walk back through `supersedes` and forward through `superseded_by`.
  try {
    const before = [];
    let cur = m;
    for (let i = 0; i < 50 && (cur.supersedes || []).length; i++) {
      cur = (await rpc('GetMemory', { id: cur.supersedes[0] })).memory;
      before.unshift(cur);
    }
    const after = [];
    cur = m;
    for (let i = 0; i < 50 && pick(cur, 'superseded_by'); i++) {
      cur = (await rpc('GetMemory', { id: pick(cur, 'superseded_by') })).memory;
      after.push(cur);
    }
    const all = [...before, m, ...after];
    chain.replaceChildren(all.length === 1 ? h('p', { class: 'empty' }, 'Not part of a chain.') :
      h('ol', { class: 'chain', 'data-testid': 'chain' }, all.map((x) => h('li', { 'aria-current': x.id === m.id ? 'true' : null },
        recordLink(x), ' ', preview(x), ' ', (x.states || []).map((s) => chip(s, 'state'))))));
  } catch (e) { chain.replaceChildren(errorBox(e)); }
  try {
    const rel = await rpc('RelatedMemories', { id: m.id, k: 10 });
    const items = rel.related || [];
    related.replaceChildren(items.length ? h('ul', { 'data-testid': 'related' }, items.map((it) => h('li', {},
      recordLink(it.memory), ' ', preview(it.memory), ' ', (it.edges || []).map((e) => chip(e.type))))) : h('p', { class: 'empty' }, 'No related records.'));
  } catch (e) { related.replaceChildren(errorBox(e)); }
  // Who changed the record, and when: its events in the audit log, newest first.
  try {
    const hist = await rpc('GetMemoryHistory', { id: m.id });
    const events = hist.events || [];
    history.replaceChildren(events.length ? h('table', { 'data-testid': 'history' },
      h('thead', {}, h('tr', {}, ['When', 'Action', 'Outcome', 'Actor', 'Via', 'Client'].map((c) => h('th', {}, c)))),
      h('tbody', {}, events.map((e) => h('tr', {},
        h('td', {}, when(e.at)), h('td', {}, e.action), h('td', {}, chip(e.outcome, e.outcome === 'ok' ? null : 'state')),
        h('td', {}, e.actor || '(anonymous)'), h('td', {}, e.lane), h('td', {}, e.client || ''))))) :
      h('p', { class: 'empty' }, 'No recorded changes.'),
      hist.truncated ? h('p', { class: 'muted' }, 'Older events: spine audit --record ' + m.id) : null);
  } catch (e) { history.replaceChildren(errorBox(e)); }
}

async function searchPage(q) {
  const query = q.get('q') || '';
  const scope = q.get('scope') || '';
  let scopes = [];
  try { scopes = (await rpc('ListScopes', {})).scopes || []; } catch (e) { if (e.code === 'unauthenticated' || e instanceof Stale) throw e; }
  const results = h('div', {});
  show('Search',
    h('form', { class: 'filters', role: 'search', onsubmit: (e) => {
      e.preventDefault();
      const n = new URLSearchParams({ q: e.target.q.value });
      if (e.target.scope.value) n.set('scope', e.target.scope.value);
      location.hash = `#/search?${n}`;
    } },
    h('label', { for: 's-q' }, 'Search'),
    h('input', { id: 's-q', name: 'q', type: 'search', value: query, size: 40, required: true }),
    h('label', { for: 's-scope' }, 'Scope'),
    h('select', { id: 's-scope', name: 'scope' }, h('option', { value: '' }, 'All scopes'),
      scopes.map((s) => h('option', { value: s.scope, selected: s.scope === scope }, s.scope))),
    h('button', { type: 'submit', class: 'primary' }, 'Search')),
    results);
  if (!query) return;
  const body = { query, k: 20 };
  if (scope) body.scope = scope; else body.cross_spine = true;
  const r = await rpc('SearchMemories', body);
  const ms = r.memories || [];
  results.replaceChildren(ms.length ? recordRows(ms, new Set(), { score: true }) : h('p', { class: 'empty' }, 'Nothing matches this query.'));
}

async function rulesPage() {
  const scopes = ((await rpc('ListScopes', {})).scopes || []).filter((s) => s.scope.startsWith('rule:'));
  if (!scopes.length) return show('Rules', h('p', { class: 'empty' }, 'No rules yet.'));
  const r = await rpc('ListRules', { scopes: scopes.map((s) => s.scope) });
  const rules = r.rules || [];
  const by = new Map(scopes.map((s) => [s.scope, []]));
  for (const rule of rules) (by.get(rule.scope) || by.set(rule.scope, []).get(rule.scope)).push(rule);
  show('Rules', [...by].map(([scope, list]) => [h('h2', {}, scope),
    list.length ? h('ol', {}, list.sort((a, b) => String(pick(a, 'created_at')).localeCompare(String(pick(b, 'created_at'))))
      .map((x) => h('li', {}, recordLink(x), ' ', x.summary || '', ' ', (x.tags || []).map((t) => chip(t)))))
      : h('p', { class: 'empty' }, 'No rules in this scope.')]));
}

// ---------- router ----------
async function route() {
  routeSeq += 1;
  status('');
  const [path, query] = (location.hash.slice(1) || '/scopes').split('?');
  const q = new URLSearchParams(query || '');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  if (config.auth && !token) {
    show('Sign in', h('p', {}, config.auth.client_id ? 'Sign in to see your memory.' : 'Sign-in is not configured on this server.'));
    return;
  }
  try {
    if (parts[0] === 'scope' && parts[1]) await scopePage(parts[1], q);
    else if (parts[0] === 'record' && parts[1]) await recordPage(parts[1]);
    else if (parts[0] === 'search') await searchPage(q);
    else if (parts[0] === 'rules') await rulesPage();
    else await scopesPage();
  } catch (e) {
    if (e instanceof Stale) return;
    show(e.http === 404 ? 'Not found' : 'Error', errorBox(e.http === 404 ? new Error('No such record (or it is not yours to read).') : e));
    if (e.code === 'unauthenticated') renderIdentity();
  }
}

async function start() {
  try {
    const r = await fetch('/console/config.json');
    config = await r.json();
  } catch (e) {
    show('Error', errorBox(new Error('The Spine server is unreachable. Is `spine serve` running?')));
    return;
  }
  if (config.auth && location.pathname.endsWith('/callback')) {
    try { await finishSignIn(); } catch (e) { status(e.message); }
  }
  renderIdentity();
  window.addEventListener('hashchange', route);
  route();
}
start();
