import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { sendJson, startFake, type FakeServer } from './fake-servers.js';
import { runCli } from './run-cli.js';
import { CLI } from '../support/processes.js';

/**
 * Runs the CLI on a pseudo-terminal (util-linux `script`), types `keys` once the confirmation
 * prompt shows, and returns its exit code and what the terminal showed.
 */
/** The process IDs below `pid` (its children, theirs, ...), from /proc. */
function descendants(pid: number): number[] {
  let kids: number[] = [];
  try {
    kids = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter((x) => x.length > 0)
      .map(Number);
  } catch {
    // gone
  }
  return kids.flatMap((k) => [k, ...descendants(k)]);
}

/** Runs the CLI on a pseudo-terminal; at the prompt types `keys`, or with a signal name sends it to the CLI's process. */
async function atPrompt(
  args: string[],
  env: Record<string, string>,
  keys: string,
): Promise<{ code: number | null; out: string }> {
  const cmd = [process.execPath, CLI, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
  const child = spawn('script', ['-qec', cmd, '/dev/null'], {
    env: { PATH: process.env['PATH'] ?? '', HOME: process.env['HOME'] ?? '/tmp', TERM: 'dumb', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  let typed = false;
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const kill = setTimeout(() => child.kill('SIGKILL'), 20_000);
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
    if (!typed && out.includes('Proceed? [y/N]')) {
      typed = true;
      if (keys === 'SIGINT') {
        // The CLI itself (not the terminal's line discipline) gets the signal, as from `kill -INT`.
        for (const pid of descendants(child.pid!))
          if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'node') process.kill(pid, 'SIGINT');
      } else child.stdin.write(keys);
    }
  });
  const code = await exited;
  clearTimeout(kill);
  return { code, out };
}

/** `bench run` against controllers that answer wrongly: a fixed line and exit 4, never a wait without end. */
describe('lifecycle commands against a misbehaving controller', () => {
  const servers: FakeServer[] = [];
  after(async () => {
    for (const s of servers) await s.close();
  });
  const token = 'lifecycle-token-0123456789';
  const JOB = 'job_0123456789abcdef0123456789abcdef';
  const controller = async (plan: string[], status: (n: number) => [number, unknown]) => {
    let polls = 0;
    const s = await startFake((_req, res, hit) => {
      if (hit.url === '/v1/lifecycle/plan')
        return sendJson(res, 201, {
          operation_id: 'op_1',
          command: 'benchmark.start',
          plan,
          confirmation_token: 'a'.repeat(48),
          expires_at: '2026-11-26T00:00:00.000Z',
        });
      if (hit.url === '/v1/lifecycle/apply') return sendJson(res, 200, { operation_id: 'op_1', job_id: JOB });
      const [code, body] = status(++polls);
      return sendJson(res, code, body);
    });
    servers.push(s);
    return s;
  };
  const bench = (s: FakeServer) =>
    runCli(
      ['bench', 'run', '--controller-url', s.url, '--auth-env', 'TOK', '--alias', 'm', '--yes'],
      { TOK: token },
      { timeoutMs: 20_000 },
    );

  it('a state the client does not know is a malformed answer (exit 4), not a reason to poll for ever', async () => {
    const s = await controller(['run it'], () => [
      200,
      { id: JOB, state: 'SECRET_STATE', outcome: null, progress: null, summary: null },
    ]);
    const r = await bench(s);
    assert.equal(r.code, 4, r.stderr);
    assert.match(r.stderr, /not a valid envelope of the expected schema/);
    assert.doesNotMatch(r.stderr, /SECRET_STATE/);
  });

  it('bench cancel of a job that was interrupted (no summary recorded) says how far it got, never a summary of zeros', async () => {
    const bench = 'bench_0123456789abcdef01234567';
    const s = await controller(['cancel it'], () => [
      200,
      { id: bench, state: 'interrupted', outcome: 'unknown', progress: { completed: 29, total: 500 }, summary: null },
    ]);
    const r = await runCli(
      ['bench', 'cancel', '--controller-url', s.url, '--auth-env', 'TOK', '--job', bench, '--yes'],
      { TOK: token },
      { timeoutMs: 20_000 },
    );
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /had already ended: nothing to cancel/);
    assert.match(r.stdout, /29 of 500 requests ended before it stopped; no summary was recorded/);
    assert.doesNotMatch(r.stdout, /finished\s+0 /);
  });

  it('plan lines from the server reach the terminal without control characters', async () => {
    const s = await controller(['red \u001b[31mtext\u001b[0m and a bell \u0007', 'x'.repeat(1000)], () => [
      200,
      { id: JOB, state: 'succeeded', outcome: 'success', progress: null, summary: {} },
    ]);
    const r = await bench(s);
    assert.doesNotMatch(r.stderr, /[\u0000-\u0008\u000b-\u001f\u007f]/);
    assert.match(r.stderr, /red \?\[31mtext\?\[0m and a bell \?/);
    assert.ok(!r.stderr.includes('x'.repeat(301)), 'long lines are cut');
  });

  it('at the confirmation prompt on a terminal: Ctrl-C (or kill -INT) is "not started" with exit 130, "n" is "not started" with exit 0; nothing is applied', async () => {
    const s = await controller(['run it'], () => [
      200,
      { id: JOB, state: 'succeeded', outcome: 'success', progress: null, summary: {} },
    ]);
    const args = ['bench', 'run', '--controller-url', s.url, '--auth-env', 'TOK', '--alias', 'm'];
    const ctrlC = await atPrompt(args, { TOK: token }, '\u0003');
    assert.equal(ctrlC.code, 130, ctrlC.out);
    assert.match(ctrlC.out, /Not started \(interrupted\)/);
    assert.doesNotMatch(ctrlC.out, /unexpected failure/);
    const killed = await atPrompt(args, { TOK: token }, 'SIGINT');
    assert.equal(killed.code, 130, killed.out);
    assert.match(killed.out, /Not started \(interrupted\)/);
    const no = await atPrompt(args, { TOK: token }, 'n\r');
    assert.equal(no.code, 0, no.out);
    assert.match(no.out, /Not started\./);
    assert.equal(s.hits.filter((h) => h.url === '/v1/lifecycle/apply').length, 0);
  });

  it("a success status other than the route's own (200 for a plan's 201) is a malformed answer, not a refusal", async () => {
    const s = await startFake((_req, res) => sendJson(res, 200, { operation_id: 'op_1' }));
    servers.push(s);
    const r = await bench(s);
    assert.equal(r.code, 4, r.stderr);
    assert.doesNotMatch(r.stderr, /refused/);
    assert.match(r.stderr, /not a valid envelope of the expected schema/);
  });

  it("lifecycle refusals are said in the lifecycle's words", async () => {
    const forbidden = await startFake((_req, res) =>
      sendJson(res, 403, { type: 'about:blank', title: 'Forbidden', status: 403 }),
    );
    const missing = await startFake((_req, res) =>
      sendJson(res, 404, { type: 'about:blank', title: 'Not found', status: 404 }),
    );
    const odd = await startFake((_req, res) => sendJson(res, 201, ['not', 'an', 'object']));
    servers.push(forbidden, missing, odd);
    const f = await bench(forbidden);
    assert.equal(f.code, 4);
    assert.match(f.stderr, /lacks the node-admin:lifecycle grant \(HTTP 403\)/);
    const m = await bench(missing);
    assert.equal(m.code, 4);
    assert.match(m.stderr, /does not serve lifecycle commands/);
    const o = await bench(odd);
    assert.equal(o.code, 4);
    assert.match(o.stderr, /not a valid envelope of the expected schema/);
  });

  it('a confirmation the controller refuses (the plan expired or was used) says so and to run it again, not "refused the read"', async () => {
    const s = await startFake((_req, res, hit) => {
      if (hit.url === '/v1/lifecycle/plan')
        return sendJson(res, 201, {
          operation_id: 'op_1',
          command: 'benchmark.start',
          plan: ['run it'],
          confirmation_token: 'a'.repeat(48),
          expires_at: '2026-11-26T00:00:00.000Z',
        });
      return sendJson(res, 400, { type: 'urn:svc-serving:problem:invalid-input', title: 'Invalid input', status: 400 });
    });
    servers.push(s);
    const r = await bench(s);
    assert.equal(r.code, 4, r.stderr);
    assert.match(r.stderr, /refused the confirmation \(HTTP 400\): the plan expired .* run the command again/);
    assert.doesNotMatch(r.stderr, /refused the read/);
  });
});
