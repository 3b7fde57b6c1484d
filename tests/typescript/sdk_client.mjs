// End-to-end check with the official TypeScript MCP SDK, the SDK most MCP clients and editors
// are built on. Unlike the Python SDK it validates every `structuredContent` against the tool's
// `outputSchema`, so it is the client that catches a schema a result does not match.
//
// Usage: node sdk_client.mjs path/to/spine
//
// Starts `spine mcp` (stdio) and `spine serve` (streamable HTTP) on fresh data directories and
// for each: lists the tools, compiles every schema with a strict JSON Schema 2020-12 validator,
// calls all 19 tools with valid arguments (each success must validate against its
// outputSchema) and with invalid ones (each must arrive as `isError: true` with the readable
// `{"error": {code, field, hint, message}}` envelope, never as an exception in the client).
// Over HTTP it also ends the session with DELETE and checks the old session id gets 404.
// Finally one call goes through the MCP Inspector's CLI. Nothing may be printed about schemas.

import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual, promisify } from 'node:util';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const here = path.dirname(fileURLToPath(import.meta.url));

// Everything the SDK or a validator prints goes through console.warn / console.error: record
// it, so the run can fail on any schema complaint ("unknown format \"uint64\" ignored…").
const printed = [];
for (const level of ['warn', 'error']) {
  const original = console[level].bind(console);
  console[level] = (...args) => {
    printed.push(args.map(String).join(' '));
    original(...args);
  };
}

function say(line) {
  process.stdout.write(`${line}\n`);
}

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

// SPEC "Tool annotations": readOnly, destructive, idempotent, openWorld.
const ANNOTATIONS = {
  store_memory: [false, false, false, false],
  schedule_memory: [false, false, false, false],
  search_memory: [true, false, true, false],
  list_memory: [true, false, true, false],
  list_scheduled: [true, false, true, false],
  get_memory: [true, false, true, false],
  update_memory: [false, true, true, false],
  delete_memory: [false, true, true, false],
  delete_all: [false, true, true, false],
  set_visibility: [false, false, true, false],
  list_tags: [true, false, true, false],
  supersede_memory: [false, false, true, false],
  archive_memory: [false, false, true, false],
  restore_memory: [false, false, true, false],
  related_memories: [true, false, true, false],
  store_discovery: [false, false, false, false],
  search_discovery: [true, false, true, false],
  store_rule: [false, false, false, false],
  list_rules: [true, false, true, false],
};

// The formats JSON Schema 2020-12 defines; anything else makes strict validators complain.
const STANDARD_FORMATS = new Set([
  'date-time', 'date', 'time', 'duration', 'email', 'idn-email', 'hostname', 'idn-hostname',
  'ipv4', 'ipv6', 'uri', 'uri-reference', 'iri', 'iri-reference', 'uuid', 'uri-template',
  'json-pointer', 'relative-json-pointer', 'regex',
]);

function formatsIn(schema, at, out) {
  if (Array.isArray(schema)) {
    schema.forEach((s, i) => formatsIn(s, `${at}/${i}`, out));
  } else if (schema && typeof schema === 'object') {
    for (const [k, v] of Object.entries(schema)) {
      if (k === 'format' && typeof v === 'string') out.push([`${at}/format`, v]);
      else formatsIn(v, `${at}/${k}`, out);
    }
  }
  return out;
}

/** Lists the tools, checks them, and compiles each schema with a strict 2020-12 validator. */
async function strictSchemas(client, label) {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  check(isDeepStrictEqual(names, Object.keys(ANNOTATIONS).sort()), `${label}: the 19 SPEC tools, got ${names}`);
  const ajv = new Ajv2020({ strict: true, allowUnionTypes: true, allErrors: true, logger: console });
  addFormats(ajv);
  const validators = {};
  for (const tool of tools) {
    const a = tool.annotations ?? {};
    const got = [a.readOnlyHint, a.destructiveHint, a.idempotentHint, a.openWorldHint];
    check(isDeepStrictEqual(got, ANNOTATIONS[tool.name]), `${label}: ${tool.name} annotations ${got}`);
    check(tool.outputSchema, `${label}: ${tool.name} has an outputSchema`);
    for (const [which, schema] of [['inputSchema', tool.inputSchema], ['outputSchema', tool.outputSchema]]) {
      for (const [where, format] of formatsIn(schema, '#', [])) {
        check(STANDARD_FORMATS.has(format), `${label}: ${tool.name} ${which} ${where} has non-standard format ${format}`);
      }
      let validate;
      try {
        validate = ajv.compile(schema);
      } catch (e) {
        throw new Error(`${label}: ${tool.name} ${which} does not compile strictly: ${e.message}`);
      }
      if (which === 'outputSchema') validators[tool.name] = validate;
    }
  }
  return validators;
}

/** One client session's worth of calls: every tool, valid and invalid. */
async function exercise(client, label) {
  const validators = await strictSchemas(client, label);
  const succeeded = new Set();
  const rejected = new Set();

  async function ok(name, args) {
    // The SDK itself validates structuredContent against the outputSchema and throws if not.
    const r = await client.callTool({ name, arguments: args });
    check(!r.isError, `${label}: ${name} succeeded: ${JSON.stringify(r.content)}`);
    check(r.structuredContent && typeof r.structuredContent === 'object', `${label}: ${name} has structuredContent`);
    check(isDeepStrictEqual(JSON.parse(r.content[0].text), r.structuredContent), `${label}: ${name} text block = structuredContent`);
    const validate = validators[name];
    check(validate(r.structuredContent), `${label}: ${name} result matches its outputSchema: ${JSON.stringify(validate.errors)}`);
    succeeded.add(name);
    return r.structuredContent;
  }

  async function fails(name, args, expect) {
    // Must not throw: a rejected call is a result the agent reads, not a client exception.
    const r = await client.callTool({ name, arguments: args });
    check(r.isError === true, `${label}: ${name} ${JSON.stringify(args).slice(0, 80)} is rejected`);
    check(r.structuredContent === undefined, `${label}: ${name} error carries no structuredContent`);
    check(r.content.length === 1 && r.content[0].type === 'text', `${label}: ${name} error is one text block`);
    const envelope = JSON.parse(r.content[0].text);
    const e = envelope.error;
    check(e && typeof e.message === 'string' && e.message.length > 0, `${label}: ${name} envelope ${r.content[0].text}`);
    for (const key of Object.keys(expect)) {
      check(e[key] === expect[key], `${label}: ${name} ${key} = ${expect[key]}, got ${JSON.stringify(e)}`);
    }
    rejected.add(name);
    return e;
  }

  const scope = 'ts:project:spine';
  const stored = await ok('store_memory', {
    content: 'The TypeScript SDK validates structured results against each tool output schema.',
    scope, source: 'agent-inferred', category: 'gotcha', tags: ['mcp', 'schemas'],
    citations: [{ kind: 'url', ref: 'https://modelcontextprotocol.io/specification' }],
  });
  await fails('store_memory', { content: 'c', scope, source: 'user-said' }, { code: 'invalid_argument', field: 'category', hint: 'required' });

  const found = await ok('search_memory', { query: 'which client validates tool output schemas?', scope, k: 1 });
  check(found.memories[0].id === stored.id, `${label}: search finds the stored memory`);
  await ok('search_memory', { query: 'output schemas', cross_spine: true, full: true });
  // The call the issue reported: an empty query used to throw inside the SDK.
  await fails('search_memory', { query: '', scope }, { code: 'invalid_argument', field: 'query' });
  await fails('search_memory', { query: 'q', scope, k: 1001 }, { code: 'invalid_argument', field: 'k', hint: 'out_of_range' });
  await fails('search_memory', { query: 'q', scope, k: 'ten' }, { code: 'invalid_argument', field: 'k', hint: 'invalid_type' });

  await ok('list_memory', { scope });
  await ok('list_memory', { cross_spine: true, full: true, limit: 1 });
  await fails('list_memory', { scope, limt: 5 }, { code: 'invalid_argument', field: 'limt', hint: 'unknown_field' });

  const scheduled = await ok('schedule_memory', {
    content: 'Code freeze for the release.', scope, source: 'user-said', category: 'decision',
    not_before: '2999-01-01T00:00:00Z',
  });
  await fails('schedule_memory', { content: 'x', scope, source: 'user-said', category: 'decision' }, { code: 'invalid_argument', field: 'not_before', hint: 'required' });
  await fails('schedule_memory', { content: 'x', scope, source: 'user-said', category: 'decision', not_before: '2999-01-01T00:00:00Z', not_after: '2999-01-01T00:00:00Z' }, { code: 'invalid_argument', hint: 'empty_window' });
  const pending = await ok('list_scheduled', { scope });
  check(pending.memories[0].id === scheduled.id, `${label}: list_scheduled shows the scheduled memory`);
  await fails('list_scheduled', { scope, state: 'someday' }, { code: 'invalid_argument', field: 'state', hint: 'invalid_value' });

  const got = await ok('get_memory', { id: stored.short_id.toLowerCase() });
  check(got.access_count === 1, `${label}: get_memory touches`);
  await ok('get_memory', { id: scheduled.id });
  await fails('get_memory', { id: '0000000000' }, { code: 'not_found', field: 'id' });

  await ok('list_tags', {});
  await ok('list_tags', { scope, limit: 1 });
  await fails('list_tags', { limit: 1001 }, { code: 'invalid_argument', field: 'limit', hint: 'out_of_range' });

  await ok('update_memory', { id: stored.id, content: 'The TypeScript SDK validates every structuredContent it receives.', tags: ['mcp'] });
  await fails('update_memory', { id: '0000000000', content: 'x' }, { code: 'not_found', field: 'id' });

  await ok('set_visibility', { id: stored.id, shared: true });
  await fails('set_visibility', { id: stored.id }, { code: 'invalid_argument', field: 'shared', hint: 'required' });

  const old = await ok('store_memory', { content: 'Releases are cut from develop.', scope, source: 'user-said', category: 'convention' });
  const fixArgs = { content: 'Releases are cut from main.', scope, source: 'user-said', category: 'convention', supersedes: [old.short_id] };
  const validated = await ok('supersede_memory', { ...fixArgs, validate_only: true });
  check(validated.validated === true, `${label}: validate_only validates`);
  const fix = await ok('supersede_memory', { ...fixArgs, idempotency_key: 'release-branch' });
  await fails('supersede_memory', fixArgs, { code: 'failed_precondition', hint: 'already_superseded' });

  const related = await ok('related_memories', { id: fix.short_id, full: true });
  check(related.related.some((r) => r.memory.id === old.id), `${label}: the predecessor is related`);
  await fails('related_memories', { id: fix.id, k: 1001 }, { code: 'invalid_argument', field: 'k', hint: 'out_of_range' });
  await fails('related_memories', { id: '0000000000' }, { code: 'not_found' });

  const archived = await ok('archive_memory', { ids: [fix.id, '0000000000'] });
  check(archived.results[1].outcome === 'not_found', `${label}: per-id not_found`);
  await fails('archive_memory', { ids: [] }, { code: 'invalid_argument', field: 'ids', hint: 'required' });
  await ok('restore_memory', { ids: [fix.short_id, fix.id] });
  await fails('restore_memory', { ids: Array(1001).fill(fix.id) }, { code: 'invalid_argument', field: 'ids' });

  const discovery = await ok('store_discovery', {
    content: 'The HTTP router is assembled in crates/spine-server/src/http.rs.', kind: 'fact',
    scope: 'discovery:repo:spine', citations: [{ kind: 'file', ref: 'crates/spine-server/src/http.rs', locator: 'L1-40', pin: 'abc123' }],
  });
  await fails('store_discovery', { content: 'x', kind: 'fact', scope: 'discovery:repo:spine', citations: [] }, { code: 'invalid_argument', field: 'citations', hint: 'required' });
  const discovered = await ok('search_discovery', { query: 'where is the web router built', scope: 'discovery:repo:spine' });
  check(discovered.discoveries[0].id === discovery.id, `${label}: search_discovery finds it`);
  await ok('search_discovery', { query: 'router', cross_spine: true, kind: 'fact', k: 0 });
  await fails('search_discovery', { query: 'router', scope: 'discovery:repo:spine', kind: 'essay' }, { code: 'invalid_argument', field: 'kind', hint: 'invalid_value' });

  const rule = await ok('store_rule', { content: 'Every public function has a doc comment.', scope: 'rule:repo:spine', summary: 'Document every public function.' });
  await fails('store_rule', { content: 'x', scope: 'rule:repo:spine', summary: 'two\nlines' }, { code: 'invalid_argument', field: 'summary', hint: 'multi_line' });
  const rules = await ok('list_rules', { scopes: ['rule:repo:spine'] });
  check(rules.rules[0].short_id === rule.short_id, `${label}: list_rules lists the rule`);
  await ok('list_rules', { full: true });
  await fails('list_rules', { scopes: 'rule:repo:spine' }, { code: 'invalid_argument', field: 'scopes', hint: 'invalid_type' });
  await fails('set_visibility', { id: rule.id, shared: false }, { code: 'failed_precondition' });

  await ok('delete_memory', { id: rule.id });
  await fails('delete_memory', { id: rule.id }, { code: 'not_found', field: 'id' });
  await ok('delete_memory', { id: discovery.short_id });
  const cleared = await ok('delete_all', { scope });
  check(cleared.deleted >= 4, `${label}: delete_all cleared the scope: ${JSON.stringify(cleared)}`);
  await fails('delete_all', {}, { code: 'invalid_argument', field: 'scope', hint: 'required' });

  const all = Object.keys(ANNOTATIONS);
  check(all.every((t) => succeeded.has(t)), `${label}: a valid call of every tool, missing ${all.filter((t) => !succeeded.has(t))}`);
  check(all.every((t) => rejected.has(t)), `${label}: an invalid call of every tool, missing ${all.filter((t) => !rejected.has(t))}`);
  say(`[${label}] ok: ${all.length} tools, strict schemas, ${succeeded.size} tools succeeded and validated, ${rejected.size} rejected with the envelope`);
}

function tempDir() {
  return mkdtempSync(path.join(os.tmpdir(), 'spine-ts-'));
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

async function stdio(spine) {
  const dir = tempDir();
  try {
    const transport = new StdioClientTransport({ command: spine, args: ['mcp', '--data-dir', dir], stderr: 'ignore' });
    const client = new Client({ name: 'spine-ts-test', version: '1.0.0' });
    await client.connect(transport);
    check(client.getServerVersion()?.name === 'spine', 'stdio: the server is spine');
    await exercise(client, 'stdio');
    await client.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function startServe(spine, dir) {
  const port = await freePort();
  const child = spawn(spine, ['serve', '--data-dir', dir, '--listen', `127.0.0.1:${port}`], { stdio: ['ignore', 'ignore', 'ignore'] });
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30000;
  for (;;) {
    try {
      const r = await fetch(`${base}/healthz`);
      if (r.ok) break;
    } catch {
      // not listening yet
    }
    check(child.exitCode === null, 'spine serve is running');
    check(Date.now() < deadline, 'spine serve became healthy');
    await new Promise((r) => setTimeout(r, 50));
  }
  return { child, base };
}

async function http(spine) {
  const dir = tempDir();
  const { child, base } = await startServe(spine, dir);
  try {
    const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`));
    const client = new Client({ name: 'spine-ts-test', version: '1.0.0' });
    await client.connect(transport);
    await exercise(client, 'http');

    // Session lifetime (MCP streamable HTTP, session management): DELETE ends the session,
    // and a request carrying the ended session's id gets 404 so the client re-initializes.
    const sessionId = transport.sessionId;
    check(typeof sessionId === 'string' && sessionId.length > 0, 'http: the server issued a session id');
    await transport.terminateSession();
    const r = await fetch(`${base}/mcp`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-session-id': sessionId,
        'mcp-protocol-version': transport.protocolVersion ?? '2025-11-25',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list', params: {} }),
    });
    check(r.status === 404, `http: a request on a deleted session gets 404, got ${r.status}`);
    await client.close();

    // A fresh client after that works: what an SDK does on 404.
    const again = new Client({ name: 'spine-ts-test', version: '1.0.0' });
    await again.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
    const { tools } = await again.listTools();
    check(tools.length === 19, 'http: a new session after DELETE');
    await again.close();
    say('[http] ok: DELETE ends the session, its id then gets 404, a new session works');
  } finally {
    child.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  }
}

/** One call through the MCP Inspector's CLI mode over stdio. */
async function inspector(spine) {
  const dir = tempDir();
  try {
    // `mcp-inspector --cli <command> …`, the Inspector's documented CLI mode. It prints a
    // deprecation banner for v1 before the JSON (v2 needs Node 22; this machine has Node 20).
    const cli = path.join(here, 'node_modules/@modelcontextprotocol/inspector/cli/build/cli.js');
    const exec = promisify(execFile);
    const run = async (file, args, opts) => {
      const out = await exec(file, args, opts);
      return { stdout: out.stdout.slice(out.stdout.indexOf('\n{') + 1) };
    };
    const stored = await run(process.execPath, [
      cli, '--cli', spine, 'mcp', '--data-dir', dir, '--method', 'tools/call', '--tool-name', 'store_memory',
      '--tool-arg', 'content=Stored through the MCP Inspector CLI.', '--tool-arg', 'scope=inspector:project:spine',
      '--tool-arg', 'source=user-said', '--tool-arg', 'category=convention',
    ], { timeout: 60000 });
    const result = JSON.parse(stored.stdout);
    check(!result.isError && result.structuredContent?.short_id, `inspector: store_memory ${stored.stdout}`);
    const listed = await run(process.execPath, [cli, '--cli', spine, 'mcp', '--data-dir', dir, '--method', 'tools/list'], { timeout: 60000 });
    check(JSON.parse(listed.stdout).tools.length === 19, 'inspector: tools/list');
    say('[inspector] ok: tools/list and store_memory through the MCP Inspector CLI');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const spine = path.resolve(process.argv[2] ?? '');
check(process.argv[2], 'usage: node sdk_client.mjs path/to/spine');
await stdio(spine);
await http(spine);
await inspector(spine);
check(printed.length === 0, `nothing printed by the SDK or validators, got:\n${printed.join('\n')}`);
say('typescript sdk: all checks passed');
