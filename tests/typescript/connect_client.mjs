// End-to-end check of the Connect API (spine.v1.MemoryService) with the official TypeScript
// Connect client, `@connectrpc/connect-node`, and code generated from
// proto/spine/v1/memory.proto by protoc-gen-es through `buf generate` (scripts/test.sh runs it
// into tests/typescript/gen).
//
// Usage: node connect_client.mjs <base-url> <alice-token> <bob-token> <broken-embedder-url>
//
// <base-url> is a `spine serve --oidc-issuer …` on a fresh store; the tokens are bearer tokens
// of two owners. <broken-embedder-url> is a `spine serve` whose embedder cannot be reached.
// Alice writes records over MCP (the TypeScript MCP SDK); then, with the JSON codec and with the
// binary protobuf codec, every method is called as Alice, Bob is checked to see none of her
// private records, and every error code the API returns is provoked.

import { Code, ConnectError, createClient } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { ErrorInfoSchema, MemoryService } from './gen/spine/v1/memory_pb.js';

const [base, aliceToken, bobToken, brokenBase] = process.argv.slice(2);
if (!brokenBase) {
  process.stderr.write('usage: node connect_client.mjs <base-url> <alice-token> <bob-token> <broken-embedder-url>\n');
  process.exit(2);
}

const SCOPE = 'acme:project:connect';
const RULES = 'rule:repo:connect';

function say(line) {
  process.stdout.write(`${line}\n`);
}

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

// Alice's records, written through MCP as an agent would.
async function seed() {
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${aliceToken}` } },
  });
  const mcp = new Client({ name: 'spine-connect-test', version: '1.0.0' });
  await mcp.connect(transport);
  const call = async (name, args) => {
    const r = await mcp.callTool({ name, arguments: args });
    check(!r.isError, `${name} succeeded: ${JSON.stringify(r.content)}`);
    return r.structuredContent;
  };
  const record = (content, extra = {}) => ({ content, scope: SCOPE, source: 'user-said', category: 'decision', ...extra });
  const tls = await call('store_memory', record('Use rustls for every TLS connection; never link OpenSSL.', { tags: ['tls', 'security'] }));
  const payroll = await call('store_memory', record('Payroll exports are encrypted with the finance team key.', { tags: ['security'] }));
  const deploys = await call('store_memory', record('Deploys run on Tuesdays.'));
  const deploysNow = await call('supersede_memory', { ...record('Deploys run on Tuesdays and Thursdays.'), supersedes: [deploys.id] });
  await call('set_visibility', { id: tls.id, shared: true });
  await call('store_rule', { content: 'Never force-push main.', scope: RULES, summary: 'No force-push to main' });
  await mcp.close();
  return { tls: tls.id, payroll: payroll.id, deploys: deploys.id, deploysNow: deploysNow.id };
}

function client(token, useBinaryFormat, { baseUrl = base, headers = {} } = {}) {
  const transport = createConnectTransport({
    baseUrl,
    httpVersion: '1.1',
    useBinaryFormat,
    interceptors: [
      (next) => async (req) => {
        if (token) req.header.set('authorization', `Bearer ${token}`);
        for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
        return next(req);
      },
    ],
  });
  return createClient(MemoryService, transport);
}

// The call must fail with `code`; returns the error.
async function fails(promise, code, what) {
  try {
    await promise;
  } catch (e) {
    check(e instanceof ConnectError, `${what}: a ConnectError, got ${e}`);
    check(e.code === code, `${what}: code ${Code[code]}, got ${Code[e.code]} (${e.rawMessage})`);
    return e;
  }
  throw new Error(`check failed: ${what}: the call succeeded`);
}

async function asAlice(label, alice, ids) {
  const found = await alice.searchMemories({ query: 'which TLS library do we use', scope: SCOPE, k: 2n });
  check(found.memories[0]?.id === ids.tls, `${label}: search finds the TLS decision first: ${found.memories.map((m) => m.content)}`);
  const first = found.memories[0];
  check(first.shortId.length > 0 && first.owner === undefined, `${label}: compact records carry short_id, not the full fields`);
  const full = await alice.searchMemories({ query: 'which TLS library do we use', scope: SCOPE, k: 1n, full: true });
  check(full.memories[0]?.schemaVersion >= 1 && full.memories[0].owner === 'alice@example.com', `${label}: full records carry schema_version and owner`);
  check(typeof first.score === 'number' && first.score > 0, `${label}: search results carry a score`);
  const everywhere = await alice.searchMemories({ query: 'which TLS library do we use', crossSpine: true });
  check(everywhere.coverage?.searchedScopes.includes(SCOPE), `${label}: a cross-spine search reports its coverage`);

  const listed = await alice.listMemories({ scope: SCOPE });
  check(listed.memories.length === 3, `${label}: the superseded record is gated out of the list: ${listed.memories.length}`);
  check(listed.recallGateHidden?.superseded === 1n, `${label}: the gate reports one superseded record`);
  check(listed.memories[0].id === ids.deploysNow, `${label}: most recent first`);
  const page = await alice.listMemories({ scope: SCOPE, limit: 2n });
  check(page.memories.length === 2 && page.nextCursor !== '', `${label}: a page of 2 with a cursor`);
  const rest = await alice.listMemories({ scope: SCOPE, limit: 2n, cursor: page.nextCursor });
  check(rest.memories.length === 1 && rest.nextCursor === '', `${label}: the cursor reaches the last record`);
  const tagged = await alice.listMemories({ scope: SCOPE, tags: ['tls'] });
  check(tagged.memories.length === 1 && tagged.memories[0].id === ids.tls, `${label}: tag filter`);

  const got = await alice.getMemory({ id: first.shortId });
  check(got.memory?.id === ids.tls && got.memory.content.includes('rustls'), `${label}: get by short_id`);
  check(got.memory.owner === 'alice@example.com' && got.memory.visibility === 'shared', `${label}: owner and visibility`);
  const old = await alice.getMemory({ id: ids.deploys });
  check(old.memory?.supersededBy === ids.deploysNow && old.memory.states.includes('superseded'), `${label}: state markers on a superseded record`);

  const archived = await alice.archiveMemory({ ids: [ids.payroll, 'nope-nope-1', ids.payroll] });
  const outcomes = archived.results.map((r) => `${r.input}:${r.outcome}`);
  check(outcomes[0] === `${ids.payroll}:archived` && outcomes[1] === 'nope-nope-1:not_found' && outcomes.length === 3, `${label}: batch outcomes in input order: ${outcomes}`);
  const live = await alice.listMemories({ scope: SCOPE });
  check(!live.memories.some((m) => m.id === ids.payroll), `${label}: an archived record leaves the live list`);
  const restored = await alice.restoreMemory({ ids: [ids.payroll] });
  check(restored.results[0].outcome === 'restored', `${label}: restored: ${restored.results[0].outcome}`);
  const back = await alice.listMemories({ scope: SCOPE });
  check(back.memories.some((m) => m.id === ids.payroll), `${label}: a restored record is back`);

  const scopes = await alice.listScopes({});
  const count = scopes.scopes.find((s) => s.scope === SCOPE);
  check(count?.records === 3n, `${label}: ListScopes counts the scope's live records: ${JSON.stringify(scopes.scopes, (_, v) => (typeof v === 'bigint' ? `${v}` : v))}`);
  const tags = await alice.listTags({ scope: SCOPE });
  check(tags.tags[0]?.tag === 'security' && tags.tags[0].count === 2n, `${label}: ListTags, most used first`);
  const related = await alice.relatedMemories({ id: ids.deploysNow });
  check(related.anchor?.id === ids.deploysNow, `${label}: RelatedMemories anchor`);
  const chain = related.related.find((r) => r.memory?.id === ids.deploys);
  check(chain?.edges.some((e) => e.type === 'supersession'), `${label}: the supersession chain is related: ${related.related.map((r) => r.edges.map((e) => e.type))}`);
  const history = await alice.getMemoryHistory({ id: ids.deploys });
  check(JSON.stringify(history.events.map((e) => e.action)) === JSON.stringify(['supersede_memory', 'store_memory']),
    `${label}: GetMemoryHistory, newest first: ${history.events.map((e) => e.action)}`);
  check(history.id === ids.deploys && history.events.every((e) => e.outcome === 'ok' && e.actor === 'alice@example.com'),
    `${label}: the history names the record and its actor`);
  const rules = await alice.listRules({ scopes: [RULES] });
  check(rules.rules.length === 1 && rules.rules[0].summary === 'No force-push to main', `${label}: ListRules`);

  // Errors: invalid_argument with Spine's field and hint, not_found.
  let e = await fails(alice.searchMemories({ query: 'tls', scope: SCOPE, k: 1001n }), Code.InvalidArgument, `${label}: k=1001`);
  check(e.rawMessage.includes('field: k'), `${label}: the message names the field: ${e.rawMessage}`);
  let [info] = e.findDetails(ErrorInfoSchema);
  check(info?.field === 'k' && info.hint === 'out_of_range', `${label}: k=1001's field and hint as a spine.v1.ErrorInfo detail: ${JSON.stringify(info)}`);
  e = await fails(alice.getMemory({ id: 'not an id' }), Code.InvalidArgument, `${label}: malformed id`);
  check(e.rawMessage.includes('hint: malformed_id'), `${label}: the message carries the hint: ${e.rawMessage}`);
  [info] = e.findDetails(ErrorInfoSchema);
  check(info?.field === 'id' && info.hint === 'malformed_id', `${label}: the malformed id's ErrorInfo detail: ${JSON.stringify(info)}`);
  await fails(alice.listMemories({ scope: 'no-colons' }), Code.InvalidArgument, `${label}: a malformed scope`);
  await fails(alice.getMemory({ id: '0190f5a0-0000-7000-8000-000000000001' }), Code.NotFound, `${label}: an unknown id`);
  await fails(alice.relatedMemories({ id: '0190f5a0-0000-7000-8000-000000000001' }), Code.NotFound, `${label}: related of an unknown id`);
}

async function asBob(label, bob, ids) {
  const theirs = await bob.getMemory({ id: ids.tls });
  check(theirs.memory?.id === ids.tls, `${label}: Bob reads Alice's shared record`);
  await fails(bob.getMemory({ id: ids.payroll }), Code.NotFound, `${label}: Alice's private record looks missing to Bob`);
  const found = await bob.searchMemories({ query: 'payroll exports encryption key', crossSpine: true });
  check(!found.memories.some((m) => m.id === ids.payroll), `${label}: search never shows Bob Alice's private record`);
  const listed = await bob.listMemories({ scope: SCOPE });
  const seen = listed.memories.map((m) => m.id);
  check(seen.includes(ids.tls) && !seen.includes(ids.payroll) && !seen.includes(ids.deploysNow), `${label}: Bob lists only the shared record: ${seen}`);
  const archived = await bob.archiveMemory({ ids: [ids.payroll, ids.tls] });
  check(archived.results.every((r) => r.outcome === 'not_found'), `${label}: Bob archives nothing of Alice's: ${archived.results.map((r) => r.outcome)}`);
  await fails(bob.relatedMemories({ id: ids.payroll }), Code.NotFound, `${label}: related of a private record`);
  await fails(bob.getMemoryHistory({ id: ids.payroll }), Code.NotFound, `${label}: the history of a private record looks missing`);
  const tags = await bob.listTags({ scope: SCOPE });
  check(tags.tags.every((t) => t.count === 1n), `${label}: tag counts cover only what Bob can read`);
}

async function refusals(label, useBinaryFormat) {
  await fails(client(undefined, useBinaryFormat).listScopes({}), Code.Unauthenticated, `${label}: no token`);
  await fails(client('not-a-token', useBinaryFormat).listScopes({}), Code.Unauthenticated, `${label}: a bogus token`);
  await fails(
    client(aliceToken, useBinaryFormat, { headers: { origin: 'https://evil.example' } }).listScopes({}),
    Code.PermissionDenied,
    `${label}: another site's Origin`,
  );
  const broken = client(undefined, useBinaryFormat, { baseUrl: brokenBase });
  await fails(broken.searchMemories({ query: 'anything at all', scope: SCOPE }), Code.Unavailable, `${label}: the embedder is down`);
  const empty = await broken.listMemories({ scope: SCOPE });
  check(empty.memories.length === 0, `${label}: calls that embed nothing still work while the embedder is down`);
}

async function main() {
  const ids = await seed();
  for (const [label, binary] of [['json', false], ['proto', true]]) {
    await asAlice(label, client(aliceToken, binary), ids);
    await asBob(label, client(bobToken, binary), ids);
    await refusals(label, binary);
    say(`[${label}] ok: nine methods, owner isolation, invalid_argument, not_found, unauthenticated, permission_denied, unavailable`);
  }
  // A malformed body is a Connect error, never a 5xx.
  const r = await fetch(`${base}/spine.v1.MemoryService/ListMemories`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${aliceToken}` },
    body: '{not json',
  });
  const body = await r.json();
  check(r.status === 400 && body.code === 'invalid_argument', `a malformed body: ${r.status} ${JSON.stringify(body)}`);
  say('connect client: all checks passed');
}

main().catch((e) => {
  process.stderr.write(`${e.stack ?? e}\n`);
  process.exit(1);
});
