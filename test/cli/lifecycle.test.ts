import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { sendJson, startFake, type FakeServer } from './fake-servers.js';
import { runCli } from './run-cli.js';

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
      if (hit.url === '/v1/lifecycle/plan') return sendJson(res, 201, { operation_id: 'op_1', command: 'benchmark.start', plan, confirmation_token: 'a'.repeat(48), expires_at: '2026-11-26T00:00:00.000Z' });
      if (hit.url === '/v1/lifecycle/apply') return sendJson(res, 200, { operation_id: 'op_1', job_id: JOB });
      const [code, body] = status(++polls);
      return sendJson(res, code, body);
    });
    servers.push(s);
    return s;
  };
  const bench = (s: FakeServer) => runCli(['bench', 'run', '--controller-url', s.url, '--auth-env', 'TOK', '--alias', 'm', '--yes'], { TOK: token }, { timeoutMs: 20_000 });

  it('a state the client does not know is a malformed answer (exit 4), not a reason to poll for ever', async () => {
    const s = await controller(['run it'], () => [200, { id: JOB, state: 'SECRET_STATE', outcome: null, progress: null, summary: null }]);
    const r = await bench(s);
    assert.equal(r.code, 4, r.stderr);
    assert.match(r.stderr, /not a valid envelope of the expected schema/);
    assert.doesNotMatch(r.stderr, /SECRET_STATE/);
  });

  it('plan lines from the server reach the terminal without control characters', async () => {
    const s = await controller(['red \u001b[31mtext\u001b[0m and a bell \u0007', 'x'.repeat(1000)], () => [200, { id: JOB, state: 'succeeded', outcome: 'success', progress: null, summary: {} }]);
    const r = await bench(s);
    assert.doesNotMatch(r.stderr, /[\u0000-\u0008\u000b-\u001f\u007f]/);
    assert.match(r.stderr, /red \?\[31mtext\?\[0m and a bell \?/);
    assert.ok(!r.stderr.includes('x'.repeat(301)), 'long lines are cut');
  });

  it('lifecycle refusals are said in the lifecycle\'s words', async () => {
    const forbidden = await startFake((_req, res) => sendJson(res, 403, { type: 'about:blank', title: 'Forbidden', status: 403 }));
    const missing = await startFake((_req, res) => sendJson(res, 404, { type: 'about:blank', title: 'Not found', status: 404 }));
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
});
