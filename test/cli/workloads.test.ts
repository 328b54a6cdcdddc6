import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkNodeResult, type NodeResult } from '../../src/schema/envelopes.js';
import { writeTestPolicy, type TestPolicy } from '../support/policy.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { startRouterHarness, type RouterHarness } from '../support/router-harness.js';
import { controllerNodeResult, fleetResult, routerNodeResult, sendJson, startFake } from './fake-servers.js';
import { looksLikeStackTrace, runCli, runCliBatch, type CliResult } from './run-cli.js';

const READER = 'SVC_CLI_READER';

describe('router workloads and fleet workloads against a real router and controller', () => {
  let h: RouterHarness;
  let controller: RunningProcess;
  let policy: TestPolicy;
  let dir: string;
  const rw = (args: string[], token?: string): Promise<CliResult> =>
    runCli(['router', 'workloads', '--router-url', h.routerUrl, '--auth-env', READER, ...args], {
      [READER]: token ?? h.readerToken,
    });

  before(async () => {
    h = await startRouterHarness({ models: [{ alias: 'chat', max_output_tokens: 16 }] });
    dir = mkdtempSync(join(tmpdir(), 'svc-cli-ctl-'));
    policy = writeTestPolicy(dir);
    writeFileSync(
      join(dir, 'node.toml'),
      '[node]\nhost_id = "node-c"\nlisten = "127.0.0.1:0"\nauthorization_policy = "policy.toml"\n',
    );
    controller = await spawnNode(CLI, ['controller', 'serve', '--config', join(dir, 'node.toml')], { env: policy.env });
    await h.client().chat.completions.create({ model: 'chat', messages: [{ role: 'user', content: 'hi' }] });
    // The router's own fold sees the terminal record shortly after the request ends.
    await eventually(async () => {
      const res = await h.get('/v1/workloads?state=terminal', h.readerToken);
      return ((await res.json()) as NodeResult).sources[0]!.records.length > 0;
    });
  });
  after(async () => {
    await controller?.stop();
    await h?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("prints a table of the router's records and its source line", async () => {
    const r = await rw(['--expected-node', 'node-a']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^HOST\s+OWNER\s+KIND\s+STATE\s+PHASE\s+OUTCOME\s+PROGRESS\s+QUALITY\s+AGE$/m);
    assert.match(r.stdout, /node-a\s+router\s+router-request\s+terminal\s+completed\s+success\s+-\s+recorded\s+\d+s/);
    assert.match(r.stdout, /node node-a: complete; returned \d+, omitted 0/);
    assert.match(r.stdout, /source router: complete; returned \d+, omitted 0/);
  });

  it('--json prints a NodeResult that honours the filters; --host only filters', async () => {
    const r = await rw([
      '--expected-node',
      'node-a',
      '--owner',
      'router',
      '--state',
      'terminal',
      '--limit',
      '1',
      '--recent-seconds',
      '600',
      '--json',
    ]);
    assert.equal(r.code, 0, r.stderr);
    const body = JSON.parse(r.stdout) as NodeResult;
    assert.ok(checkNodeResult.Check(body));
    assert.equal(body.expected_host, 'node-a');
    assert.equal(body.sources[0]!.records.length, 1);
    assert.equal(body.sources[0]!.records[0]!.state, 'terminal');
    const other = await rw(['--expected-node', 'node-a', '--host', 'node-b', '--active-only']);
    assert.equal(other.code, 0, other.stderr);
    assert.match(other.stdout, /^No records\.$/m);
  });

  it('fails (exit 4) for another node, a data-plane key and an unknown credential', async () => {
    const conn = ['router', 'workloads', '--router-url', h.routerUrl, '--auth-env', READER];
    const cases: [string[], string, RegExp][] = [
      [[...conn, '--expected-node', 'node-b'], h.readerToken, /answered for a different node than --expected-node/],
      [[...conn, '--expected-node', 'node-a'], h.key, /lacks the workloads:read grant/],
      [[...conn, '--expected-node', 'node-a'], 'not-a-known-token', /did not accept the credential/],
    ];
    const results = await runCliBatch(cases.map(([args, token]) => ({ args, env: { [READER]: token } })));
    results.forEach((r, i) => {
      assert.equal(r.code, 4, r.stderr);
      assert.match(r.stderr, cases[i]![2]);
      assert.equal(r.stdout, '');
      assert.deepEqual(r.uncaught, []);
      assert.ok(!r.stderr.includes(h.routerUrl) && !r.stderr.includes(READER) && !r.stderr.includes(h.key));
    });
  });

  it("a router answer is held to the fleet's checks: counts, hosts, repeated members, hopeful status", async () => {
    const answers: (() => string)[] = [
      () => JSON.stringify({ ...routerNodeResult('node-a'), truncation: { returned: 5, omitted: 0 } }),
      () => {
        const r = routerNodeResult('node-a');
        r.sources[0]!.records[0] = { ...r.sources[0]!.records[0]!, host: 'node-b' };
        return JSON.stringify(r);
      },
      () =>
        JSON.stringify(routerNodeResult('node-a')).replace(
          '"expected_host":"node-a"',
          '"expected_host":"other","expected_host":"node-a"',
        ),
      // The record rules the fleet holds a node to: owner/kind pairing, outcome only on ended
      // records, state/phase, each record once, and records in an unavailable source.
      ...[
        { kind: 'benchmark-job' },
        { state: 'running', phase: 'streaming', outcome: 'success' },
        { state: 'terminal', phase: 'streaming' },
      ].map((change) => () => {
        const r = routerNodeResult('node-a');
        r.sources[0]!.records[0] = { ...r.sources[0]!.records[0]!, ...change } as (typeof r.sources)[0]['records'][0];
        return JSON.stringify(r);
      }),
      () => {
        const r = routerNodeResult('node-a');
        r.sources[0]!.records[1] = r.sources[0]!.records[0]!;
        return JSON.stringify(r);
      },
      () => {
        const r = routerNodeResult('node-a');
        r.sources[0] = {
          owner: 'router',
          status: 'unavailable',
          reason: 'timeout',
          records: r.sources[0]!.records,
          truncation: { returned: 2, omitted: 0 },
        } as (typeof r.sources)[0];
        return JSON.stringify(r);
      },
    ];
    let i = 0;
    const fake = await startFake((_req, res) => sendJson(res, 200, answers[i++]!()));
    try {
      for (const want of [
        /not a valid envelope/,
        /answered for a different node/,
        /not a valid envelope/,
        ...Array.from({ length: 5 }, () => /not a valid envelope/),
      ]) {
        const r = await runCli(
          ['router', 'workloads', '--router-url', fake.url, '--auth-env', READER, '--expected-node', 'node-a'],
          { [READER]: 'reader-token-0123' },
        );
        assert.equal(r.code, 4, r.stderr);
        assert.match(r.stderr, want);
      }
    } finally {
      await fake.close();
    }
    // A "complete" node over an unavailable source is shown as unavailable, never as idle.
    const hopeful = routerNodeResult('node-a');
    hopeful.sources[0] = {
      owner: 'router',
      status: 'unavailable',
      reason: 'timeout',
      records: [],
      truncation: { returned: 0, omitted: null },
    };
    hopeful.truncation = { returned: 0, omitted: 0 };
    const fake2 = await startFake((_req, res) => sendJson(res, 200, hopeful));
    try {
      const r = await runCli(
        ['router', 'workloads', '--router-url', fake2.url, '--auth-env', READER, '--expected-node', 'node-a', '--json'],
        { [READER]: 'reader-token-0123' },
      );
      assert.equal(r.code, 0, r.stderr);
      const body = JSON.parse(r.stdout) as NodeResult;
      assert.deepEqual([body.status, body.truncation.omitted], ['unavailable', null]);
    } finally {
      await fake2.close();
    }
  });

  it('a node controller does not serve fleet_workloads: exit 4 with the fixed message', async () => {
    const r = await runCli(
      ['fleet', 'workloads', '--controller-url', controller.url, '--auth-env', READER, '--expected-node', 'node-c'],
      { [READER]: policy.tokens.reader },
    );
    assert.equal(r.code, 4, r.stderr);
    assert.match(
      r.stderr,
      /^svc-serving: error: the server at --controller-url does not serve fleet reads \(fleet_workloads\): check that it is the fleet controller \(a node controller answers node_workloads; a router answers neither\) of this version\n$/,
    );
  });

  it("renders a fleet built from the real controller's node_workloads (six sources, unavailable ones in words)", async () => {
    const res = await fetch(`${controller.url}/tools/call`, {
      method: 'POST',
      headers: { authorization: `Bearer ${policy.tokens.reader}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'node_workloads', arguments: {} }),
    });
    const node = (await res.json()) as NodeResult;
    assert.ok(checkNodeResult.Check(node));
    const fleet = await startFake((_req, out) => sendJson(out, 200, fleetResult([node])));
    const r = await runCli(
      ['fleet', 'workloads', '--controller-url', fleet.url, '--auth-env', READER, '--expected-node', 'node-c'],
      { [READER]: 'fleet-token' },
    );
    await fleet.close();
    assert.equal(r.code, 0, r.stderr);
    for (const owner of ['router', 'controller', 'benchmark', 'media', 'recipe', 'manifest'])
      assert.match(r.stdout, new RegExp(`  source ${owner}: `));
    assert.match(
      r.stdout,
      /source router: unavailable — NOT idle: the owner could not be read \(no-observation\); returned 0, omitted count unknown/,
    );
    assert.match(r.stdout, /node node-c: (partial|unavailable)/);
    assert.match(r.stdout, /node node-z: unavailable — NOT idle/);
  });

  it('--timeout sets the read timeout: a fleet waiting on a slow node is read with more than the default', async () => {
    const node = controllerNodeResult('node-a');
    // The fleet answers after 1.5 s, as a fleet does while it waits for a hanging node.
    const fleet = await startFake((_req, out) => {
      setTimeout(() => sendJson(out, 200, fleetResult([node])), 1_500);
    });
    const read = (timeout: string): Promise<CliResult> =>
      runCli(
        ['fleet', 'workloads', '--controller-url', fleet.url, '--auth-env', READER, '--expected-node', 'node-a'].concat(
          ['--timeout', timeout],
        ),
        { [READER]: 'fleet-token' },
      );
    try {
      const short = await read('0.5');
      assert.equal(short.code, 4, short.stderr);
      assert.match(short.stderr, /the fleet sent nothing within the read timeout .*give --timeout more than that/);
      const long = await read('4');
      assert.equal(long.code, 0, long.stderr);
      assert.match(long.stdout, /node node-a: /);
    } finally {
      await fleet.close();
    }
  });

  it('invalid usage is exit 2 with a fixed message that names the option and omits the operand', async () => {
    const conn = ['--router-url', 'http://127.0.0.1:9', '--auth-env', READER, '--expected-node', 'node-a'];
    // One case per message and exit path; value grammar is covered in-process (units.test.ts).
    const cases: [string[], RegExp][] = [
      [[...conn, '--bogus-Zq1'], /unknown option/],
      [[...conn, '--own', 'router'], /unknown option/],
      [[...conn, '--owner', 'RouterZq1'], /--owner must be one of router, controller/],
      [[...conn, '--host', '9Zq1'], /--host must be a host ID/],
      [[...conn, '--limit', '1001'], /--limit must be an integer from 1 to 1000/],
      [[...conn, '--active-only', '--active-only'], /more than once/],
      [[...conn, '--router-url', 'http://127.0.0.1:9'], /more than once/],
      [['--router-url', 'http://127.0.0.1:9', '--auth-env', READER], /connection options are required/],
      [
        ['--router-url', 'http://127.0.0.1:9/v1Zq1', '--auth-env', READER, '--expected-node', 'node-a'],
        /must be an origin/,
      ],
      [
        ['--router-url', 'http://Zq1.example.com', '--auth-env', READER, '--expected-node', 'node-a'],
        /plain HTTP is allowed only/,
      ],
      [
        ['--router-url', 'http://127.0.0.1:9', '--auth-env', 'UNSET_Zq1', '--expected-node', 'node-a'],
        /unset or empty/,
      ],
      [
        ['--router-url', 'http://127.0.0.1:9', '--auth-env', READER, '--expected-node', '9Zq1'],
        /--expected-node must be a host ID/,
      ],
      [[...conn, '--timeout', '31'], /--timeout must be a number of seconds greater than 0 and at most 30/],
      [[...conn, '--timeout', '1e1'], /--timeout must be a number of seconds/],
    ];
    const results = await runCliBatch(
      cases.map(([args]) => ({ args: ['router', 'workloads', ...args] })),
      { [READER]: 'tok' },
    );
    results.forEach((r, j) => {
      const [args, message] = cases[j]!;
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, message, args.join(' '));
      assert.equal(r.stdout, '');
      assert.deepEqual(r.uncaught, []);
      assert.ok(
        !r.stderr.includes('Zq1') && !r.stderr.includes('127.0.0.1') && !looksLikeStackTrace(r.stderr),
        r.stderr,
      );
    });
    // And once as a real process: the exit code and the single stderr line.
    const real = await runCli(['router', 'workloads', ...cases[2]![0]], { [READER]: 'tok' });
    assert.equal(real.code, 2);
    assert.equal(
      real.stderr,
      'svc-serving: error: --owner must be one of router, controller, benchmark, media, recipe, manifest (see svc-serving router workloads --help)\n',
    );
  });
});
