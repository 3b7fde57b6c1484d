// The web console in a real browser: Debian's Chromium driven by playwright-core.
//
// Usage (crates/spine/tests/browser.rs runs it):
//   SPINE_LOCAL=http://127.0.0.1:P1        a `spine serve` without OIDC, fresh store
//   SPINE_OIDC=http://127.0.0.1:P2         a `spine serve --oidc-issuer … --console-client-id …`
//   SPINE_ALICE_TOKEN, SPINE_BOB_TOKEN     bearer tokens for seeding the OIDC server over MCP
//   SPINE_CONSOLE_SCREENSHOTS=dir          optional: save a screenshot of each page there
//   node console_browser.mjs
//
// Seeds records through the official TypeScript MCP SDK (streamable HTTP), then in the browser:
// browses scopes and a scope's records (order, filters by category, tags and state), opens a
// record with its supersession chain and related records, shows long content whole, searches
// and finds the expected record first, archives and restores (one record and several, with
// the confirmation dialog, and cancelling it), lists rules oldest first, shows not-found,
// unreachable-server and expired-session errors; then signs in through the local test
// issuer's authorization-code + PKCE flow as two owners and checks that neither sees the
// other's private records and that the token is kept in no browser storage.

import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { chromium } from 'playwright-core';

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CHROMIUM = process.env.SPINE_CHROMIUM || '/usr/bin/chromium';
const LOCAL = process.env.SPINE_LOCAL;
const OIDC = process.env.SPINE_OIDC;
const shots = process.env.SPINE_CONSOLE_SCREENSHOTS
  ? path.resolve(root, process.env.SPINE_CONSOLE_SCREENSHOTS)
  : null;

function say(line) {
  process.stdout.write(`${line}\n`);
}
function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

// ---------- seeding over MCP ----------
async function mcp(base, token) {
  const opts = token ? { requestInit: { headers: { Authorization: `Bearer ${token}` } } } : {};
  const client = new Client({ name: 'spine-console-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`), opts));
  return {
    async call(name, args) {
      const r = await client.callTool({ name, arguments: args });
      check(!r.isError, `${name} succeeds: ${JSON.stringify(r.content)}`);
      return r.structuredContent;
    },
    close: () => client.close(),
  };
}

const SCOPE = 'a:project:console';
const LONG = Array.from({ length: 60 }, (_, i) =>
  `Line ${i + 1}: the nightly import walks every repository and re-embeds changed files (${'x'.repeat(40)}).`,
).join('\n');

async function seedLocal() {
  const c = await mcp(LOCAL);
  const store = (content, category, tags, scope = SCOPE) =>
    c.call('store_memory', { content, scope, source: 'user-said', category, tags });
  const s = {};
  s.fmt = await store('Run cargo fmt and clippy with -D warnings before every commit.', 'convention', ['ci', 'rust']);
  s.wal = await store('SQLite runs in WAL mode with synchronous=FULL so that an acknowledged write survives a crash.', 'decision', ['storage']);
  s.sdk = await store('The TypeScript MCP SDK validates structuredContent against the output schema: a result that does not match fails the call.', 'gotcha', ['mcp', 'typescript']);
  s.merge = await store('Alice prefers squash merges on the main branch; no merge commits.', 'preference', ['git']);
  s.old = await store('Embeddings are computed by a hosted API.', 'decision', ['embedding']);
  s.new = await c.call('supersede_memory', {
    supersedes: [s.old.id], content: 'Embeddings are computed locally by the built-in MiniLM model; no network is needed.',
    scope: SCOPE, source: 'user-said', category: 'decision', tags: ['embedding'],
  });
  s.long = await store(LONG, 'gotcha', ['long']);
  s.other = await store('The other project deploys on Fridays.', 'convention', [], 'a:project:other');
  s.rule1 = await c.call('store_rule', { scope: 'rule:project:console', summary: 'Never store secrets in memory',
    content: 'Secrets, tokens and passwords never go into memory records.' });
  s.rule2 = await c.call('store_rule', { scope: 'rule:project:console', summary: 'Cite the file for every codebase fact',
    content: 'Facts about the codebase carry a file citation.' });
  await c.close();
  return s;
}

// ---------- browser helpers ----------
async function shot(page, name) {
  if (!shots) return;
  mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: path.join(shots, `${name}.png`) });
}
async function go(page, hash) {
  await page.evaluate((h) => { location.hash = h; }, hash);
}
async function heading(page, text) {
  await page.waitForFunction((t) => document.querySelector('main h1')?.textContent === t, text)
    .catch(() => page.evaluate(() => document.querySelector('main h1')?.textContent)
      .then((got) => { throw new Error(`check failed: heading "${text}", got "${got}"`); }));
}
const rowIds = (page) => page.evaluate(() =>
  [...document.querySelectorAll('[data-testid=records] tbody tr')].map((r) => r.dataset.id));
// Waits until the record table shows exactly these ids, in this order ([] = the empty state).
async function expectRows(page, ids, what) {
  try {
    await page.waitForFunction((want) => {
      const got = [...document.querySelectorAll('[data-testid=records] tbody tr')].map((r) => r.dataset.id);
      if (!want.length) return document.querySelector('main .empty') !== null && got.length === 0;
      return JSON.stringify(got) === JSON.stringify(want);
    }, ids);
  } catch (e) {
    throw new Error(`check failed: ${what}: rows ${JSON.stringify(await rowIds(page))}, want ${JSON.stringify(ids)}`);
  }
}
async function text(page, selector) {
  return (await page.locator(selector).first().textContent()) || '';
}
async function confirm(page, expectText, verb) {
  const dialog = page.locator('dialog#confirm');
  await dialog.waitFor({ state: 'visible' });
  check((await text(page, '#confirm-text')) === expectText, `the dialog asks "${expectText}"`);
  if (verb === 'Cancel') await dialog.getByRole('button', { name: 'Cancel' }).click();
  else await page.locator('#confirm-ok').click();
  await dialog.waitFor({ state: 'hidden' });
}
const scopeHash = (q) => `#/scope/${encodeURIComponent(SCOPE)}${q ? `?${q}` : ''}`;

// ---------- local (no OIDC) ----------
async function local(browser, s) {
  const context = await browser.newContext({ viewport: { width: 1180, height: 760 } });
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(m.text()); });

  // Scopes with live counts; no sign-in without OIDC.
  await page.goto(`${LOCAL}/console/`);
  await heading(page, 'Scopes');
  check((await text(page, '#identity')).includes('Local (no sign-in)'), 'identity says local');
  const counts = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll('main tbody tr')]
    .map((tr) => [tr.cells[0].textContent, tr.cells[1].textContent])));
  check(counts[SCOPE] === '6' && counts['a:project:other'] === '1', `scope counts: ${JSON.stringify(counts)}`);
  check('rule:project:console' in counts, `the rule scope is listed: ${JSON.stringify(counts)}`);
  await shot(page, 'scopes');
  say('  scopes: listed with live counts');

  // A scope's records, most recent first; filters.
  await page.getByRole('link', { name: SCOPE, exact: true }).click();
  await heading(page, SCOPE);
  const live = [s.long, s.new, s.merge, s.sdk, s.wal, s.fmt].map((m) => m.id);
  await expectRows(page, live, 'live records most recent first');
  await shot(page, 'scope');
  await page.getByLabel('Category').selectOption('gotcha');
  await expectRows(page, [s.long.id, s.sdk.id], 'category gotcha');
  await page.getByLabel('Tags').fill('mcp');
  await page.getByRole('button', { name: 'Apply' }).click();
  await expectRows(page, [s.sdk.id], 'category gotcha and tag mcp');
  await go(page, scopeHash());
  await page.getByLabel('State').selectOption('superseded');
  await expectRows(page, [s.old.id], 'the superseded record');
  check((await text(page, '[data-testid=records] tbody tr')).includes('superseded'), 'its state chip');
  say('  scope: order, category, tags and state filters');

  // A record: chain and related records, clickable.
  await go(page, scopeHash());
  await expectRows(page, live, 'live again');
  await page.getByRole('link', { name: s.new.short_id, exact: true }).click();
  await heading(page, `Record ${s.new.short_id}`);
  await page.locator('[data-testid=chain]').waitFor();
  const chain = await page.evaluate(() => [...document.querySelectorAll('[data-testid=chain] li')]
    .map((li) => [li.querySelector('a').textContent, li.getAttribute('aria-current')]));
  check(JSON.stringify(chain) === JSON.stringify([[s.old.short_id, null], [s.new.short_id, 'true']]),
    `chain old → new: ${JSON.stringify(chain)}`);
  await page.locator('[data-testid=related]').waitFor();
  const related = await text(page, '[data-testid=related]');
  check(related.includes(s.old.short_id) && related.includes('supersession'), `related: ${related}`);
  // Its history, from the audit log: the supersede that wrote it.
  await page.locator('[data-testid=history]').waitFor();
  const history = await text(page, '[data-testid=history] tbody');
  check(history.includes('supersede_memory') && history.includes('ok'), `history: ${history}`);
  check((await text(page, '[data-testid=content]')).includes('built-in MiniLM'), 'full content shown');
  for (const f of ['States', 'Scope', 'Category', 'Source', 'Tags', 'Id', 'Short id', 'Owner', 'Visibility', 'Created']) {
    check(await page.locator('dl.fields dt', { hasText: new RegExp(`^${f}$`) }).count() === 1, `field ${f} shown`);
  }
  await shot(page, 'record');
  await page.locator('[data-testid=chain]').getByRole('link', { name: s.old.short_id }).click();
  await heading(page, `Record ${s.old.short_id}`);
  check((await text(page, 'dl.fields')).includes('superseded'), 'the predecessor is superseded');
  await page.locator('[data-testid=history]').waitFor();
  const before = await page.evaluate(() => [...document.querySelectorAll('[data-testid=history] tbody tr')]
    .map((tr) => tr.children[1].textContent));
  check(JSON.stringify(before) === JSON.stringify(['supersede_memory', 'store_memory']),
    `the predecessor's history, newest first: ${JSON.stringify(before)}`);
  say('  record: fields, chain, related records and history, links followed');

  // Long content is shown whole and wraps instead of widening the page.
  await go(page, `#/record/${s.long.id}`);
  await heading(page, `Record ${s.long.short_id}`);
  check((await page.locator('[data-testid=content]').textContent()) === LONG, 'long content whole');
  const fits = await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
  check(fits, 'long content does not widen the page');
  say('  record: long content whole, wrapped');

  // Search: the expected record first, with its score.
  await go(page, '#/search');
  await heading(page, 'Search');
  await page.getByRole('searchbox', { name: 'Search' }).fill('which merge strategy does Alice like');
  await page.getByLabel('Scope').selectOption(SCOPE);
  await page.getByRole('button', { name: 'Search', exact: true }).click();
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=records] tbody tr').length > 0);
  const hits = await rowIds(page);
  check(hits[0] === s.merge.id, `search: the preference first, got ${JSON.stringify(hits)}`);
  const score = await page.evaluate(() => document.querySelector('[data-testid=records] tbody tr').cells[4].textContent);
  check(/^0\.\d{3}/.test(score), `a score is shown: ${score}`);
  await shot(page, 'search');
  await go(page, '#/search?q=how%20are%20embeddings%20computed');
  // The previous results stay until the new ones replace them: wait for the expected first.
  await page.waitForFunction((id) => document.querySelector('[data-testid=records] tbody tr')?.dataset.id === id, s.new.id)
    .catch(async () => { throw new Error(`check failed: search over all scopes: ${JSON.stringify(await rowIds(page))}`); });
  const all = await rowIds(page);
  check(!all.includes(s.old.id), `search over all scopes hides the superseded: ${JSON.stringify(all)}`);
  say('  search: expected record first, superseded one hidden');

  // Archive two records (cancel first), see them leave; restore them from the archived list.
  await go(page, scopeHash());
  await expectRows(page, live, 'live before archiving');
  await page.getByLabel(`Select ${s.wal.short_id}`).check();
  await page.getByLabel(`Select ${s.fmt.short_id}`).check();
  await page.getByRole('button', { name: 'Archive selected' }).click();
  await confirm(page, 'Archive 2 records?', 'Cancel');
  await expectRows(page, live, 'cancel changes nothing');
  await page.getByRole('button', { name: 'Archive selected' }).click();
  await confirm(page, 'Archive 2 records?', 'Archive');
  await expectRows(page, [s.long, s.new, s.merge, s.sdk].map((m) => m.id), 'archived records leave the live list');
  await go(page, scopeHash('state=archived'));
  await expectRows(page, [s.wal.id, s.fmt.id], 'the archived list');
  await page.getByLabel(`Select ${s.wal.short_id}`).check();
  await page.getByLabel(`Select ${s.fmt.short_id}`).check();
  await page.getByRole('button', { name: 'Restore selected' }).click();
  await confirm(page, 'Restore 2 records?', 'Restore');
  await expectRows(page, [], 'nothing archived after restoring');
  check((await text(page, 'main .empty')) === 'No archived records in this scope.', 'archived empty state');
  await go(page, scopeHash());
  await expectRows(page, live, 'restored records are live again');
  say('  curate: multi-select archive (cancel, confirm) and restore');

  // Archive and restore one record from its page; nothing is selected → a hint, no dialog.
  await page.getByRole('button', { name: 'Archive selected' }).click();
  check((await text(page, '#status')) === 'Select records first.', 'nothing selected');
  await go(page, `#/record/${s.merge.id}`);
  await heading(page, `Record ${s.merge.short_id}`);
  await page.getByRole('button', { name: 'Archive', exact: true }).click();
  await confirm(page, 'Archive 1 record?', 'Archive');
  await page.getByRole('button', { name: 'Restore', exact: true }).waitFor();
  check((await text(page, 'dl.fields')).includes('archived'), 'the record shows archived');
  await go(page, scopeHash());
  await expectRows(page, [s.long, s.new, s.sdk, s.wal, s.fmt].map((m) => m.id), 'one archived');
  await go(page, `#/record/${s.merge.id}`);
  await page.getByRole('button', { name: 'Restore', exact: true }).click();
  await confirm(page, 'Restore 1 record?', 'Restore');
  await page.getByRole('button', { name: 'Archive', exact: true }).waitFor();
  await go(page, scopeHash());
  await expectRows(page, live, 'all live again');
  say('  curate: one record archived and restored from its page');

  // Rules, oldest first.
  await go(page, '#/rules');
  await heading(page, 'Rules');
  const rules = await page.evaluate(() => [...document.querySelectorAll('main ol li')].map((li) => li.textContent));
  check(rules.length === 2 && rules[0].includes('Never store secrets') && rules[1].includes('Cite the file'),
    `rules oldest first: ${JSON.stringify(rules)}`);
  await shot(page, 'rules');
  say('  rules: oldest first');

  // Errors: a record that does not exist, an unreachable server.
  await go(page, '#/record/01234567-89ab-7def-8123-456789abcdef');
  await heading(page, 'Not found');
  await page.route('**/spine.v1.MemoryService/**', (r) => r.abort('connectionrefused'));
  await go(page, '#/scopes');
  await heading(page, 'Error');
  check((await text(page, 'main .error')).includes('unreachable'), 'server down is said plainly');
  await page.unroute('**/spine.v1.MemoryService/**');
  say('  errors: not found, unreachable');

  // Keyboard: the skip link is the first stop and lands on the content.
  await page.keyboard.press('Tab');
  check(await page.evaluate(() => document.activeElement?.className === 'skip'), 'skip link first');
  const unexpected = pageErrors.filter((e) => !/Failed to load resource|ERR_CONNECTION_REFUSED|404/.test(e));
  check(unexpected.length === 0, `no script errors: ${JSON.stringify(unexpected)}`);
  await context.close();
}

// ---------- OIDC: two owners ----------
async function signIn(page, email) {
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.pathname === '/authorize');
  await page.getByLabel('Email').fill(email);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('[data-testid=signed-in]').waitFor();
  check((await text(page, '[data-testid=signed-in]')) === `Signed in as ${email}`, `signed in as ${email}`);
}

async function oidc(browser) {
  const alice = await mcp(OIDC, process.env.SPINE_ALICE_TOKEN);
  const secret = await alice.call('store_memory', {
    content: 'Alice plans to migrate the billing service to Rust in the third quarter.',
    scope: 'a:project:alice', source: 'user-said', category: 'decision', tags: ['billing'],
  });
  await alice.close();

  const context = await browser.newContext({ viewport: { width: 1180, height: 760 } });
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  const bearers = new Set();
  let unauthenticatedCalls = 0;
  page.on('request', (r) => {
    if (!r.url().includes('/spine.v1.MemoryService/')) return;
    const auth = r.headers().authorization;
    if (auth) bearers.add(auth.replace(/^Bearer /, ''));
    else unauthenticatedCalls += 1;
  });

  await page.goto(`${OIDC}/console/`);
  await heading(page, 'Sign in');
  check((await text(page, 'main')).includes('Sign in to see your memory.'), 'asks to sign in');
  await shot(page, 'sign-in');
  await signIn(page, 'alice@example.com');
  await heading(page, 'Scopes');
  check((await text(page, 'main table')).includes('a:project:alice'), 'alice sees her scope');
  await shot(page, 'signed-in');
  await go(page, `#/record/${secret.id}`);
  await heading(page, `Record ${secret.short_id}`);
  check((await text(page, 'dl.fields')).includes('alice@example.com'), 'the owner is shown');
  // The token lives in memory only: no storage or cookie holds it.
  const stored = await page.evaluate(() => JSON.stringify([{ ...localStorage }, { ...sessionStorage }, document.cookie]));
  const cookies = JSON.stringify(await context.cookies());
  check(bearers.size === 1, `one bearer token used: ${bearers.size}`);
  const [aliceToken] = [...bearers];
  check(!stored.includes(aliceToken.slice(-20)) && !cookies.includes(aliceToken.slice(-20)), 'token not in storage');
  check(stored === JSON.stringify([{}, {}, '']), `storage empty after sign-in: ${stored}`);
  check(unauthenticatedCalls === 0, 'every API call carried the token');
  say('  oidc: alice signed in (code flow + PKCE), token in memory only, sent on every call');

  // A reload forgets the token.
  await page.reload();
  await heading(page, 'Sign in');
  await go(page, '#/scopes');

  // Bob: empty, cannot open Alice's record or find it; then his own record appears.
  await signIn(page, 'bob@example.com');
  await page.waitForFunction(() => document.querySelector('main .empty')?.textContent.startsWith('No records yet'))
    .catch(async () => { throw new Error(`check failed: bob's empty state, got ${await text(page, 'main')}`); });
  await go(page, `#/record/${secret.id}`);
  await heading(page, 'Not found');
  await go(page, '#/search?q=billing%20service%20migration%20to%20Rust');
  await heading(page, 'Search');
  await page.locator('main .empty').waitFor();
  check((await text(page, 'main .empty')) === 'Nothing matches this query.', 'bob finds nothing of alice');
  const bob = await mcp(OIDC, process.env.SPINE_BOB_TOKEN);
  await bob.call('store_memory', { content: 'Bob reviews pull requests before lunch.', scope: 'a:project:bob',
    source: 'user-said', category: 'preference' });
  await bob.close();
  await go(page, '#/scopes');
  await heading(page, 'Scopes');
  const scopes = await text(page, 'main table');
  check(scopes.includes('a:project:bob') && !scopes.includes('a:project:alice'), `bob's scopes: ${scopes}`);
  check(bearers.size === 2, 'bob used his own token');
  say('  oidc: bob sees his records only; alice\'s record is not found, not searchable');

  // An expired session says so and offers to sign in again.
  await page.route('**/spine.v1.MemoryService/**', (r) => r.fulfill({
    status: 401, contentType: 'application/json', body: '{"code":"unauthenticated","message":"token expired"}',
  }));
  await go(page, '#/rules');
  await page.getByRole('button', { name: 'Sign in' }).waitFor();
  check((await text(page, 'main .error')) === 'Your session expired. Sign in again.', 'expired session');
  await page.unroute('**/spine.v1.MemoryService/**');
  // Sign out forgets the token, even while the page's calls are still on their way: their
  // late answers must not draw the page over the sign-in one (they did, under load).
  let release;
  const gate = new Promise((ok) => { release = ok; });
  await page.route('**/spine.v1.MemoryService/**', async (r) => { await gate; await r.continue(); });
  await signIn(page, 'bob@example.com');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await heading(page, 'Sign in');
  const late = page.waitForResponse((r) => r.url().includes('/spine.v1.MemoryService/'));
  release();
  await late;
  await page.evaluate(() => new Promise((ok) => setTimeout(ok, 200)));
  const shown = await page.evaluate(() => document.querySelector('main h1')?.textContent);
  check(shown === 'Sign in', `a late answer drew over the sign-in page: ${shown}`);
  await page.unroute('**/spine.v1.MemoryService/**');
  say('  oidc: expired session, sign out (late answers ignored)');
  await context.close();
}

check(LOCAL && OIDC, 'SPINE_LOCAL and SPINE_OIDC are set');
const seeded = await seedLocal();
const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
try {
  say(`chromium ${browser.version()}`);
  await local(browser, seeded);
  await oidc(browser);
} finally {
  await browser.close();
}
say('console browser: all checks passed');
