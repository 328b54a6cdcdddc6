import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { composeHistoryDiagnosis, composeRequestDiagnosis } from '../../src/schema/diagnosis-search.js';
import { formatFleetDiagnosis } from '../../src/cli/fleet-diagnose-command.js';
import { rec } from '../support/terminal-records.js';
import { sendJson, startFake, type FakeServer } from './fake-servers.js';
import { looksLikeStackTrace, runCliBatch } from './run-cli.js';

const TOKEN_VAR = 'SVC_CLI_FLEET_DIAG_TOKEN';
const TOKEN = 'fleet-diag-token-canary-4411';
const enc = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
const NOT_FOUND = { type: 'urn:svc-serving:problem:not-found', title: 'Not found', status: 404 };

describe("fleet diagnose: usage, and what it believes of a fleet's answer", () => {
  let fleet: FakeServer;
  // What the fake fleet answers next, by the request id asked.
  const answers = new Map<string, { status: number; body: unknown }>();
  before(async () => {
    fleet = await startFake((_req, res, hit) => {
      const call = JSON.parse(hit.body) as { arguments: { request_id?: string } };
      const a = answers.get(call.arguments.request_id ?? '') ?? { status: 500, body: {} };
      // A fleet still waiting for a hung node (its node_timeout_ms) answers late.
      if (call.arguments.request_id === 'slow-id') setTimeout(() => sendJson(res, a.status, a.body), 1_500);
      else sendJson(res, a.status, a.body);
    });
    answers.set('found-id', {
      status: 200,
      body: composeRequestDiagnosis('found-id', [
        { host: 'node-a', answer: { kind: 'reply', data: enc({ request: rec({ request_id: 'found-id' }) }) } },
      ]),
    });
    answers.set('other-id', {
      status: 200,
      body: composeRequestDiagnosis('found-id', [
        { host: 'node-a', answer: { kind: 'reply', data: enc({ request: rec({ request_id: 'found-id' }) }) } },
      ]),
    });
    answers.set('half-id', {
      status: 200,
      body: composeRequestDiagnosis('half-id', [
        { host: 'node-a', answer: { kind: 'reply', data: enc(NOT_FOUND) } },
        { host: 'node-b', answer: { kind: 'unreachable' } },
      ]),
    });
    answers.set('bad-shape', { status: 200, body: { schema: 'svc-router-diagnosis/v1', request: null } });
    answers.set('forbidden', { status: 403, body: { title: 'x' } });
    answers.set('missing', { status: 404, body: {} });
    answers.set('slow-id', {
      status: 200,
      body: composeRequestDiagnosis('slow-id', [{ host: 'node-a', answer: { kind: 'unreachable' } }]),
    });
  });
  after(async () => fleet?.close());

  const run = (...args: string[]) => ({ args: ['fleet', 'diagnose', ...args], env: { [TOKEN_VAR]: TOKEN } });
  const conn = () => ['--fleet-url', fleet.url, '--auth-env', TOKEN_VAR];

  it('usage errors are exit 2 with a fixed line that repeats nothing given', async () => {
    const results = await runCliBatch([
      run(...conn()),
      run('a', '--session-id', 's', ...conn()),
      run('has space', ...conn()),
      run('--task-id', 'bad task', ...conn()),
      run('found-id', '--fleet-url', fleet.url),
      run('found-id', '--fleet-url', 'http://example.com', '--auth-env', TOKEN_VAR),
      run('found-id', ...conn(), '--timeout', '0'),
      run('found-id', ...conn(), '--json', '--json'),
      run('found-id', '--fleet-url', fleet.url, '--auth-env', 'BAD NAME'),
    ]);
    for (const r of results) {
      assert.equal(r.code, 2, `${r.args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /^svc-serving: error: /);
      assert.ok(!r.stderr.includes('has space') && !r.stderr.includes('bad task') && !r.stderr.includes(TOKEN));
      assert.ok(!looksLikeStackTrace(r.stderr));
    }
    assert.match(results[0]!.stderr, /give exactly one of: a request id, --session-id, --task-id, --workbench-run-id/);
    assert.match(results[4]!.stderr, /--fleet-url and --auth-env/);
  });

  it('prints a found record with its host (exit 0); a half-answered search says so (exit 0)', async () => {
    const [found, half] = await runCliBatch([run('found-id', ...conn()), run('half-id', ...conn())]);
    assert.equal(found!.code, 0, found!.stderr);
    assert.match(
      found!.stdout,
      /^host: node-a\nsearch: asked 1 of 1 declared node; 1 answered; held by node-a\nRequest found-id: /,
    );
    assert.equal(half!.code, 0, half!.stderr);
    assert.match(half!.stdout, /Not found on the nodes that answered; 1 node could not be asked/);
    assert.doesNotMatch(half!.stdout, /No terminal record/);
    const sent = JSON.parse(fleet.hits.find((h) => h.body.includes('found-id'))!.body) as unknown;
    assert.deepEqual(sent, { name: 'request_diagnosis', arguments: { request_id: 'found-id' } });
    assert.equal(fleet.hits[0]!.url, '/tools/call');
  });

  it('an answer about another request, a malformed one, or a refusal is exit 4 with a fixed line', async () => {
    const results = await runCliBatch([
      run('other-id', ...conn()),
      run('bad-shape', ...conn()),
      run('forbidden', ...conn()),
      run('missing', ...conn()),
    ]);
    assert.deepEqual(
      results.map((r) => r.code),
      [4, 4, 4, 4],
    );
    assert.match(results[0]!.stderr, /record of a different request/);
    assert.match(results[1]!.stderr, /not a valid envelope/);
    assert.match(results[2]!.stderr, /lacks the requests:read grant/);
    assert.match(results[3]!.stderr, /does not serve request diagnosis/);
    for (const r of results) assert.equal(r.stdout, '');
  });

  it('a fleet that answers after --timeout: exit 4, and the line says the fleet waits for its nodes (node_timeout_ms)', async () => {
    const [late, waited] = await runCliBatch([
      run('slow-id', ...conn(), '--timeout', '0.3'),
      run('slow-id', ...conn(), '--timeout', '5'),
    ]);
    assert.equal(late!.code, 4);
    assert.equal(late!.stdout, '');
    assert.equal(
      late!.stderr,
      'svc-serving: error: the fleet sent nothing within the read timeout (it waits up to its node_timeout_ms for a node that does not answer: give --timeout more than that)\n',
    );
    assert.equal(waited!.code, 0, waited!.stderr);
    assert.match(waited!.stdout, /could not be asked \(no answer from its router\): node-a/);
  });

  it('a sleeping node was not searched: a not-found or a session says so, naming it', () => {
    const asleep = { host: 'node-b', answer: { kind: 'sleeping' } } as const;
    const notFound = formatFleetDiagnosis(
      { name: 'request_diagnosis', arguments: { request_id: 'x-2' } },
      composeRequestDiagnosis('x-2', [{ host: 'node-a', answer: { kind: 'reply', data: enc(NOT_FOUND) } }, asleep]),
    );
    assert.match(
      notFound,
      /^search: asked 1 of 2 declared nodes \(1 sleeping: node-b\); 1 answered\nNot searched: 1 sleeping node \(node-b\), whose records are not seen while it is declared sleeping\.\nNo terminal record/,
    );
    const session = formatFleetDiagnosis(
      { name: 'session_diagnosis', key: 'session_id', value: 's-2', arguments: { session_id: 's-2' } },
      composeHistoryDiagnosis('session_id', 's-2', [
        {
          host: 'node-a',
          answer: { kind: 'reply', data: enc({ requests: [], truncation: { returned: 0, omitted: 0 } }) },
        },
        asleep,
      ]),
    );
    assert.match(session, /\nNot searched: 1 sleeping node \(node-b\)/);
    // Found on an awake node: nothing to add.
    const found = formatFleetDiagnosis(
      { name: 'request_diagnosis', arguments: { request_id: 'found-id' } },
      composeRequestDiagnosis('found-id', [
        { host: 'node-a', answer: { kind: 'reply', data: enc({ request: rec({ request_id: 'found-id' }) }) } },
        asleep,
      ]),
    );
    assert.doesNotMatch(found, /Not searched/);
  });

  it('the human text names what was asked and never says "on the nodes that answered" when none did', () => {
    const empty = enc({ requests: [], truncation: { returned: 0, omitted: 0 } });
    const task = { name: 'session_diagnosis', key: 'task_id', value: 't-1', arguments: { task_id: 't-1' } } as const;
    const run = {
      name: 'session_diagnosis',
      key: 'workbench_run_id',
      value: 'w-1',
      arguments: { workbench_run_id: 'w-1' },
    } as const;
    const taskText = formatFleetDiagnosis(
      task,
      composeHistoryDiagnosis('task_id', 't-1', [{ host: 'node-a', answer: { kind: 'reply', data: empty } }]),
    );
    assert.match(taskText, /No retained terminal record for this task on the routers searched\./);
    // fleet diagnose has no --active: the hint names the command that has.
    assert.match(
      taskText,
      /may still be active\n\(svc-serving router diagnose --active against a router lists its own\)/,
    );
    assert.doesNotMatch(taskText, /try --active/);
    assert.doesNotMatch(taskText, /session/);
    assert.match(
      formatFleetDiagnosis(
        run,
        composeHistoryDiagnosis('workbench_run_id', 'w-1', [
          { host: 'node-a', answer: { kind: 'reply', data: empty } },
        ]),
      ),
      /No retained terminal record for this workbench run on the routers searched\./,
    );
    // Nobody answered: not "found nothing on the nodes that answered".
    const none = formatFleetDiagnosis(
      { name: 'request_diagnosis', arguments: { request_id: 'x-1' } },
      composeRequestDiagnosis('x-1', [
        { host: 'node-a', answer: { kind: 'unreachable' } },
        { host: 'node-b', answer: { kind: 'unreachable' } },
      ]),
    );
    assert.match(none, /\nNo node answered; 2 nodes could not be asked, and the record may be there\./);
    assert.doesNotMatch(none, /nodes that answered/);
    const noneTask = formatFleetDiagnosis(
      task,
      composeHistoryDiagnosis('task_id', 't-1', [{ host: 'node-a', answer: { kind: 'unreachable' } }]),
    );
    assert.match(noneTask, /\nNo node answered; 1 could not be asked, and may hold more\./);
    // Some answered: the wording stays.
    const half = formatFleetDiagnosis(
      task,
      composeHistoryDiagnosis('task_id', 't-1', [
        { host: 'node-a', answer: { kind: 'reply', data: empty } },
        { host: 'node-b', answer: { kind: 'unreachable' } },
      ]),
    );
    assert.match(half, /\nNothing found on the nodes that answered; 1 could not be asked/);
  });
});
