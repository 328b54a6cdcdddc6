import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../support/free-port.js';
import {
  fleetResult,
  controllerNodeResult,
  routerNodeResult,
  sendJson,
  startFake,
  startTrapProxy,
  type FakeServer,
  type TrapProxy,
} from './fake-servers.js';
import { cliHome, looksLikeStackTrace, runCli, runCliBatch, type CliResult } from './run-cli.js';

// A canary credential: it must reach the fake server's Authorization header and nothing else.
const CANARY = `CANARY-${randomBytes(16).toString('hex')}`;
const ENV_NAME = 'SVC_CANARY_CRED_VAR';
const BODY_MARKER = 'BODY-MARKER-must-not-be-echoed';
const NODE = routerNodeResult('node-a');
const FLEET = fleetResult([controllerNodeResult('node-a'), controllerNodeResult('node-b')]);
const outputs: { stdout: string; stderr: string }[] = [];
const workdir = mkdtempSync(join(tmpdir(), 'svc-cli-cwd-'));

const workloadArgs = (url: string): string[] => [
  'router',
  'workloads',
  '--router-url',
  url,
  '--auth-env',
  ENV_NAME,
  '--expected-node',
  'node-a',
];

/** `router workloads` against `url`, with the canary credential. */
async function rw(url: string, extra: string[] = [], env: Record<string, string> = {}): Promise<CliResult> {
  const r = await runCli(
    ['router', 'workloads', '--router-url', url, '--auth-env', ENV_NAME, '--expected-node', 'node-a', ...extra],
    { [ENV_NAME]: CANARY, ...env },
    { cwd: workdir },
  );
  outputs.push(r);
  return r;
}

function assertFixedFailure(
  r: { code: number | null; stdout: string; stderr: string; uncaught?: string[] },
  url: string,
  message: RegExp,
): void {
  assert.deepEqual(r.uncaught ?? [], []);
  assert.equal(r.code, 4, r.stderr);
  assert.equal(r.stdout, '');
  assert.match(r.stderr, message);
  assert.equal(r.stderr.split('\n').filter(Boolean).length, 1, 'one line');
  const port = new URL(url).port;
  for (const leak of [url, port, ENV_NAME, BODY_MARKER, CANARY, '127.0.0.1'])
    assert.ok(!r.stderr.includes(leak), `stderr leaks ${leak}`);
  assert.ok(!looksLikeStackTrace(r.stderr));
}

describe('CLI connection safety (built CLI against in-test servers)', () => {
  let ok: FakeServer;
  let trap: TrapProxy;
  before(async () => {
    trap = await startTrapProxy();
    ok = await startFake((req, res) => {
      if (req.url?.startsWith('/v1/workloads')) sendJson(res, 200, NODE);
      else if (req.url === '/tools/call') sendJson(res, 200, FLEET);
      else sendJson(res, 404, { title: BODY_MARKER });
    });
  });
  after(async () => {
    await ok.close();
    await trap.close();
    rmSync(workdir, { recursive: true, force: true });
  });

  it('--json prints exactly the NodeResult the server sent, and sends only the credential and present filters', async () => {
    const r = await rw(ok.url, ['--owner', 'router', '--limit', '5', '--json']);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), NODE);
    let hit = ok.hits.at(-1)!;
    assert.equal(hit.method, 'GET');
    assert.equal(hit.url, '/v1/workloads?owner=router&limit=5');
    assert.equal(hit.headers.authorization, `Bearer ${CANARY}`);
    assert.equal(hit.headers['idempotency-key'], undefined);
    // Asked for active work only, an answer holding a terminal record is not what was asked: malformed.
    const active = await rw(ok.url, ['--owner', 'router', '--active-only', '--limit', '5', '--json']);
    hit = ok.hits.at(-1)!;
    assert.equal(hit.url, '/v1/workloads?owner=router&active_only=true&limit=5');
    assert.equal(active.code, 4);
    assert.match(active.stderr, /not a valid envelope of the expected schema/);
  });

  it('prints a table with ages and a source line without colour when stdout is not a terminal', async () => {
    const r = await rw(ok.url);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^HOST\s+OWNER\s+KIND\s+STATE\s+PHASE\s+OUTCOME\s+PROGRESS\s+QUALITY\s+AGE$/m);
    assert.match(r.stdout, /node-a\s+router\s+router-request\s+streaming\s+streaming\s+-\s+-\s+recorded\s+3s/);
    assert.match(r.stdout, /terminal\s+completed\s+success\s+-\s+recorded\s+2m/);
    assert.match(r.stdout, /source router: complete; returned 2, omitted 0/);
    assert.ok(!r.stdout.includes('\u001b'), 'no escape codes when piped');
  });

  it('fleet workloads posts fleet_workloads with present filters and labels every node', async () => {
    const args = [
      'fleet',
      'workloads',
      '--controller-url',
      ok.url,
      '--auth-env',
      ENV_NAME,
      '--expected-node',
      'node-b',
      '--kind',
      'router-request',
      '--recent-seconds',
      '300',
    ];
    const r = await runCli(args, { [ENV_NAME]: CANARY }, { cwd: workdir });
    outputs.push(r);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(JSON.parse(ok.hits.at(-1)!.body), {
      name: 'fleet_workloads',
      arguments: { kind: 'router-request', recent_seconds: 300 },
    });
    assert.match(
      r.stdout,
      /node node-z: unavailable — NOT idle: the node could not be read \(unreachable\); returned 0, omitted count unknown/,
    );
    assert.match(
      r.stdout,
      /fleet: partial — trust these records, but this is not the whole inventory; returned 4, omitted count unknown/,
    );
    const [j, other] = await Promise.all([
      runCli([...args, '--json'], { [ENV_NAME]: CANARY }, { cwd: workdir }),
      runCli([...args.slice(0, 6), '--expected-node', 'node-q'], { [ENV_NAME]: CANARY }, { cwd: workdir }),
    ]);
    outputs.push(j, other);
    assert.deepEqual(JSON.parse(j.stdout), FLEET);
    assertFixedFailure(other, ok.url, /the fleet result has no entry for --expected-node/);
  });

  it('a fleet result of thousands of declared nodes (over 1 MiB) is read; over 16 MiB it is refused', async () => {
    const base = fleetResult([controllerNodeResult('node-b')]);
    const gone = base.nodes.at(-1)!;
    const many = Array.from({ length: 6000 }, (_, i) => ({ ...gone, expected_host: `gone-${i}` }));
    const big = { ...base, nodes: [...base.nodes, ...many] };
    const large = await startFake((_req, res) => sendJson(res, 200, big));
    const huge = await startFake((_req, res) => sendJson(res, 200, `{"pad":"${'x'.repeat(17 * 1024 * 1024)}"}`));
    try {
      assert.ok(JSON.stringify(big).length > 1024 * 1024, 'the fixture is over the node read bound');
      const args = (url: string) => [
        'fleet',
        'workloads',
        '--controller-url',
        url,
        '--auth-env',
        ENV_NAME,
        '--expected-node',
        'node-b',
      ];
      const [r, over] = await runCliBatch([{ args: args(large.url) }, { args: args(huge.url) }], {
        [ENV_NAME]: CANARY,
      });
      assert.equal(r!.code, 0, r!.stderr);
      assert.match(r!.stdout, /node node-b/);
      assert.equal(over!.code, 4);
      assert.match(over!.stderr, /exceeded the size limit \(16 MiB for fleet reads/);
    } finally {
      await Promise.all([large.close(), huge.close()]);
    }
  });

  it('ignores proxy environment variables, NODE_USE_ENV_PROXY included', async () => {
    const env = {
      HTTP_PROXY: trap.url,
      HTTPS_PROXY: trap.url,
      ALL_PROXY: trap.url,
      http_proxy: trap.url,
      https_proxy: trap.url,
      all_proxy: trap.url,
      NODE_USE_ENV_PROXY: '1',
      NO_PROXY: '',
      no_proxy: '',
    };
    const [r, d] = await Promise.all([
      rw(ok.url, ['--json'], env),
      runCli(['router', 'diagnose', '--active', '--router-url', ok.url, '--auth-env', ENV_NAME], {
        [ENV_NAME]: CANARY,
        ...env,
      }),
    ]);
    assert.equal(r.code, 0, r.stderr);
    outputs.push(d);
    assert.equal(d.code, 4, 'the fake serves no request lookup');
    assert.equal(trap.connections(), 0, 'the trap proxy saw a connection');
  });

  it('never follows a redirect: exit 4 and the target sees nothing', async () => {
    const target = await startFake((_req, res) => sendJson(res, 200, NODE));
    const redirectors = await Promise.all(
      [301, 302, 303, 307, 308].map((status) =>
        startFake((_req, res) => res.writeHead(status, { location: `${target.url}/v1/workloads` }).end(BODY_MARKER)),
      ),
    );
    assertFixedFailure(await rw(redirectors[1]!.url), redirectors[1]!.url, /redirect; redirects are never followed/);
    const results = await runCliBatch(
      redirectors.map((r) => ({ args: workloadArgs(r.url) })),
      { [ENV_NAME]: CANARY },
    );
    outputs.push(...results);
    results.forEach((r, i) => assertFixedFailure(r, redirectors[i]!.url, /redirect; redirects are never followed/));
    assert.equal(target.hits.length, 0);
    await Promise.all([target, ...redirectors].map((s) => s.close()));
  });

  it('answers 401, 403, 404, 405, 4xx, 5xx, malformed and foreign bodies with fixed messages (exit 4)', async () => {
    const cases: [(res: import('node:http').ServerResponse) => void, RegExp][] = [
      [(res) => sendJson(res, 401, { title: BODY_MARKER }), /did not accept the credential \(HTTP 401\)/],
      [(res) => sendJson(res, 403, { title: BODY_MARKER }), /lacks the workloads:read grant/],
      [
        (res) => sendJson(res, 404, { title: BODY_MARKER }),
        /the server at --router-url does not serve workload reads \(GET \/v1\/workloads\): check that it is a router/,
      ],
      [(res) => sendJson(res, 405, { title: BODY_MARKER }), /does not serve workload reads/],
      [(res) => sendJson(res, 400, { title: BODY_MARKER }), /refused the read \(HTTP 400\)/],
      [(res) => sendJson(res, 429, { title: BODY_MARKER }), /refused the read \(HTTP 429\)/],
      [(res) => sendJson(res, 503, { title: BODY_MARKER }), /failed to answer \(HTTP 503\)/],
      [(res) => sendJson(res, 200, `{"schema": "${BODY_MARKER}"`), /not a valid envelope/],
      [(res) => sendJson(res, 200, { ...NODE, extra: BODY_MARKER }), /not a valid envelope/],
      [
        (res) => sendJson(res, 200, { ...NODE, expected_host: 'node-b' }),
        /answered for a different node than --expected-node/,
      ],
      [(res) => sendJson(res, 200, `{"pad":"${'x'.repeat(1100 * 1024)}"}`), /exceeded the size limit/],
      [
        (res) => {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.write(`{"pad":"${'x'.repeat(600 * 1024)}`);
          setTimeout(() => res.end(`${'x'.repeat(600 * 1024)}"}`), 50);
        },
        /exceeded the size limit/,
      ],
    ];
    const closed = `http://127.0.0.1:${await freePort()}`;
    const servers = await Promise.all(cases.map(([answer]) => startFake((_req, res) => answer(res))));
    const urls = [...servers.map((s) => s.url), closed];
    const results = await runCliBatch(
      urls.map((url) => ({ args: workloadArgs(url) })),
      { [ENV_NAME]: CANARY },
    );
    outputs.push(...results);
    results.forEach((r, i) =>
      assertFixedFailure(r, urls[i]!, i < cases.length ? cases[i]![1] : /could not connect to the server/),
    );
    await Promise.all(servers.map((s) => s.close()));
  });

  it('the controller variant says the controller does not serve fleet reads', async () => {
    const s = await startFake((_req, res) => sendJson(res, 404, { title: BODY_MARKER }));
    const r = await runCli(
      ['fleet', 'workloads', '--controller-url', s.url, '--auth-env', ENV_NAME, '--expected-node', 'node-a'],
      { [ENV_NAME]: CANARY },
      { cwd: workdir },
    );
    outputs.push(r);
    assertFixedFailure(
      r,
      s.url,
      /the server at --controller-url does not serve fleet reads \(fleet_workloads\): check that it is the fleet controller/,
    );
    await s.close();
  });

  it("fleet workloads holds the fleet controller to the fleet's own checks: lowered when hopeful, refused when reshaped", async () => {
    const fleetArgs = (url: string) => [
      'fleet',
      'workloads',
      '--controller-url',
      url,
      '--auth-env',
      ENV_NAME,
      '--expected-node',
      'node-a',
    ];
    const serve = (body: unknown) => startFake((_req, res) => sendJson(res, 200, body));
    // Hopeful: a `complete` fleet with an unreachable node, a `complete` node over an unavailable source.
    const hopeful = fleetResult([controllerNodeResult('node-a')]);
    hopeful.status = 'complete';
    const node = hopeful.nodes[0]!;
    node.sources[4] = {
      owner: 'recipe',
      status: 'unavailable',
      reason: 'no-observation',
      records: [],
      truncation: { returned: 0, omitted: null },
    };
    const lowered = await serve(hopeful);
    const r = await runCli(fleetArgs(lowered.url), { [ENV_NAME]: CANARY }, { cwd: workdir });
    outputs.push(r);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /node node-a: partial/);
    assert.match(r.stdout, /fleet: partial/);
    assert.doesNotMatch(r.stdout, /: complete —/);
    await lowered.close();
    // Reshaped: each is a malformed answer, never shown.
    const foreign = fleetResult([controllerNodeResult('node-a')]);
    foreign.nodes[0]!.sources[0]!.records[0]!.host = 'node-b';
    const twice = fleetResult([controllerNodeResult('node-a'), controllerNodeResult('node-a')]);
    const counts = fleetResult([controllerNodeResult('node-a')]);
    counts.truncation.returned = 999;
    const conditioned = fleetResult([controllerNodeResult('node-a')]);
    conditioned.nodes[0]!.condition = 'unreachable';
    const cases: [unknown, RegExp][] = [
      [foreign, /the fleet result shows a node with records of another host/],
      [twice, /not a valid envelope/],
      [counts, /not a valid envelope/],
      [conditioned, /not a valid envelope/],
    ];
    for (const [body, message] of cases) {
      const s = await serve(body);
      const x = await runCli(fleetArgs(s.url), { [ENV_NAME]: CANARY }, { cwd: workdir });
      outputs.push(x);
      assertFixedFailure(x, s.url, message);
      await s.close();
    }
  });

  // Timings are taken on the server side (headers sent -> client gone), so the CLI's own
  // start-up time, which varies with machine load, does not blur the per-read semantics.
  it('--timeout is per socket read: a trickling body outlives it, a stalled one fails within it', async () => {
    const spans = new Map<string, { start: number; end?: number }>();
    const slow = await startFake((req, res) => {
      if (req.url === '/v1/router/status') return sendJson(res, 500, {});
      const kind = req.url?.includes('session_id=stall') ? 'stall' : 'trickle';
      const span: { start: number; end?: number } = { start: Date.now() };
      spans.set(kind, span);
      res.on('close', () => (span.end = Date.now()));
      res.writeHead(200, { 'content-type': 'application/json' });
      if (kind === 'stall') return void res.write(' '); // headers, one byte, then nothing
      // One byte a second for four seconds (JSON allows leading whitespace), then the body.
      let n = 0;
      const t = setInterval(() => {
        if (++n <= 4) res.write(' ');
        else {
          clearInterval(t);
          res.end(JSON.stringify({ requests: [], truncation: { returned: 0, omitted: 0 } }));
        }
      }, 1000);
      res.on('close', () => clearInterval(t));
    });
    const diag = (sid: string) =>
      runCli(['router', 'diagnose', '--session-id', sid, '--timeout', '2', '--router-url', slow.url, '--json'], {
        SVC_ROUTER_TOKEN: CANARY,
      });
    const [trickle, stall] = await Promise.all([diag('trickle'), diag('stall')]);
    outputs.push(trickle, stall);
    assert.equal(trickle.code, 0, trickle.stderr);
    assert.equal(JSON.parse(trickle.stdout).current_router.unavailable, true);
    const tr = spans.get('trickle')!;
    assert.ok(tr.end! - tr.start > 3900, `the trickle lasted ${tr.end! - tr.start} ms, longer than --timeout`);
    assertFixedFailure(stall, slow.url, /sent nothing within the read timeout/);
    const st = spans.get('stall')!;
    assert.ok(
      st.end! - st.start >= 1900 && st.end! - st.start < 2000 + 1600,
      `the stalled read was dropped after ${st.end! - st.start} ms`,
    );
    await slow.close();
  });

  it('a server that never answers fails within about --timeout', async () => {
    let span: { start: number; end?: number } | undefined;
    const silent = await startFake((req) => {
      span ??= { start: Date.now() };
      const s = span;
      req.socket.on('close', () => (s.end = Date.now()));
    });
    const r = await runCli(
      ['router', 'diagnose', 'req_00000000000000000000000000000000', '--timeout', '1', '--router-url', silent.url],
      { SVC_ROUTER_TOKEN: CANARY },
    );
    outputs.push(r);
    assertFixedFailure(r, silent.url, /sent nothing within the read timeout/);
    assert.ok(
      span?.end !== undefined && span.end - span.start < 1000 + 1600,
      `dropped after ${span && span.end! - span.start} ms`,
    );
    await silent.close();
  });

  it('the canary credential appears in no output and no file', () => {
    assert.ok(outputs.length > 10);
    for (const r of outputs) {
      assert.ok(!r.stdout.includes(CANARY) && !r.stderr.includes(CANARY));
      assert.ok(!looksLikeStackTrace(r.stderr));
    }
    const scan = (dir: string): void => {
      for (const name of readdirSync(dir)) {
        const p = join(dir, name);
        if (statSync(p).isDirectory()) scan(p);
        else assert.ok(!readFileSync(p, 'utf8').includes(CANARY), 'a file holds the canary');
      }
    };
    scan(workdir);
    scan(cliHome());
  });
});
