import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { freePort } from '../support/free-port.js';
import {
  fleetResult,
  ROUTER_STATUS,
  controllerNodeResult,
  routerNodeResult,
  sendJson,
  startFake,
  terminalRecord,
  type FakeServer,
} from './fake-servers.js';
import { looksLikeStackTrace, runCli, runCliBatch, type CliResult } from './run-cli.js';

// Each CLI process costs about a CPU-second of module loading, so most runs go through the
// in-process driver (fuzz-driver.ts, still the built main.js), and a few as real processes.
const RUNS = Number(process.env['SVC_CLI_FUZZ_RUNS'] ?? 100);
const PROCESS_RUNS = Number(process.env['SVC_CLI_FUZZ_PROCESS_RUNS'] ?? 4);
const SEED = Number(process.env['SVC_CLI_FUZZ_SEED'] ?? Date.now() % 2 ** 31);
const PARALLEL = 4;

function problems(r: { code: number | null; stderr: string }): string[] {
  return [
    ![0, 2, 4].includes(r.code ?? -1) && `exit ${r.code}`,
    looksLikeStackTrace(r.stderr) && 'stack trace',
    r.code !== 0 && r.stderr.split('\n').filter(Boolean).length !== 1 && 'not one error line',
  ].filter((x): x is string => typeof x === 'string');
}

describe('argument fuzz of the read commands (built CLI)', () => {
  let server: FakeServer;
  let closed: string;
  before(async () => {
    const node = routerNodeResult('node-a');
    server = await startFake((req, res) => {
      const url = req.url ?? '';
      if (url.startsWith('/v1/workloads')) sendJson(res, 200, node);
      else if (url === '/tools/call') sendJson(res, 200, fleetResult([controllerNodeResult('node-a')]));
      else if (url === '/v1/router/status') sendJson(res, 200, ROUTER_STATUS);
      else if (url.startsWith('/v1/requests/')) sendJson(res, 200, { request: terminalRecord() });
      else if (url.startsWith('/v1/requests?'))
        sendJson(res, 200, { requests: [], truncation: { returned: 0, omitted: 0 } });
      else sendJson(res, 404, {});
    });
    closed = `http://127.0.0.1:${await freePort()}`;
  });
  after(() => server?.close());

  function argvArbitrary(): fc.Arbitrary<string[]> {
    const command = fc.constantFrom(
      ['router', 'workloads'],
      ['fleet', 'workloads'],
      ['router', 'diagnose'],
      ['router'],
      ['fleet', 'diagnose'],
      [],
    );
    const option = fc.constantFrom(
      '--router-url',
      '--controller-url',
      '--auth-env',
      '--expected-node',
      '--owner',
      '--kind',
      '--state',
      '--host',
      '--active-only',
      '--recent-seconds',
      '--limit',
      '--json',
      '--active',
      '--session-id',
      '--config',
      '--timeout',
      '--bogus',
      '--owner=media',
      '-x',
      '--',
      '--help',
      '--limit=5',
      '--active-only=true',
    );
    const value = fc.oneof(
      fc.constantFrom(
        server.url,
        closed,
        'http://example.com',
        'https://[::1',
        'http://0x7f.1:1',
        'http://[::ffff:127.0.0.1]:1',
        'HTTP_OK',
        'UNSET_VAR',
        'bad-env',
        'node-a',
        'node-b',
        '9bad',
        'router',
        'Router',
        'media',
        'router-request',
        'running',
        'terminal',
        '0',
        '1',
        '5',
        '1000',
        '1001',
        '86400',
        '86401',
        '-1',
        '1e3',
        '0.5',
        '30',
        '31',
        '',
        ' ',
        'req_0123456789abcdef0123456789abcdef',
        'legacy.id',
        'sess-1',
        '/nonexistent.toml',
        'ü',
        '%00',
        '\u001b[31m',
        'a'.repeat(300),
      ),
      fc.string({ maxLength: 12 }).map((s) => s.replace(/\0/g, '')),
    );
    return fc.tuple(command, fc.array(fc.oneof(option, value), { maxLength: 10 })).map(([c, rest]) => [...c, ...rest]);
  }
  const env = (): Record<string, string> => ({
    HTTP_OK: 'fuzz-token',
    SVC_ROUTER_TOKEN: 'fuzz-token',
    SVC_ROUTER_URL: server.url,
  });

  it(`never prints a stack trace and exits only 0, 2 or 4 (${RUNS} runs through main.js in one process)`, async () => {
    const samples = fc.sample(argvArbitrary(), { numRuns: RUNS, seed: SEED });
    const results = await runCliBatch(
      samples.map((args) => ({ args })),
      env(),
    );
    assert.equal(results.length, samples.length);
    const bad = results
      .map((r) => [...problems(r), ...r.uncaught.map((u) => `uncaught: ${u.slice(0, 300)}`)])
      .map((why, i) =>
        why.length > 0
          ? `${why.join(', ')}: ${JSON.stringify(results[i]!.args)}\n${results[i]!.stderr.slice(0, 500)}`
          : '',
      )
      .filter(Boolean);
    assert.deepEqual(bad, [], `seed ${SEED}`);
    assert.ok(
      results.some((r) => r.code === 0) && results.some((r) => r.code === 2),
      'the fuzz reaches both success and usage errors',
    );
  });

  it(`the same holds for separate CLI processes (${PROCESS_RUNS} runs)`, async () => {
    const samples = fc.sample(argvArbitrary(), { numRuns: PROCESS_RUNS, seed: SEED + 1 });
    const bad: string[] = [];
    for (let i = 0; i < samples.length; i += PARALLEL) {
      const batch = samples.slice(i, i + PARALLEL);
      const results: CliResult[] = await Promise.all(batch.map((args) => runCli(args, env(), { timeoutMs: 30_000 })));
      results.forEach((r, j) => {
        const why = problems(r);
        if (why.length > 0) bad.push(`${why.join(', ')}: ${JSON.stringify(batch[j])}\n${r.stderr.slice(0, 500)}`);
      });
    }
    assert.deepEqual(bad, [], `seed ${SEED + 1}`);
  });
});
