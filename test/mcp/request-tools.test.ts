import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { pino } from 'pino';
import { loadRouterConfig } from '../../src/config/router-config.js';
import { checkFleetDiagnosis, type FleetDiagnosis } from '../../src/schema/diagnosis-search.js';
import { startController, type ControllerHandle } from '../../src/controller/controller.js';
import { startEngineSim, type EngineSim } from '../../src/engine-sim/engine-sim.js';
import { startRouter, type RouterHandle } from '../../src/router/router.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { writeTestPolicy } from '../support/policy.js';

const KEY = 'tools-unit-key-0123';

describe('controller request diagnosis tools (its own router on one in-process bus, as under `up`)', () => {
  const p = writeTestPolicy();
  const bus = new InProcessBus();
  let sim: EngineSim;
  let router: RouterHandle;
  let ctl: ControllerHandle;
  let gid: string;

  const connect = async (token: string): Promise<Client> => {
    const c = new Client({ name: 't', version: '1' });
    await c.connect(
      new StreamableHTTPClientTransport(new URL(`${ctl.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${token}` } },
      }),
    );
    return c;
  };
  const call = (token: string, body: unknown) =>
    fetch(`${ctl.url}/tools/call`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  before(async () => {
    sim = await startEngineSim({
      host: '127.0.0.1',
      port: 0,
      logger: pino({ level: 'silent' }),
      ttftMs: 0,
      tokenDelayMs: 0,
      tokens: 40,
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
        '',
        '[[models]]',
        'alias = "m"',
        `upstream = "${sim.url}/v1"`,
        'upstream_model = "sim"',
        'max_output_tokens = 5',
      ].join('\n'),
    );
    router = await startRouter(loadRouterConfig(path), {
      logger: pino({ level: 'silent' }),
      env: { UNIT_KEYS: KEY },
      bus,
    });
    ctl = await startController(
      {
        hostId: 'node-a',
        listen: { host: '127.0.0.1', port: 0 },
        nats: undefined,
        policyPath: p.path,
        staleAfterMs: 30_000,
        stateDir: p.dir,
      },
      { logger: pino({ level: 'silent' }), env: p.env, bus },
    );
    // The alias's ceiling (5) cuts the 40-token answer: a length finish.
    const res = await fetch(`${router.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'x-svc-task-id': 'agent-task-1' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });
    await res.text();
    gid = res.headers.get('x-svc-request-id')!;
  });
  after(async () => {
    await ctl?.close();
    await router?.close();
    await sim?.close();
    await bus.close();
  });

  it('lists the diagnosis tools only to requests:read, with their own input schemas', async () => {
    const c = await connect(p.tokens.requests);
    const { tools } = await c.listTools();
    assert.deepEqual(
      tools.map((t) => t.name),
      ['request_diagnosis', 'session_diagnosis'],
    );
    assert.deepEqual(Object.keys((tools[0]!.inputSchema as { properties: object }).properties), ['request_id']);
    assert.deepEqual(Object.keys((tools[1]!.inputSchema as { properties: object }).properties), [
      'session_id',
      'task_id',
      'workbench_run_id',
    ]);
    await c.close();
    const reader = await connect(p.tokens.reader);
    assert.deepEqual(
      (await reader.listTools()).tools.map((t) => t.name),
      ['node_workloads'],
      'workloads:read does not imply requests:read',
    );
    assert.equal((await reader.callTool({ name: 'request_diagnosis', arguments: { request_id: gid } })).isError, true);
    await reader.close();
  });

  it("an agent finds its task's call that hit a length finish, and its host", async () => {
    const c = await connect(p.tokens.requests);
    const res = await c.callTool({ name: 'session_diagnosis', arguments: { task_id: 'agent-task-1' } });
    assert.notEqual(res.isError, true);
    const d = res.structuredContent as FleetDiagnosis;
    assert.ok(checkFleetDiagnosis.Check(d));
    assert.equal(d.requests!.length, 1);
    assert.equal(d.requests![0]!.host, 'node-a');
    assert.ok(d.requests![0]!.interpretation.includes('length_finish'));
    const one = (await c.callTool({ name: 'request_diagnosis', arguments: { request_id: gid } }))
      .structuredContent as FleetDiagnosis;
    assert.equal(one.host, 'node-a');
    assert.equal(one.search.outcome, 'found');
    assert.equal(typeof one.request!.admission_wait_ms, 'number');
    await c.close();
  });

  it('a bad argument is a tool error naming the argument, never its value', async () => {
    const c = await connect(p.tokens.requests);
    const res = await c.callTool({ name: 'request_diagnosis', arguments: { request_id: 'value canary 77' } });
    assert.equal(res.isError, true);
    const text = (res.content as { text: string }[])[0]!.text;
    assert.equal(text, 'request_id: not a request id');
    const two = await c.callTool({ name: 'session_diagnosis', arguments: { session_id: 'a', task_id: 'b' } });
    assert.equal(
      (two.content as { text: string }[])[0]!.text,
      'arguments: give exactly one of session_id, task_id, workbench_run_id',
    );
    await c.close();
  });

  it('/tools/call: requests:read reads the envelope; workloads:read is refused with 403; bad input is 400 naming the argument', async () => {
    const ok = await call(p.tokens.requests, { name: 'request_diagnosis', arguments: { request_id: gid } });
    assert.equal(ok.status, 200);
    assert.ok(checkFleetDiagnosis.Check(await ok.json()));
    assert.equal(
      (await call(p.tokens.reader, { name: 'request_diagnosis', arguments: { request_id: gid } })).status,
      403,
    );
    assert.equal(
      (await call(p.tokens.requests, { name: 'node_workloads', arguments: {} })).status,
      403,
      'requests:read does not read workloads',
    );
    assert.equal((await call(p.tokens.lifecycle, { name: 'request_diagnosis', arguments: {} })).status, 403);
    const bad = await call(p.tokens.requests, { name: 'request_diagnosis', arguments: { request_id: 'x y' } });
    assert.equal(bad.status, 400);
    const body = (await bad.json()) as Record<string, unknown>;
    assert.deepEqual(body['invalid_params'], [{ name: 'request_id', reason: 'not a request id' }]);
    assert.ok(!JSON.stringify(body).includes('x y'));
  });

  it('an id the router does not hold: not found, every node asked having answered', async () => {
    const res = await call(p.tokens.requests, {
      name: 'request_diagnosis',
      arguments: { request_id: `req_${'f'.repeat(32)}` },
    });
    const d = (await res.json()) as FleetDiagnosis;
    assert.equal(d.search.outcome, 'not_found');
    assert.deepEqual(d.interpretation, ['not_found_maybe_active_or_evicted']);
  });
});
