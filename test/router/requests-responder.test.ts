import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { loadRouterConfig } from '../../src/config/router-config.js';
import { startEngineSim, type EngineSim } from '../../src/engine-sim/engine-sim.js';
import { startRouter, type RouterHandle } from '../../src/router/router.js';
import { MAX_LOOKUP_REQUEST_BYTES } from '../../src/router/requests-responder.js';
import { requestsSubject } from '../../src/schema/subjects.js';
import type { Bus } from '../../src/streams/bus.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { connectNatsBus } from '../../src/streams/nats-bus.js';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { writeTestPolicy } from '../support/policy.js';

const KEY = 'responder-unit-key-0123';
const CANARY = 'prompt-canary-51c9e2 tell nobody';
const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);
const problem = (status: number, slug: string, title: string, code: string) =>
  JSON.stringify({ type: `urn:svc-serving:problem:${slug}`, title, status, code });
const NOT_FOUND = problem(404, 'not-found', 'Not found', 'not_found');
type Lookup = 'get' | 'session' | 'active';

/**
 * Every refused payload, and the member its problem names in `invalid_params` (`payload`: the
 * payload as a whole, or a member that is not the lookup's, whose name is never echoed).
 */
const REFUSED: readonly [Lookup, string | Uint8Array, string][] = [
  ['get', '', 'payload'],
  ['get', 'not json', 'payload'],
  ['get', '[]', 'payload'],
  ['get', 'null', 'payload'],
  ['get', '{}', 'id'],
  ['get', '{"id":1}', 'id'],
  ['get', '{"id":null}', 'id'],
  ['get', '{"id":"a b"}', 'id'],
  ['get', '{"id":"ok","extra":1}', 'payload'],
  ['get', '{"id":"x","id":"y"}', 'payload'],
  ['get', '{"Id":"x"}', 'payload'],
  ['get', `{"id":"${'a'.repeat(129)}"}`, 'id'],
  ['get', `{"id":"a"}${' '.repeat(MAX_LOOKUP_REQUEST_BYTES)}`, 'payload'],
  ['get', new Uint8Array([0xff, 0xfe]), 'payload'],
  ['get', '{"__proto__":{"id":"x"}}', 'payload'],
  ['session', '{}', 'payload'],
  ['session', '{"session_id":"a","task_id":"b"}', 'task_id'],
  ['session', '{"session_id":""}', 'session_id'],
  ['session', '{"session_id":"has space"}', 'session_id'],
  ['session', '{"task_id":"has space"}', 'task_id'],
  ['session', '{"workbench_run_id":7}', 'workbench_run_id'],
  ['session', '{"session":"a"}', 'payload'],
  ['session', '{"session_id":["a"]}', 'session_id'],
  ['session', '{"history":1,"session_id":"a"}', 'payload'],
  ['active', '{"active":1}', 'payload'],
  ['active', '[]', 'payload'],
  ['active', 'x', 'payload'],
];

/** The refused payload's reply is the 400 problem naming `name` with a fixed reason that echoes nothing of the payload. */
function assertNamedRefusal(text: string, payload: string | Uint8Array, name: string, what: string): void {
  const p = JSON.parse(text) as Record<string, unknown>;
  assert.deepEqual(Object.keys(p), ['type', 'title', 'status', 'code', 'invalid_params'], what);
  assert.equal(p['type'], 'urn:svc-serving:problem:invalid-input', what);
  assert.equal(p['status'], 400, what);
  assert.equal(p['code'], 'invalid_input', what);
  const params = p['invalid_params'] as { name: string; reason: string }[];
  assert.equal(params.length, 1, what);
  assert.deepEqual(Object.keys(params[0]!), ['name', 'reason'], what);
  assert.equal(params[0]!.name, name, what);
  assert.ok(params[0]!.reason.length > 0, what);
  // Nothing the caller sent comes back: no value, no member name that is not the lookup's.
  if (typeof payload !== 'string') return;
  const ours = ['id', 'session_id', 'task_id', 'workbench_run_id'];
  const sent = [...payload.matchAll(/"([^"]*)"/g)].map((m) => m[1]!).filter((v) => !ours.includes(v));
  if (!payload.startsWith('{') && payload !== '') sent.push(payload);
  for (const v of sent) {
    assert.ok(!text.includes(JSON.stringify(v)), `${what}: ${v}`);
    if (v.length >= 3 && !ours.some((o) => o.includes(v))) assert.ok(!text.includes(v), `${what}: ${v}`);
  }
}

describe('router request lookups over the bus (svc.v1.<host>.requests.*)', () => {
  const p = writeTestPolicy();
  const bus = new InProcessBus();
  let sim: EngineSim;
  let router: RouterHandle;
  const wire: string[] = [];
  const ask = async (lookup: 'get' | 'session' | 'active', payload: string | Uint8Array): Promise<string> => {
    const text = dec(
      await bus.request(requestsSubject('node-a', lookup), typeof payload === 'string' ? enc(payload) : payload, {
        timeoutMs: 2000,
      }),
    );
    wire.push(text);
    return text;
  };
  const http = async (path: string, token = KEY): Promise<{ status: number; text: string }> => {
    const res = await fetch(`${router.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
    return { status: res.status, text: await res.text() };
  };
  const chat = async (headers: Record<string, string>): Promise<string> => {
    const res = await fetch(`${router.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: CANARY }] }),
    });
    assert.equal(res.status, 200);
    await res.text();
    return res.headers.get('x-svc-request-id')!;
  };
  let gid1: string;
  let gid2: string;

  before(async () => {
    sim = await startEngineSim({
      host: '127.0.0.1',
      port: 0,
      logger: pino({ level: 'silent' }),
      ttftMs: 0,
      tokenDelayMs: 0,
      tokens: 3,
      model: 'sim',
      maxModelLen: 8192,
    });
    const path = join(p.dir, 'router.toml');
    writeFileSync(
      path,
      [
        '[server]',
        'host_id = "node-a"',
        'listen = "127.0.0.1:0"',
        'api_keys_env = "UNIT_KEYS"',
        `authorization_policy = "${p.path}"`,
        '',
        '[[models]]',
        'alias = "m"',
        `upstream = "${sim.url}/v1"`,
        'upstream_model = "sim"',
      ].join('\n'),
    );
    router = await startRouter(loadRouterConfig(path), {
      logger: pino({ level: 'silent' }),
      env: { ...p.env, UNIT_KEYS: KEY },
      bus,
    });
    gid1 = await chat({ 'x-svc-session-id': 'sess-1', 'x-svc-task-id': 'task-7' });
    gid2 = await chat({
      'x-svc-session-id': 'sess-1',
      'x-svc-workbench-run-id': 'run-3',
      'x-request-id': 'caller-id-9',
    });
  });
  after(async () => {
    await router?.close();
    await sim?.close();
    await bus.close();
  });

  it('answers each lookup with exactly the bytes the HTTP lookup answers', async () => {
    const pairs: [Promise<string>, string][] = [
      [ask('get', JSON.stringify({ id: gid1 })), `/v1/requests/${gid1}`],
      [ask('get', '{"id":"caller-id-9"}'), '/v1/requests/caller-id-9'],
      [ask('session', '{"session_id":"sess-1"}'), '/v1/requests?session_id=sess-1&history=1'],
      [ask('session', '{"task_id":"task-7"}'), '/v1/requests?task_id=task-7&history=1'],
      [ask('session', '{"workbench_run_id":"run-3"}'), '/v1/requests?workbench_run_id=run-3&history=1'],
      [ask('active', '{}'), '/v1/requests?active=1'],
      [ask('active', ''), '/v1/requests?active=1'],
    ];
    for (const [nats, path] of pairs) {
      const h = await http(path);
      assert.equal(h.status, 200, path);
      assert.equal(await nats, h.text, path);
    }
    const session = JSON.parse(await ask('session', '{"session_id":"sess-1"}')) as {
      requests: { request_id: string }[];
    };
    assert.deepEqual(
      session.requests.map((r) => r.request_id),
      ['caller-id-9', gid1],
      'newest first',
    );
    const task = JSON.parse(await ask('session', '{"task_id":"task-7"}')) as { requests: { request_id: string }[] };
    assert.deepEqual(
      task.requests.map((r) => r.request_id),
      [gid1],
      "only the task's request",
    );
    assert.ok(gid2);
  });

  it('an id no record carries is the fixed 404 problem, as over HTTP', async () => {
    assert.equal(await ask('get', `{"id":"req_${'0'.repeat(32)}"}`), NOT_FOUND);
    assert.equal(await ask('get', '{"id":"never-seen"}'), NOT_FOUND);
    assert.equal((await http('/v1/requests/never-seen')).status, 404);
    assert.equal(
      await ask('session', '{"session_id":"nobody"}'),
      JSON.stringify({ requests: [], truncation: { returned: 0, omitted: 0 } }),
    );
  });

  it('refuses every malformed request with the 400 problem naming the member at fault, never echoing it', async () => {
    for (const [lookup, payload, name] of REFUSED)
      assertNamedRefusal(await ask(lookup, payload), payload, name, `${lookup} ${String(payload).slice(0, 40)}`);
  });

  it('a malformed id or lineage value is the same problem the HTTP lookup answers', async () => {
    const pairs: [Lookup, string, string][] = [
      ['get', '{"id":"a b"}', '/v1/requests/a%20b'],
      ['session', '{"session_id":"has space"}', '/v1/requests?session_id=has%20space&history=1'],
      ['session', '{"task_id":"a b"}', '/v1/requests?task_id=a%20b&history=1'],
      ['session', '{"session_id":"a","task_id":"b"}', '/v1/requests?session_id=a&task_id=b&history=1'],
    ];
    for (const [lookup, payload, path] of pairs) {
      const h = await http(path);
      assert.equal(h.status, 400, path);
      assert.equal(await ask(lookup, payload), h.text, path);
    }
  });

  it('never carries prompt text on the wire', () => {
    assert.ok(wire.length > 20);
    for (const w of wire) assert.ok(!w.includes('prompt-canary-51c9e2'), 'no prompt text in a reply');
  });

  it('over HTTP a requests:read client may look up; it reads no workloads, and a client with neither read grant is refused', async () => {
    assert.equal((await http(`/v1/requests/${gid1}`, p.tokens.requests)).status, 200);
    assert.equal((await http('/v1/requests?active=1', p.tokens.requests)).status, 200);
    assert.equal((await http(`/v1/requests/${gid1}`, p.tokens.reader)).status, 200, 'workloads:read keeps its lookups');
    assert.equal((await http(`/v1/requests/${gid1}`, p.tokens.lifecycle)).status, 403);
    assert.equal(
      (await http('/v1/workloads', p.tokens.requests)).status,
      403,
      'requests:read does not imply workloads:read',
    );
    assert.equal((await http('/v1/requests?task_id=a&session_id=b&history=1')).status, 400);
    assert.equal((await http('/v1/requests?task_id=a')).status, 400);
  });
});

describe('router request lookups over a real nats-server name the member at fault', () => {
  const p = writeTestPolicy();
  let server: NatsServerHandle;
  let routerBus: Bus;
  let asker: Bus;
  let router: RouterHandle;

  before(async () => {
    server = await startNatsServer();
    routerBus = await connectNatsBus({ servers: server.url });
    asker = await connectNatsBus({ servers: server.url });
    const path = join(p.dir, 'router-nats.toml');
    writeFileSync(
      path,
      [
        '[server]',
        'host_id = "node-n"',
        'listen = "127.0.0.1:0"',
        'api_keys_env = "UNIT_KEYS"',
        `authorization_policy = "${p.path}"`,
        '',
        '[[models]]',
        'alias = "m"',
        // No request reaches it: the lookups read only the router's records.
        'upstream = "http://127.0.0.1:9/v1"',
      ].join('\n'),
    );
    router = await startRouter(loadRouterConfig(path), {
      logger: pino({ level: 'silent' }),
      env: { ...p.env, UNIT_KEYS: KEY },
      bus: routerBus,
    });
    await routerBus.flush();
  });
  after(async () => {
    await router?.close();
    await asker?.close();
    await routerBus?.close();
    await server?.stop();
  });

  it('answers every refused payload with invalid_params, and a valid one as before', async () => {
    const ask = async (lookup: Lookup, payload: string | Uint8Array): Promise<string> =>
      dec(
        await asker.request(requestsSubject('node-n', lookup), typeof payload === 'string' ? enc(payload) : payload, {
          timeoutMs: 5000,
        }),
      );
    for (const [lookup, payload, name] of REFUSED)
      assertNamedRefusal(await ask(lookup, payload), payload, name, `${lookup} ${String(payload).slice(0, 40)}`);
    assert.equal(await ask('get', '{"id":"never-seen"}'), NOT_FOUND);
    assert.equal(await ask('active', ''), JSON.stringify({ requests: [], truncation: { returned: 0, omitted: 0 } }));
  });
});
