import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { request } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { checkFleetResult, type FleetResult, type NodeResult } from '../../src/schema/envelopes.js';
import { connectNatsBus } from '../../src/streams/nats-bus.js';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { natsUsers } from '../support/nats-permissions.js';
import { writeTestPolicy } from '../support/policy.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { batch, enc, rec } from '../support/records.js';

const ACTOR = fileURLToPath(new URL('../support/fixture-actor.js', import.meta.url));
const RESPONDER = fileURLToPath(new URL('../support/fixture-responder.js', import.meta.url));
const HOSTS = ['node-a', 'node-b', 'node-c', 'node-d', 'node-w', 'node-m', 'node-s'];

describe('fleet over one nats-server with per-host permissions (real processes)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-fleet-'));
  const policy = writeTestPolicy(dir);
  const users = natsUsers(HOSTS);
  let nats: NatsServerHandle;
  const procs: RunningProcess[] = [];
  const controllers = new Map<string, RunningProcess>();
  let fleet: RunningProcess;

  const start = async (script: string, args: string[], env: Record<string, string>): Promise<RunningProcess> => {
    const p = await spawnNode(script, args, { env: { ...policy.env, ...env } });
    procs.push(p);
    return p;
  };
  const startController = async (host: string): Promise<void> => {
    const cfg = join(dir, `${host}.toml`);
    writeFileSync(
      cfg,
      [
        '[node]',
        `host_id = "${host}"`,
        'listen = "127.0.0.1:0"',
        `nats_url = "${nats.url}"`,
        `nats_user = "${host}"`,
        'nats_password_env = "NODE_NATS_PASSWORD"',
        'authorization_policy = "policy.toml"',
        'stale_after_seconds = 5',
        // Each node its own state (one controller per state_dir).
        `state_dir = "state-${host}"`,
      ].join('\n'),
    );
    controllers.set(
      host,
      await start(CLI, ['controller', 'serve', '--config', cfg], { NODE_NATS_PASSWORD: users.passwords[host]! }),
    );
  };
  const startActor = async (host: string, native: string): Promise<void> => {
    const file = join(dir, `${host}-records.json`);
    writeFileSync(file, JSON.stringify([rec(host, 'manifest', native, { at: Date.now() })]));
    await start(ACTOR, [], {
      NATS_URL: nats.url,
      NATS_USER: host,
      NATS_PASS: users.passwords[host]!,
      HOST_ID: host,
      OWNER: 'manifest',
      RECORDS_FILE: file,
      POLL_MS: '100',
      STALE_MS: '5000',
    });
  };
  const fleetCall = async (args: Record<string, unknown> = {}): Promise<FleetResult> => {
    const res = await fetch(`${fleet.url}/tools/call`, {
      method: 'POST',
      headers: { authorization: `Bearer ${policy.tokens.reader}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'fleet_workloads', arguments: args }),
    });
    assert.equal(res.status, 200);
    const body = (await res.json()) as FleetResult;
    assert.ok(checkFleetResult.Check(body));
    return body;
  };
  const node = (r: FleetResult, h: string): NodeResult => r.nodes.find((n) => n.expected_host === h)!;

  before(async () => {
    nats = await startNatsServer({ configText: users.configText });
    await Promise.all(['node-a', 'node-b', 'node-c', 'node-d'].map(startController));
    await Promise.all([startActor('node-a', 'job-a'), startActor('node-b', 'job-b')]);
    await start(RESPONDER, [], {
      NATS_URL: nats.url,
      NATS_USER: 'node-w',
      NATS_PASS: users.passwords['node-w']!,
      HOST_ID: 'node-w',
      MODE: 'forge',
      FORGE_AS: 'node-a',
    });
    await start(RESPONDER, [], {
      NATS_URL: nats.url,
      NATS_USER: 'node-m',
      NATS_PASS: users.passwords['node-m']!,
      HOST_ID: 'node-m',
      MODE: 'malformed',
    });
    await controllers.get('node-d')!.stop('SIGKILL');
    const cfg = join(dir, 'fleet.toml');
    writeFileSync(
      cfg,
      [
        '[fleet]',
        'listen = "127.0.0.1:0"',
        `nats_url = "${nats.url}"`,
        'nats_user = "fleet"',
        'nats_password_env = "FLEET_NATS_PASSWORD"',
        'authorization_policy = "policy.toml"',
        'node_timeout_ms = 700',
        '',
        ...HOSTS.flatMap((h) => ['[[nodes]]', `host_id = "${h}"`, ...(h === 'node-s' ? ['sleeping = true'] : []), '']),
      ].join('\n'),
    );
    fleet = await start(CLI, ['fleet', 'serve', '--config', cfg], { FLEET_NATS_PASSWORD: users.passwords['fleet']! });
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await nats?.stop();
  });

  it('keeps an entry per declared node with the right condition, and the healthy records intact', async () => {
    const r = await eventually(
      async () => {
        const x = await fleetCall();
        return node(x, 'node-a').sources[5]?.records.length && node(x, 'node-b').sources[5]?.records.length
          ? x
          : undefined;
      },
      8000,
      100,
    );
    assert.deepEqual(
      r.nodes.map((n) => n.expected_host),
      HOSTS,
    );
    const cond = Object.fromEntries(r.nodes.map((n) => [n.expected_host, n.condition ?? null]));
    assert.deepEqual(cond, {
      'node-a': null,
      'node-b': null,
      'node-c': null,
      'node-d': 'unreachable',
      'node-w': 'wrong-identity',
      'node-m': 'malformed',
      'node-s': 'sleeping',
    });
    for (const h of ['node-d', 'node-w', 'node-m', 'node-s']) {
      assert.equal(node(r, h).status, 'unavailable');
      assert.equal(node(r, h).truncation.omitted, null);
    }
    assert.equal(r.status, 'partial');
    assert.equal(r.truncation.omitted, null);
    assert.equal(node(r, 'node-a').sources[5]!.records[0]!.host, 'node-a');
    assert.equal(node(r, 'node-b').sources[5]!.records[0]!.host, 'node-b');
  });

  it('dead nodes cost one timeout in total, not one each (parallel fan-out)', async () => {
    const t0 = Date.now();
    await fleetCall();
    assert.ok(Date.now() - t0 < 2 * 700, `took ${Date.now() - t0} ms`);
  });

  it('a node cannot publish observations for another host', async () => {
    const intruder = await connectNatsBus({
      servers: nats.url,
      user: 'node-b',
      pass: users.passwords['node-b']!,
      name: 'intruder',
    });
    try {
      const forged = rec('node-a', 'manifest', 'forged-by-b', { at: Date.now() });
      intruder.publish(
        'svc.v1.node-a.obs.manifest',
        enc(batch('node-a', 'manifest', { seq: 1, at: Date.now() + 1000, upserts: [forged] })),
      );
      await intruder.flush().catch(() => undefined);
      await new Promise((r) => setTimeout(r, 500));
      const r = await fleetCall({ owner: 'manifest' });
      assert.ok(
        !node(r, 'node-a').sources[5]!.records.some((x) => x.id === forged.id),
        'the forged record never reached node-a',
      );
      assert.equal(node(r, 'node-a').condition, undefined);
    } finally {
      await intruder.close();
    }
  });

  it("a node's user cannot read the replies other users get (its own inbox only)", async () => {
    const intruder = await connectNatsBus({
      servers: nats.url,
      user: 'node-b',
      pass: users.passwords['node-b']!,
      name: 'inbox-reader',
      inboxPrefix: '_INBOX_node-b',
    });
    try {
      const seen: string[] = [];
      const errors: string[] = [];
      for (const pattern of ['_INBOX.>', '_INBOX_fleet.>', '_INBOX_node-a.>']) {
        intruder.subscribe(pattern).subscribe({
          next: (m) => seen.push(m.subject),
          error: (e: unknown) => errors.push(`${pattern} ${(e as Error).name}`),
        });
      }
      await intruder.flush().catch(() => undefined);
      await fleetCall();
      await eventually(() => errors.length === 3, 3000, 50);
      assert.deepEqual(seen, [], 'no reply to the fleet reached node-b');
    } finally {
      await intruder.close();
    }
  });

  it('stopping a node turns its entry unreachable within the timeout and the fleet partial', async () => {
    await controllers.get('node-c')!.stop();
    const r = await fleetCall();
    assert.equal(node(r, 'node-c').condition, 'unreachable');
    assert.equal(r.status, 'partial');
  });

  it('MCP lists fleet_workloads for a workloads:read client and returns structured content', async () => {
    const client = new Client({ name: 'test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${fleet.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${policy.tokens.reader}` } },
      }),
    );
    const tools = await client.listTools();
    assert.deepEqual(
      tools.tools.map((t) => t.name),
      ['fleet_workloads'],
    );
    const res = await client.callTool({ name: 'fleet_workloads', arguments: { owner: 'media' } });
    assert.ok(checkFleetResult.Check(res.structuredContent));
    const bad = await client.callTool({ name: 'fleet_workloads', arguments: { owner: null } });
    assert.equal(bad.isError, true);
    await client.close();
  });

  it('MCP shows no tools to a client without workloads:read, and refuses a foreign Host', async () => {
    const client = new Client({ name: 'test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${fleet.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${policy.tokens.lifecycle}` } },
      }),
    );
    assert.deepEqual((await client.listTools()).tools, []);
    await client.close();
    // fetch() may not set Host (a forbidden header); node:http can, as a rebinding attacker's browser would send it.
    const u = new URL(fleet.url);
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
    const rebinding = await new Promise<{ status: number }>((resolve, reject) => {
      const req = request(
        {
          host: u.hostname,
          port: u.port,
          path: '/mcp',
          method: 'POST',
          headers: {
            host: 'evil.example',
            authorization: `Bearer ${policy.tokens.reader}`,
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
          },
        },
        (res) => {
          res.resume();
          resolve({ status: res.statusCode ?? 0 });
        },
      );
      req.on('error', reject);
      req.end(body);
    });
    assert.equal(rebinding.status, 403);
    const origin = await fetch(`${fleet.url}/mcp`, {
      method: 'POST',
      headers: {
        origin: 'http://evil.example',
        authorization: `Bearer ${policy.tokens.reader}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    assert.equal(origin.status, 403);
    const anon = await fetch(`${fleet.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    assert.equal(anon.status, 401);
  });
});
