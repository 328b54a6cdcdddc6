import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ConfigError } from '../../src/errors.js';
import {
  routerSource,
  telemetryGate,
  workloadService,
  type DashboardOptions,
} from '../../src/dashboard/dashboard-config.js';
import { ControllerReader } from '../../src/dashboard/dashboard-reader.js';
import { writeTestPolicy } from '../support/policy.js';

const policy = writeTestPolicy();
const base: DashboardOptions = { host: '127.0.0.1', port: 0 };
const full = (over: Partial<DashboardOptions> = {}): DashboardOptions => ({
  ...base,
  workloadControllerUrl: 'http://127.0.0.1:8100',
  workloadExpectedNode: 'node-a',
  workloadAuthorizationPolicy: policy.path,
  ...over,
});
const reason = (o: DashboardOptions, env: Record<string, string> = policy.env) => {
  const s = workloadService(o, env, telemetryGate(o, env));
  return s.enabled ? 'enabled' : s.reason;
};

describe('dashboard options: when workload reads are enabled', () => {
  it('only with all three valid options', () => {
    assert.equal(reason(full()), 'enabled');
    assert.equal(reason(full({ workloadControllerUrl: 'https://controller.example.com' })), 'enabled');
    assert.equal(reason(base), 'not-configured');
    assert.equal(reason(full({ workloadAuthorizationPolicy: undefined })), 'incomplete');
    assert.equal(reason(full({ workloadControllerUrl: undefined, workloadExpectedNode: undefined })), 'incomplete');
  });

  it('uses the CLI origin rules: plain HTTP only to loopback or private IP literals, bare origins only', () => {
    for (const url of [
      'http://controller.example.com',
      'http://8.8.8.8:8100',
      'http://127.0.0.1:8100/tools',
      'http://u:p@127.0.0.1:1',
      'ftp://127.0.0.1',
    ]) {
      assert.equal(reason(full({ workloadControllerUrl: url })), 'invalid-controller-url', url);
    }
    assert.equal(reason(full({ workloadControllerUrl: 'http://10.1.2.3:8100' })), 'enabled');
  });

  it('needs a host ID as expected node and a loadable policy', () => {
    assert.equal(reason(full({ workloadExpectedNode: '1node' })), 'invalid-expected-node');
    assert.equal(reason(full({ workloadAuthorizationPolicy: '/nonexistent/policy.toml' })), 'invalid-policy');
    assert.equal(reason(full(), {}), 'invalid-policy', 'a client whose credential variable is unset');
  });

  it('is disabled when a workload client shares the telemetry credential', () => {
    const env = { ...policy.env, DASH_TOKEN: policy.tokens.media };
    assert.equal(reason(full({ authEnv: 'DASH_TOKEN' }), env), 'collision');
    assert.equal(
      reason(full({ authEnv: 'DASH_TOKEN' }), { ...policy.env, DASH_TOKEN: 'telemetry-only-secret' }),
      'enabled',
    );
  });
});

describe('dashboard options: the telemetry gate', () => {
  it('is open without --auth-env on loopback only', () => {
    assert.equal(telemetryGate(base, {}).required, false);
    assert.equal(telemetryGate({ ...base, host: '::1' }, {}).required, false);
    assert.throws(() => telemetryGate({ ...base, host: '0.0.0.0' }, {}), ConfigError);
  });

  it('refuses to start when the named variable is unset or not a credential, without echoing a value', () => {
    assert.throws(() => telemetryGate({ ...base, authEnv: 'NOPE' }, {}), /NOPE is not set/);
    // Set but empty is told apart from unset: the operator exported it, with nothing in it.
    assert.throws(() => telemetryGate({ ...base, authEnv: 'NOPE' }, { NOPE: '  ' }), /NOPE is empty/);
    assert.throws(
      () => telemetryGate({ ...base, authEnv: 'BAD' }, { BAD: 'two words' }),
      (e: Error) => !e.message.includes('two words'),
    );
    assert.throws(() => telemetryGate({ ...base, authEnv: 'not-a-name' }, {}), ConfigError);
    const gate = telemetryGate({ ...base, authEnv: 'T' }, { T: 'tele-secret' });
    assert.deepEqual(
      [gate.allows('tele-secret'), gate.allows('tele-secreT'), gate.allows(undefined)],
      [true, false, false],
    );
  });
});

describe('dashboard options: the router the Requests view reads', () => {
  it('needs --router-url and --router-auth-env together, a valid origin and a credential, never echoing one', () => {
    assert.equal(routerSource(base, {}), undefined, 'neither: no Requests view');
    assert.throws(
      () => routerSource({ ...base, routerAuthEnv: 'K' }, { K: 'key' }),
      /--router-auth-env needs --router-url/,
    );
    assert.throws(
      () => routerSource({ ...base, routerUrl: 'http://127.0.0.1:8000' }, {}),
      /--router-url needs --router-auth-env/,
    );
    assert.throws(
      () => routerSource({ ...base, routerUrl: 'http://example.com', routerAuthEnv: 'K' }, { K: 'key' }),
      /--router-url must be a bare origin/,
    );
    assert.throws(
      () => routerSource({ ...base, routerUrl: 'http://127.0.0.1:8000/v1', routerAuthEnv: 'K' }, { K: 'key' }),
      /--router-url must be a bare origin/,
    );
    assert.throws(
      () => routerSource({ ...base, routerUrl: 'http://127.0.0.1:8000', routerAuthEnv: 'K' }, {}),
      /K is not set/,
    );
    assert.throws(
      () => routerSource({ ...base, routerUrl: 'http://127.0.0.1:8000', routerAuthEnv: 'K' }, { K: 'two words' }),
      (e: Error) =>
        e instanceof ConfigError && /K is not a valid credential/.test(e.message) && !e.message.includes('two'),
    );
    assert.deepEqual(
      routerSource({ ...base, routerUrl: 'http://127.0.0.1:8000', routerAuthEnv: 'K' }, { K: ' rk-1 ' }),
      {
        origin: 'http://127.0.0.1:8000',
        credential: 'rk-1',
      },
    );
  });
});

describe('dashboard controller reader', () => {
  let server: Server;
  let seen: string | undefined;
  let reply: { status: number; body: unknown } = { status: 200, body: {} };
  const start = async () => {
    server = createServer((req, res) => {
      seen = req.headers.authorization;
      req.resume();
      res.writeHead(reply.status, { 'content-type': 'application/json' }).end(JSON.stringify(reply.body));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  };
  after(() => server?.close());
  const OWNERS = ['router', 'controller', 'benchmark', 'media', 'recipe', 'manifest'];
  const result = (
    host: string,
    sources: unknown[] = OWNERS.map((owner) => ({
      owner,
      status: 'complete',
      records: [],
      truncation: { returned: 0, omitted: 0 },
    })),
  ) => ({
    schema: 'svc-workloads/v1',
    expected_host: host,
    status: 'complete',
    collected_at: '2026-11-25T12:00:00.000Z',
    sources,
    truncation: { returned: 0, omitted: 0 },
  });

  it('forwards the same credential as a bearer and verifies the answering node', async () => {
    const reader = new ControllerReader(await start(), 'node-a');
    const signal = new AbortController().signal;
    reply = { status: 200, body: result('node-a') };
    assert.equal((await reader.read('reader-token', {}, signal)).kind, 'result');
    assert.equal(seen, 'Bearer reader-token');
    reply = { status: 200, body: result('node-b') };
    assert.deepEqual(await reader.read('reader-token', {}, signal), { kind: 'failure', failure: 'wrong-identity' });
    reply = { status: 200, body: { schema: 'svc-workloads/v1' } };
    assert.deepEqual(await reader.read('t', {}, signal), { kind: 'failure', failure: 'malformed' });
    // Held to the same checks as the fleet: no sources is not a controller's answer, and a
    // "complete" node over an unavailable source is shown as partial, never as idle.
    reply = { status: 200, body: result('node-a', []) };
    assert.deepEqual(await reader.read('t', {}, signal), { kind: 'failure', failure: 'malformed' });
    const dark = OWNERS.map((owner) => ({
      owner,
      status: owner === 'media' ? 'unavailable' : 'complete',
      ...(owner === 'media' ? { reason: 'timeout' } : {}),
      records: [],
      truncation: { returned: 0, omitted: owner === 'media' ? null : 0 },
    }));
    reply = { status: 200, body: result('node-a', dark) };
    const held = await reader.read('t', {}, signal);
    assert.equal(held.kind === 'result' && held.result.status, 'partial');
    assert.deepEqual(held.kind === 'result' && held.result.truncation, { returned: 0, omitted: null });
    for (const [status, failure] of [
      [401, 'controller-unauthenticated'],
      [403, 'controller-forbidden'],
      [404, 'not-served'],
      [302, 'redirect'],
      [503, 'failed'],
    ] as const) {
      reply = { status, body: {} };
      assert.deepEqual(await reader.read('t', {}, signal), { kind: 'failure', failure }, String(status));
    }
    await reader.close();
  });

  it('reports a stopped controller as unreachable', async () => {
    const reader = new ControllerReader('http://127.0.0.1:9', 'node-a');
    assert.deepEqual(await reader.read('t', {}, new AbortController().signal), {
      kind: 'failure',
      failure: 'unreachable',
    });
    await reader.close();
  });
});
