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
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { writeTestPolicy } from '../support/policy.js';

const KEY = 'responder-unit-key-0123';
const CANARY = 'prompt-canary-51c9e2 tell nobody';
const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);
const problem = (status: number, slug: string, title: string, code: string) =>
  JSON.stringify({ type: `urn:svc-serving:problem:${slug}`, title, status, code });
const NOT_FOUND = problem(404, 'not-found', 'Not found', 'not_found');
const INVALID = problem(400, 'invalid-input', 'Invalid input', 'invalid_input');

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

  it('refuses every malformed request with the fixed 400 problem and never echoes it', async () => {
    const bad: ['get' | 'session' | 'active', string | Uint8Array][] = [
      ['get', ''],
      ['get', 'not json'],
      ['get', '[]'],
      ['get', 'null'],
      ['get', '{}'],
      ['get', '{"id":1}'],
      ['get', '{"id":null}'],
      ['get', '{"id":"a b"}'],
      ['get', '{"id":"ok","extra":1}'],
      ['get', '{"id":"x","id":"y"}'],
      ['get', '{"Id":"x"}'],
      ['get', `{"id":"${'a'.repeat(129)}"}`],
      ['get', `{"id":"a"}${' '.repeat(MAX_LOOKUP_REQUEST_BYTES)}`],
      ['get', new Uint8Array([0xff, 0xfe])],
      ['get', '{"__proto__":{"id":"x"}}'],
      ['session', '{}'],
      ['session', '{"session_id":"a","task_id":"b"}'],
      ['session', '{"session_id":""}'],
      ['session', '{"session_id":"has space"}'],
      ['session', '{"session":"a"}'],
      ['session', '{"session_id":["a"]}'],
      ['session', '{"history":1,"session_id":"a"}'],
      ['active', '{"active":1}'],
      ['active', '[]'],
      ['active', 'x'],
    ];
    for (const [lookup, payload] of bad)
      assert.equal(await ask(lookup, payload), INVALID, `${lookup} ${String(payload).slice(0, 40)}`);
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
