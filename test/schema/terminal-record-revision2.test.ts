import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { checkTerminalRecord, terminalRecordJson } from '../../src/schema/terminal-record.js';
import { interpret, terminalEvidence } from '../../src/schema/diagnosis.js';
import { parseDecision } from '../../src/router/records/decision-lines.js';
import { formatRequest } from '../../src/cli/format-diagnosis.js';
import { ENGINE_MESSAGE_MAX, engineMessage } from '../../src/errors.js';
import { gid, rec } from '../support/terminal-records.js';

const UNAVAILABLE = { unavailable: true } as const;

describe('terminal record revision 2: refusals, engine status, attempts; older records stay readable', () => {
  it('a record written before revision 2 (no upstream_status, attempts, refusal) is valid and reads as unknown', () => {
    const old = rec({ outcome: 'rejected', status_code: 400 });
    assert.ok(checkTerminalRecord.Check(old));
    const line = JSON.stringify({ gateway_request_id: gid(1), ...old });
    const d = parseDecision(line)!;
    assert.ok(d);
    for (const k of ['upstream_status', 'upstream_replica', 'attempts', 'refusal'])
      assert.equal(k in d.record, false, `${k} is not made up`);
    const ev = terminalEvidence(d.record);
    assert.equal('attempts' in ev, false);
    // The older rule: a rejected 400 was a context rejection.
    assert.deepEqual(
      interpret(ev).filter((c) => c.includes('rejected') || c.includes('routing')),
      ['context_rejected'],
    );
    assert.match(formatRequest(ev, interpret(ev), UNAVAILABLE), /Engine: not recorded/);
  });

  it('a refusal before routing (model null, refusal invalid_request, status 400) is no context rejection', () => {
    const r = rec({
      model: null,
      outcome: 'rejected',
      status_code: 400,
      upstream_status: null,
      upstream_replica: null,
      attempts: 0,
      refusal: 'invalid_request',
    });
    assert.ok(checkTerminalRecord.Check(r));
    const codes = interpret(terminalEvidence(r));
    assert.ok(codes.includes('refused_before_routing'));
    assert.ok(!codes.includes('context_rejected'));
    const text = formatRequest(terminalEvidence(r), codes, UNAVAILABLE);
    assert.match(text, /on no model alias/);
    assert.match(text, /Refusal: invalid_request/);
    assert.match(text, /Engine: not called/);
    // Round trip through the decision log's line format keeps every revision-2 member.
    const back = parseDecision(JSON.stringify({ gateway_request_id: gid(2), ...JSON.parse(terminalRecordJson(r)) }))!;
    assert.deepEqual(
      [back.record.model, back.record.refusal, back.record.attempts, back.record.upstream_status],
      [null, 'invalid_request', 0, null],
    );
  });

  it('the engine refused, rate limited, rejected the context, or failed: four different readings', () => {
    const engine = (over: Parameters<typeof rec>[0]) =>
      interpret(terminalEvidence(rec({ attempts: 1, upstream_replica: 0, upstream_duration_ms: 5, ...over })));
    const refused = engine({
      outcome: 'rejected',
      status_code: 422,
      upstream_status: 422,
      refusal: 'upstream_rejected',
    });
    assert.ok(refused.includes('upstream_rejected') && !refused.includes('upstream_failed'));
    const context = engine({
      outcome: 'rejected',
      status_code: 400,
      upstream_status: 400,
      refusal: 'context_length_exceeded',
    });
    assert.ok(context.includes('context_rejected') && !context.includes('upstream_rejected'));
    const limited = engine({ outcome: 'rejected', status_code: 429, upstream_status: 429, refusal: 'rate_limited' });
    assert.ok(limited.includes('upstream_rate_limited') && !limited.includes('admission_rejected'));
    const failed = engine({ outcome: 'error', status_code: 502, upstream_status: 503 });
    assert.ok(failed.includes('upstream_failed') && !failed.includes('upstream_rejected'));
  });

  it("the engine's message: error.message, message or detail; controls removed; cut to 1,024; none from non-JSON", () => {
    const b = (v: unknown) => Buffer.from(JSON.stringify(v));
    assert.equal(engineMessage(b({ error: { message: 'bad\u0007 param\n' } })), 'bad param');
    assert.equal(engineMessage(b({ message: 'flat' })), 'flat');
    assert.equal(engineMessage(b({ detail: 'fastapi' })), 'fastapi');
    assert.equal(engineMessage(b({ error: { message: 'y'.repeat(5000) } }))!.length, ENGINE_MESSAGE_MAX);
    assert.equal(engineMessage(Buffer.from('<html>oops</html>')), undefined);
    assert.equal(engineMessage(b({ error: { message: '\u0000\u001b' } })), undefined);
  });
});
