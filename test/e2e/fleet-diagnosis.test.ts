import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import OpenAI from 'openai';
import { checkFleetDiagnosis, type FleetDiagnosis } from '../../src/schema/diagnosis-search.js';
import { connectNatsBus } from '../../src/streams/nats-bus.js';
import { runCli } from '../cli/run-cli.js';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { natsUsers } from '../support/nats-permissions.js';
import { writeTestPolicy } from '../support/policy.js';
import { CLI, spawnNode, type RunningProcess } from '../support/processes.js';

const CANARY = 'prompt-canary-e2e-83f1 do not relay';
const KEY = 'dp-key-fleet-diagnosis-0123';

describe('fleet diagnose across two routers on one nats-server with per-host permissions (real processes)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-fdiag-'));
  const policy = writeTestPolicy(dir);
  const users = natsUsers(['node-a', 'node-b']);
  let nats: NatsServerHandle;
  let sim: RunningProcess;
  const routers = new Map<string, RunningProcess>();
  let fleet: RunningProcess;
  const ids: Record<string, string> = {};

  const startRouter = async (host: string): Promise<void> => {
    const cfg = join(dir, `${host}.toml`);
    writeFileSync(
      cfg,
      [
        '[server]',
        `host_id = "${host}"`,
        'listen = "127.0.0.1:0"',
        'api_keys_env = "SVC_ROUTER_KEYS"',
        'authorization_policy = "policy.toml"',
        `nats_url = "${nats.url}"`,
        `nats_user = "${host}"`,
        'nats_password_env = "NODE_NATS_PASSWORD"',
        '',
        '[[models]]',
        'alias = "m"',
        `upstream = "${sim.url}/v1"`,
        'upstream_model = "sim-model"',
        'max_output_tokens = 3',
      ].join('\n'),
    );
    routers.set(
      host,
      await spawnNode(CLI, ['router', 'serve', '--config', cfg], {
        env: { ...policy.env, SVC_ROUTER_KEYS: KEY, NODE_NATS_PASSWORD: users.passwords[host]! },
      }),
    );
  };
  // Real chat requests through each router with the official SDK; the id is what the router answered with.
  const chat = async (host: string, session: string): Promise<string> => {
    const client = new OpenAI({ baseURL: `${routers.get(host)!.url}/v1`, apiKey: KEY, maxRetries: 0 });
    const { response } = await client.chat.completions
      .create(
        { model: 'm', messages: [{ role: 'user', content: CANARY }] },
        { headers: { 'X-Svc-Session-Id': session } },
      )
      .withResponse();
    return response.headers.get('x-svc-request-id')!;
  };
  const diagnose = (args: string[], token = policy.tokens.requests) =>
    runCli(['fleet', 'diagnose', ...args, '--fleet-url', fleet.url, '--auth-env', 'SVC_TOKEN'], { SVC_TOKEN: token });
  const diagnoseJson = async (args: string[]): Promise<FleetDiagnosis> => {
    const r = await diagnose([...args, '--json']);
    assert.equal(r.code, 0, r.stderr);
    const d = JSON.parse(r.stdout) as FleetDiagnosis;
    assert.ok(checkFleetDiagnosis.Check(d));
    return d;
  };

  before(async () => {
    nats = await startNatsServer({ configText: users.configText });
    sim = await spawnNode(CLI, [
      'engine',
      'sim',
      '--listen',
      '127.0.0.1:0',
      '--ttft-ms',
      '0',
      '--token-delay-ms',
      '0',
      '--tokens',
      '8',
    ]);
    await Promise.all(['node-a', 'node-b'].map(startRouter));
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
        '[[nodes]]',
        'host_id = "node-a"',
        '',
        '[[nodes]]',
        'host_id = "node-b"',
        '',
        '[[nodes]]',
        'host_id = "node-s"',
        'sleeping = true',
      ].join('\n'),
    );
    fleet = await spawnNode(CLI, ['fleet', 'serve', '--config', cfg], {
      env: { ...policy.env, FLEET_NATS_PASSWORD: users.passwords['fleet']! },
    });
    ids['a'] = await chat('node-a', 'shared-session');
    ids['b'] = await chat('node-b', 'shared-session');
  });
  after(async () => {
    await Promise.all([...routers.values(), sim, fleet].map((p) => p?.stop()));
    await nats?.stop();
  });

  it("finds the router holding a request and prints router diagnose's text with its host", async () => {
    const r = await diagnose([ids['b']!]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^host: node-b$/m);
    assert.match(r.stdout, /^search: asked 2 of 3 declared nodes \(1 sleeping: node-s\); 2 answered; held by node-b$/m);
    assert.ok(r.stdout.includes(`Request ${ids['b']}: chat.completions on model m, outcome success`));
    assert.match(r.stdout, /Finished because of length/, 'the 3-token ceiling cut the 8-token answer');
    const d = await diagnoseJson([ids['a']!]);
    assert.equal(d.host, 'node-a');
    assert.equal(d.request!.request_id, ids['a']);
    assert.ok(d.interpretation.includes('length_finish'));
    assert.deepEqual(d.current_router, { unavailable: true });
  });

  it('a session across both routers: each request with its host, newest first', async () => {
    const d = await diagnoseJson(['--session-id', 'shared-session']);
    assert.deepEqual(
      d.requests!.map((e) => [e.host, e.request.request_id]),
      [
        ['node-b', ids['b']],
        ['node-a', ids['a']],
      ],
    );
    assert.deepEqual(d.search.holders.hosts, ['node-a', 'node-b']);
    const text = await diagnose(['--session-id', 'shared-session']);
    assert.match(text.stdout, new RegExp(`node-a  ${ids['a']}`));
  });

  it('an id on no node is not found, once every node asked has answered', async () => {
    const r = await diagnose([`req_${'e'.repeat(32)}`]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /No terminal record for this request id/);
    assert.equal((await diagnoseJson(['never-sent-id'])).search.outcome, 'not_found');
  });

  it("no prompt text on the wire; another node's user cannot ask a router's lookups", async () => {
    const asFleet = await connectNatsBus({
      servers: nats.url,
      user: 'fleet',
      pass: users.passwords['fleet']!,
      inboxPrefix: '_INBOX_fleet',
    });
    const asB = await connectNatsBus({
      servers: nats.url,
      user: 'node-b',
      pass: users.passwords['node-b']!,
      inboxPrefix: '_INBOX_node-b',
    });
    try {
      const replies = await Promise.all([
        asFleet.request('svc.v1.node-a.requests.get', new TextEncoder().encode(JSON.stringify({ id: ids['a'] })), {
          timeoutMs: 2000,
        }),
        asFleet.request('svc.v1.node-a.requests.session', new TextEncoder().encode('{"session_id":"shared-session"}'), {
          timeoutMs: 2000,
        }),
        asFleet.request('svc.v1.node-b.requests.active', new TextEncoder().encode('{}'), { timeoutMs: 2000 }),
      ]);
      const texts = replies.map((b) => new TextDecoder().decode(b));
      assert.ok(texts[0]!.startsWith('{"request":{'));
      for (const t of texts) assert.ok(!t.includes('prompt-canary-e2e-83f1'), 'no prompt text in a lookup reply');
      await assert.rejects(
        asB.request('svc.v1.node-a.requests.get', new TextEncoder().encode(JSON.stringify({ id: ids['a'] })), {
          timeoutMs: 1000,
        }),
      );
    } finally {
      await asFleet.close();
      await asB.close();
    }
  });

  it('MCP: the tools are listed only with requests:read; a workloads:read client is refused on /tools/call', async () => {
    const connect = async (token: string) => {
      const c = new Client({ name: 'agent', version: '1.0.0' });
      await c.connect(
        new StreamableHTTPClientTransport(new URL(`${fleet.url}/mcp`), {
          requestInit: { headers: { authorization: `Bearer ${token}` } },
        }),
      );
      return c;
    };
    const agent = await connect(policy.tokens.requests);
    assert.deepEqual(
      (await agent.listTools()).tools.map((t) => t.name),
      ['request_diagnosis', 'session_diagnosis'],
    );
    const res = await agent.callTool({ name: 'session_diagnosis', arguments: { session_id: 'shared-session' } });
    const d = res.structuredContent as FleetDiagnosis;
    assert.equal(d.requests!.length, 2);
    assert.ok(
      d.requests!.every((e) => e.interpretation.includes('length_finish')),
      'the agent sees which calls hit a length finish',
    );
    await agent.close();
    const ops = await connect(policy.tokens.reader);
    assert.deepEqual(
      (await ops.listTools()).tools.map((t) => t.name),
      ['fleet_workloads'],
    );
    await ops.close();
    const refused = await fetch(`${fleet.url}/tools/call`, {
      method: 'POST',
      headers: { authorization: `Bearer ${policy.tokens.reader}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'request_diagnosis', arguments: { request_id: ids['a'] } }),
    });
    assert.equal(refused.status, 403);
    const cli = await diagnose([ids['a']!], policy.tokens.reader);
    assert.equal(cli.code, 4);
    assert.match(cli.stderr, /lacks the requests:read grant/);
  });

  it('with a router down: "could not be asked", never "not found"; a record elsewhere is still found', async () => {
    await routers.get('node-b')!.stop();
    const t0 = Date.now();
    const r = await diagnose([`req_${'d'.repeat(32)}`]);
    assert.ok(Date.now() - t0 < 5000);
    assert.equal(r.code, 0, r.stderr);
    // At once (no responder), so not "in time": what did not answer is the node's router.
    assert.match(r.stdout, /could not be asked \(no answer from its router\): node-b/);
    assert.match(r.stdout, /Not found on the nodes that answered; 1 node could not be asked/);
    assert.doesNotMatch(r.stdout, /No terminal record/);
    const d = await diagnoseJson(['never-sent-id']);
    assert.equal(d.search.outcome, 'incomplete');
    assert.deepEqual(d.search.unreachable.hosts, ['node-b']);
    assert.deepEqual(d.interpretation, []);
    const found = await diagnoseJson([ids['a']!]);
    assert.equal(found.host, 'node-a');
    assert.deepEqual(found.search.unreachable.hosts, ['node-b']);
    const session = await diagnoseJson(['--session-id', 'shared-session']);
    assert.equal(session.truncation!.omitted, null, 'node-b may hold more of the session');
  });
});
