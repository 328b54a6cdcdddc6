import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { loadRouterConfig } from '../../src/config/router-config.js';
import { startEngineSim, type EngineSim } from '../../src/engine-sim/engine-sim.js';
import { startRouter, type RouterHandle } from '../../src/router/router.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { writeTestPolicy } from '../support/policy.js';

/*
 * The exact set of query strings each of the router's two read routes with members accepts
 * (200) and refuses (400), over HTTP: `/v1/requests` (active, recent, or history by lineage key) and
 * `/v1/workloads` (the seven filters). Written before the two routes shared one query-string
 * splitter (issue 23, item 2), and kept green after: the splitter changed no answer.
 */

const KEY = 'queries-unit-key-0123';
const S128 = 's'.repeat(128);

/** `/v1/requests?<query>` -> status; `null` is the route without any `?`. */
const REQUESTS: readonly (readonly [string | null, number])[] = [
  ['active=1', 200],
  ['%61ctive=1', 200],
  ['active=%31', 200],
  ['recent=1', 200],
  ['%72ecent=1', 200],
  ['session_id=sess-1&history=1', 200],
  ['history=1&session_id=sess-1', 200],
  ['task_id=task-7&history=1', 200],
  ['workbench_run_id=run-3&history=1', 200],
  ['session_id=nobody&history=1', 200],
  [`session_id=${S128}&history=1`, 200],
  ['session_id=a%2Bb&history=1', 200],
  ['session_id=a+b&history=1', 200],
  ['session_id=a=b&history=1', 200],
  ['session_%69d=sess-1&%68istory=1', 200],
  [null, 400],
  ['', 400],
  ['active=1&', 400],
  ['&active=1', 400],
  ['&', 400],
  ['ACTIVE=1', 400],
  ['Active=1', 400],
  ['active=0', 400],
  ['active=true', 400],
  ['active=', 400],
  ['active', 400],
  ['act=1', 400],
  ['act', 400],
  ['=1', 400],
  ['%zz=1', 400],
  ['active=%zz', 400],
  ['active=1&active=1', 400],
  ['%61ctive=1&active=1', 400],
  ['active=1&history=1', 400],
  ['active=1&x=1', 400],
  ['x=1', 400],
  ['history=1', 400],
  ['history=0&session_id=sess-1', 400],
  ['session_id=sess-1', 400],
  ['session_id=sess-1&history=', 400],
  ['session_id=sess-1&history=1&x=1', 400],
  ['session_id=sess-1&history=1&history=1', 400],
  ['session_id=sess-1&session_id=sess-1&history=1', 400],
  ['session_id=sess-1&history=1&active=1', 400],
  ['session_id=&history=1', 400],
  ['session_id=%zz&history=1', 400],
  ['session_id=bad%20id&history=1', 400],
  [`session_id=${S128}s&history=1`, 400],
  [`session_id=${'s'.repeat(3000)}&history=1`, 400],
  ['task_id=a&session_id=b&history=1', 400],
  ['session=sess-1&history=1', 400],
  ['Session_id=sess-1&history=1', 400],
  ['session_id=sess-1&History=1', 400],
  ['session_id=sess-1&hist=1', 400],
  ['owner=router', 400],
  ['recent=0', 400],
  ['recent=true', 400],
  ['recent=', 400],
  ['recent', 400],
  ['RECENT=1', 400],
  ['rec=1', 400],
  ['recent=1&', 400],
  ['recent=1&recent=1', 400],
  ['recent=1&active=1', 400],
  ['active=1&recent=1', 400],
  ['recent=1&history=1', 400],
  ['recent=1&session_id=sess-1', 400],
  ['session_id=sess-1&history=1&recent=1', 400],
  ['recent=1&limit=5', 400],
  ['recent=1&x=1', 400],
];

/** `/v1/workloads?<query>` -> status; `null` is the route without any `?`. */
const WORKLOADS: readonly (readonly [string | null, number])[] = [
  [null, 200],
  ['', 200],
  ['owner=router', 200],
  ['%6Fwner=router', 200],
  ['owner=%72outer', 200],
  ['kind=router-request', 200],
  ['state=terminal', 200],
  ['host=node-a', 200],
  ['active_only=true', 200],
  ['active_only=false', 200],
  ['recent_seconds=1', 200],
  ['recent_seconds=86400', 200],
  ['limit=1', 200],
  ['limit=1000', 200],
  ['owner=router&kind=router-request&state=terminal&host=node-a&active_only=false&recent_seconds=60&limit=5', 200],
  ['owner=media', 200],
  ['own=router', 400],
  ['act', 400],
  ['active_only', 400],
  ['owner=', 400],
  ['owner=router&owner=router', 400],
  ['%6Fwner=router&owner=media', 400],
  ['Owner=router', 400],
  ['owner=ROUTER', 400],
  ['owner=nobody', 400],
  ['kind=router', 400],
  ['state=done', 400],
  ['host=1abc', 400],
  [`host=${'a'.repeat(65)}`, 400],
  [`host=${'a'.repeat(2100)}`, 400],
  ['active_only=1', 400],
  ['active_only=TRUE', 400],
  ['active_only=yes', 400],
  ['limit=0', 400],
  ['limit=1001', 400],
  ['limit=01', 400],
  ['limit=1e2', 400],
  ['limit=1.0', 400],
  ['limit=+1', 400],
  ['limit=-1', 400],
  ['limit=%201', 400],
  ['recent_seconds=0', 400],
  ['recent_seconds=86401', 400],
  ['recent_seconds=9999999999', 400],
  ['foo=1', 400],
  ['active=1', 400],
  ['&', 400],
  ['owner=router&', 400],
  ['&owner=router', 400],
  ['owner=router&&limit=1', 400],
  ['=x', 400],
  ['%zz=1', 400],
  ['owner=%zz', 400],
  ['__proto__=1', 400],
  ['constructor=1', 400],
];

/** Members `/v1/requests` may name in `invalid_params` (`query`: the query as a whole, or a name not one of these). */
const REQUESTS_PARAM_NAMES = new Set([
  'query',
  'active',
  'recent',
  'history',
  'session_id',
  'task_id',
  'workbench_run_id',
]);

/** A refused request lookup -> the `invalid_params` name its problem carries. */
const NAMED: readonly (readonly [string, string])[] = [
  ['/v1/requests', 'query'],
  ['/v1/requests?', 'query'],
  ['/v1/requests?x=1', 'query'],
  ['/v1/requests?act=1', 'query'],
  ['/v1/requests?recent=1&limit=5', 'query'],
  ['/v1/requests?&active=1', 'query'],
  ['/v1/requests?%zz=1', 'query'],
  ['/v1/requests?active=0', 'active'],
  ['/v1/requests?active=', 'active'],
  ['/v1/requests?active=%zz', 'active'],
  ['/v1/requests?active=1&active=1', 'active'],
  ['/v1/requests?active=1&history=1', 'active'],
  ['/v1/requests?recent=true', 'recent'],
  ['/v1/requests?recent=1&session_id=sess-1', 'recent'],
  ['/v1/requests?history=1', 'history'],
  ['/v1/requests?session_id=sess-1', 'history'],
  ['/v1/requests?history=0&session_id=sess-1', 'history'],
  ['/v1/requests?session_id=sess-1&history=', 'history'],
  ['/v1/requests?session_id=&history=1', 'session_id'],
  ['/v1/requests?session_id=bad%20id&history=1', 'session_id'],
  [`/v1/requests?session_id=${S128}s&history=1`, 'session_id'],
  ['/v1/requests?task_id=a&session_id=b&history=1', 'task_id'],
  ['/v1/requests?workbench_run_id=a%2Fb%25&history=1', 'workbench_run_id'],
  ['/v1/requests/bad%20id', 'id'],
  [`/v1/requests/${'r'.repeat(129)}`, 'id'],
  ['/v1/requests/req_0123?x=1', 'query'],
  ['/v1/router/status?x=1', 'query'],
];

describe("the router routes' query strings: the exact accepted and refused sets", () => {
  const p = writeTestPolicy();
  const bus = new InProcessBus();
  let sim: EngineSim;
  let router: RouterHandle;
  const get = async (path: string, token: string): Promise<number> => {
    const res = await fetch(`${router.url}${path}`, { headers: { authorization: `Bearer ${token}` } });
    await res.arrayBuffer();
    return res.status;
  };

  /** A 400 problem+json's body (its status, type and code checked). */
  const refused = async (path: string): Promise<{ invalid_params: { name: string; reason: string }[] }> => {
    const res = await fetch(`${router.url}${path}`, { headers: { authorization: `Bearer ${KEY}` } });
    assert.equal(res.status, 400, path);
    assert.match(res.headers.get('content-type') ?? '', /^application\/problem\+json/, path);
    const body = (await res.json()) as { code: string; invalid_params?: { name: string; reason: string }[] };
    assert.equal(body.code, 'invalid_input', path);
    assert.ok(Array.isArray(body.invalid_params), `${path}: invalid_params`);
    return body as { invalid_params: { name: string; reason: string }[] };
  };

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
    const res = await fetch(`${router.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${KEY}`,
        'content-type': 'application/json',
        'x-svc-session-id': 'sess-1',
        'x-svc-task-id': 'task-7',
        'x-svc-workbench-run-id': 'run-3',
      },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(res.status, 200);
    await res.text();
  });
  after(async () => {
    await router?.close();
    await sim?.close();
    await bus.close();
  });

  it('/v1/requests accepts exactly its three shapes and refuses every other query with 400', async () => {
    for (const [q, status] of REQUESTS)
      assert.equal(await get(q === null ? '/v1/requests' : `/v1/requests?${q}`, KEY), status, `?${q}`);
  });

  it('every refused /v1/requests query is a problem naming one member of the route (or `query`) in invalid_params, with a fixed reason', async () => {
    for (const [q, status] of REQUESTS) {
      if (status !== 400) continue;
      const problem = await refused(q === null ? '/v1/requests' : `/v1/requests?${q}`);
      assert.equal(problem.invalid_params.length, 1, `?${q}`);
      const [p0] = problem.invalid_params;
      assert.ok(REQUESTS_PARAM_NAMES.has(p0!.name), `?${q} named ${p0!.name}`);
      assert.match(p0!.reason, /^must /, `?${q}`);
    }
  });

  it('a refused request lookup names the member at fault: the flag, the lineage key, the id, or `query`', async () => {
    for (const [path, name] of NAMED) {
      const problem = await refused(path);
      assert.deepEqual(
        problem.invalid_params.map((p) => p.name),
        [name],
        path,
      );
    }
    // Nothing the caller sent comes back: not a lineage value, not an unknown member's name.
    const text = JSON.stringify(await refused('/v1/requests?session_id=zq-secret%20zz&history=1'));
    assert.doesNotMatch(text, /zq-secret/);
    assert.doesNotMatch(JSON.stringify(await refused('/v1/requests?zqmember=1')), /zqmember/);
  });

  it('/v1/workloads accepts exactly the filters and refuses every other query with 400', async () => {
    for (const [q, status] of WORKLOADS)
      assert.equal(await get(q === null ? '/v1/workloads' : `/v1/workloads?${q}`, p.tokens.reader), status, `?${q}`);
  });

  it('the history lookup answers the lineage it names', async () => {
    const res = await fetch(`${router.url}/v1/requests?task_id=task-7&history=1`, {
      headers: { authorization: `Bearer ${KEY}` },
    });
    const body = (await res.json()) as { requests: unknown[] };
    assert.equal(body.requests.length, 1);
  });

  it('the recent list answers the finished request, with the lookup credential rule', async () => {
    const res = await fetch(`${router.url}/v1/requests?recent=1`, { headers: { authorization: `Bearer ${KEY}` } });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { requests: { session_id?: string }[]; truncation: unknown };
    assert.equal(body.requests.length, 1);
    assert.equal(body.requests[0]!.session_id, 'sess-1');
    assert.deepEqual(body.truncation, { returned: 1, omitted: 0 });
    // A data-plane key, a requests:read client or a workloads:read client; nobody else.
    assert.equal(await get('/v1/requests?recent=1', p.tokens.requests), 200);
    assert.equal(await get('/v1/requests?recent=1', p.tokens.reader), 200);
    assert.equal(await get('/v1/requests?recent=1', p.tokens.media), 403);
    assert.equal(await get('/v1/requests?recent=1', p.tokens.lifecycle), 403);
    assert.equal(await get('/v1/requests?recent=1', 'not-a-known-credential'), 401);
    const none = await fetch(`${router.url}/v1/requests?recent=1`);
    await none.arrayBuffer();
    assert.equal(none.status, 401);
    // The credential is checked before the query: a bad query without one is 401, not 400.
    assert.equal(await get('/v1/requests?recent=2', 'not-a-known-credential'), 401);
  });
});
