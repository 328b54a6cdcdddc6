import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  checkFleetDiagnosis,
  composeHistoryDiagnosis,
  composeRequestDiagnosis,
  diagnosisConsistent,
  MAX_LISTED_HOSTS,
  type AskedNode,
} from '../../src/schema/diagnosis-search.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { parseRequestDiagnosisArgs, parseSessionDiagnosisArgs } from '../../src/mcp/request-tools.js';
import { gid, rec } from '../support/terminal-records.js';

const enc = (v: unknown) => new TextEncoder().encode(typeof v === 'string' ? v : JSON.stringify(v));
const reply = (host: string, v: unknown): AskedNode => ({ host, answer: { kind: 'reply', data: enc(v) } });
const down = (host: string): AskedNode => ({ host, answer: { kind: 'unreachable' } });
const asleep = (host: string): AskedNode => ({ host, answer: { kind: 'sleeping' } });
const NOT_FOUND = { type: 'urn:svc-serving:problem:not-found', title: 'Not found', status: 404 };

describe('fleet request diagnosis composition (pure)', () => {
  it('one holder: its record interpreted as router diagnose does, its host, and the search', () => {
    const r = rec({ request_id: gid(5), finish_reason: 'length', admission_wait_ms: 900 });
    const d = composeRequestDiagnosis(gid(5), [reply('a', NOT_FOUND), reply('b', { request: r }), asleep('s')]);
    assert.ok(checkFleetDiagnosis.Check(d));
    assert.equal(d.host, 'b');
    assert.equal(d.request!.request_id, gid(5));
    assert.ok(d.interpretation.includes('length_finish'));
    assert.deepEqual(d.current_router, { unavailable: true });
    assert.deepEqual(d.search, {
      outcome: 'found',
      declared: 3,
      asked: 2,
      answered: 2,
      holders: { count: 1, hosts: ['b'] },
      unreachable: { count: 0, hosts: [] },
      failed: { count: 0, hosts: [] },
      sleeping: { count: 1, hosts: ['s'] },
    });
  });

  it('never says not found while a node could not be asked', () => {
    const d = composeRequestDiagnosis(gid(5), [reply('a', NOT_FOUND), down('c')]);
    assert.equal(d.search.outcome, 'incomplete');
    assert.deepEqual(d.interpretation, [], 'no not-found code while a node is unasked');
    assert.deepEqual(d.search.unreachable.hosts, ['c']);
    const all = composeRequestDiagnosis(gid(5), [reply('a', NOT_FOUND), reply('b', NOT_FOUND)]);
    assert.equal(all.search.outcome, 'not_found');
    assert.deepEqual(all.interpretation, ['not_found_maybe_active_or_evicted']);
  });

  it('several holders of a legacy id are listed, each with its host; none is chosen', () => {
    const d = composeRequestDiagnosis('legacy-1', [
      reply('a', { request: rec({ request_id: 'legacy-1' }) }),
      reply('b', { request: rec({ request_id: 'legacy-1', outcome: 'timeout' }) }),
    ]);
    assert.ok(checkFleetDiagnosis.Check(d));
    assert.equal(d.search.outcome, 'several');
    assert.equal(d.request, null);
    assert.equal(d.host, undefined);
    assert.deepEqual(
      d.requests!.map((e) => e.host),
      ['a', 'b'],
    );
    assert.ok(d.requests![1]!.interpretation.includes('upstream_timeout'));
  });

  it("a reply that is not a lookup result, or another request's record, is failed, not a holder", () => {
    const d = composeRequestDiagnosis(gid(5), [
      reply('a', 'not json'),
      reply('b', { request: rec({ request_id: gid(6) }) }),
      reply('c', '{"request":{},"request":{}}'),
      reply('d', { type: 'urn:svc-serving:problem:invalid-input', title: 'Invalid input', status: 400 }),
      reply('e', { ...NOT_FOUND, extra: 1 }),
    ]);
    assert.deepEqual(d.search.failed.hosts, ['a', 'b', 'c', 'd', 'e']);
    assert.equal(d.search.outcome, 'incomplete');
    assert.equal(d.search.answered, 0);
  });

  it('a reader can tell an answer whose claims disagree', () => {
    const half = composeRequestDiagnosis(gid(5), [reply('a', NOT_FOUND), down('c')]);
    assert.ok(diagnosisConsistent(half));
    assert.ok(
      !diagnosisConsistent({ ...half, search: { ...half.search, outcome: 'not_found' } }),
      'not found while a node was not asked',
    );
    assert.ok(!diagnosisConsistent({ ...half, search: { ...half.search, answered: 2 } }), 'counts that do not add up');
    const one = composeRequestDiagnosis(gid(5), [reply('b', { request: rec({ request_id: gid(5) }) })]);
    assert.ok(diagnosisConsistent(one));
    assert.ok(!diagnosisConsistent({ ...one, host: 'z' }), 'a holder the search does not name');
    const session = composeHistoryDiagnosis('session_id', 'S', [
      reply('a', { requests: [], truncation: { returned: 0, omitted: 0 } }),
      asleep('s'),
    ]);
    assert.ok(diagnosisConsistent(session));
  });

  it('members come in the order router diagnose writes its envelope, then host and search (docs/reference/control-http.md, "Request and session diagnosis tools")', () => {
    const r = rec({ request_id: 'legacy-2' });
    const empty = { requests: [], truncation: { returned: 0, omitted: 0 } };
    assert.deepEqual(Object.keys(composeRequestDiagnosis('legacy-2', [reply('a', { request: r })])), [
      'schema',
      'request',
      'current_router',
      'interpretation',
      'host',
      'search',
    ]);
    assert.deepEqual(
      Object.keys(composeRequestDiagnosis('legacy-2', [reply('a', { request: r }), reply('b', { request: r })])),
      ['schema', 'request', 'requests', 'truncation', 'current_router', 'interpretation', 'search'],
    );
    assert.deepEqual(Object.keys(composeRequestDiagnosis('legacy-2', [reply('a', NOT_FOUND)])), [
      'schema',
      'request',
      'current_router',
      'interpretation',
      'search',
    ]);
    assert.deepEqual(Object.keys(composeHistoryDiagnosis('session_id', 's-1', [reply('a', empty)])), [
      'schema',
      'request',
      'requests',
      'truncation',
      'current_router',
      'interpretation',
      'search',
    ]);
  });

  it('host lists are bounded; counts are whole', () => {
    const nodes = Array.from({ length: MAX_LISTED_HOSTS + 5 }, (_, i) => down(`n${i}`));
    const d = composeRequestDiagnosis(gid(5), nodes);
    assert.equal(d.search.unreachable.count, MAX_LISTED_HOSTS + 5);
    assert.equal(d.search.unreachable.hosts.length, MAX_LISTED_HOSTS);
    assert.ok(checkFleetDiagnosis.Check(d));
  });

  it('a session across nodes: merged newest first with hosts; the count of the rest unknown while a node is unasked', () => {
    const at = (s: number) => `2026-11-25T21:49:${String(s).padStart(2, '0')}.000Z`;
    const a = {
      requests: [
        rec({ request_id: gid(3), session_id: 'S', finished_at: at(30) }),
        rec({ request_id: gid(1), session_id: 'S', finished_at: at(10) }),
      ],
      truncation: { returned: 2, omitted: 0 },
    };
    const b = {
      requests: [rec({ request_id: gid(2), session_id: 'S', finished_at: at(20) })],
      truncation: { returned: 1, omitted: 4 },
    };
    const d = composeHistoryDiagnosis('session_id', 'S', [
      reply('a', a),
      reply('b', b),
      reply('c', { requests: [], truncation: { returned: 0, omitted: 0 } }),
    ]);
    assert.ok(checkFleetDiagnosis.Check(d));
    assert.deepEqual(
      d.requests!.map((e) => [e.host, e.request.request_id]),
      [
        ['a', gid(3)],
        ['b', gid(2)],
        ['a', gid(1)],
      ],
    );
    assert.deepEqual(d.truncation, { returned: 3, omitted: 4 });
    assert.deepEqual(d.search.holders.hosts, ['a', 'b']);
    assert.equal(d.search.outcome, 'found');
    const partial = composeHistoryDiagnosis('session_id', 'S', [reply('a', a), down('b')]);
    assert.equal(partial.truncation!.omitted, null);
    const none = composeHistoryDiagnosis('session_id', 'S', [
      reply('c', { requests: [], truncation: { returned: 0, omitted: 0 } }),
      down('b'),
    ]);
    assert.equal(none.search.outcome, 'incomplete');
    const wrong = composeHistoryDiagnosis('task_id', 'T', [reply('a', a)]);
    assert.deepEqual(wrong.search.failed.hosts, ['a'], 'records of another task are not believed');
  });
});

describe('request diagnosis tool arguments', () => {
  const fails = (f: () => unknown, message: string) =>
    assert.throws(f, (e: unknown) => e instanceof InvalidArgumentError && e.message === message);

  it('request_diagnosis takes exactly a request id; errors name the argument, never the value', () => {
    assert.equal(parseRequestDiagnosisArgs({ request_id: gid(1) }), gid(1));
    assert.equal(parseRequestDiagnosisArgs({ request_id: 'caller.id-1' }), 'caller.id-1');
    fails(() => parseRequestDiagnosisArgs({}), 'request_id: required');
    fails(() => parseRequestDiagnosisArgs({ request_id: 'secret value with spaces' }), 'request_id: not a request id');
    fails(() => parseRequestDiagnosisArgs({ request_id: 5 }), 'request_id: not a request id');
    fails(() => parseRequestDiagnosisArgs({ request_id: gid(1), sneaky: 1 }), 'arguments: only request_id is accepted');
    fails(() => parseRequestDiagnosisArgs(null), 'arguments: must be an object');
    fails(() => parseRequestDiagnosisArgs([gid(1)]), 'arguments: must be an object');
  });

  it('session_diagnosis takes exactly one of session_id, task_id, workbench_run_id', () => {
    assert.deepEqual(parseSessionDiagnosisArgs({ task_id: 't-1' }), { key: 'task_id', value: 't-1' });
    assert.deepEqual(parseSessionDiagnosisArgs({ workbench_run_id: 'w' }), { key: 'workbench_run_id', value: 'w' });
    fails(() => parseSessionDiagnosisArgs({}), 'arguments: give exactly one of session_id, task_id, workbench_run_id');
    fails(
      () => parseSessionDiagnosisArgs({ session_id: 'a', task_id: 'b' }),
      'arguments: give exactly one of session_id, task_id, workbench_run_id',
    );
    fails(() => parseSessionDiagnosisArgs({ session_id: '' }), 'session_id: not a session id');
    fails(() => parseSessionDiagnosisArgs({ task_id: null }), 'task_id: not a task id');
    fails(() => parseSessionDiagnosisArgs({ workbench_run_id: 'a b' }), 'workbench_run_id: not a workbench run id');
  });
});
