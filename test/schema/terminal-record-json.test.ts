import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  TerminalRecord,
  checkTerminalRecord,
  terminalRecordJson,
  FINISH_REASONS,
  REQUEST_OUTCOMES,
  ROUTES,
  USAGE_SOURCES,
} from '../../src/schema/terminal-record.js';
import { gid, rec } from '../support/terminal-records.js';

/** The record with its members in the schema's order (as the router builds records). */
function ordered(r: TerminalRecord): TerminalRecord {
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(TerminalRecord.properties))
    if ((r as Record<string, unknown>)[k] !== undefined) out[k] = (r as Record<string, unknown>)[k];
  return out as TerminalRecord;
}

/** A deterministic pseudo-random sequence (the same every run). */
function rng(seed: number): () => number {
  let x = seed;
  return () => {
    x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
    return x / 2_147_483_648;
  };
}

describe('terminal record JSON text', () => {
  it("is JSON.stringify's text, bit for bit, for records in the schema's order", () => {
    const r = rng(3);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
    const num = (): number | null =>
      pick([null, 0, 1, 0.001, 123.456, 1e21, 1e-7, 2 ** 53 - 1, Math.round(r() * 1e6) / 1000]);
    for (let n = 0; n < 2_000; n++) {
      const x = rec({
        request_id: r() < 0.5 ? gid(n) : `legacy-${n}`,
        model: pick(['chat', 'a-much-longer-model-alias/with:parts']),
        route: pick(ROUTES),
        outcome: pick(REQUEST_OUTCOMES),
        status_code: pick([0, 200, 429, 502]),
        latency_ms: num(),
        readiness_check_ms: num(),
        admission_wait_ms: num(),
        upstream_duration_ms: num(),
        time_to_first_content_ms: num(),
        finish_reason: r() < 0.3 ? null : pick(FINISH_REASONS),
        usage: {
          prompt_tokens: num(),
          completion_tokens: num(),
          prompt_source: pick(USAGE_SOURCES),
          completion_source: pick(USAGE_SOURCES),
        },
        output_limit: r() < 0.3 ? null : { requested: r() < 0.5 ? null : 100, effective: 16, clamped: r() < 0.5 },
      });
      if (r() < 0.5) x.session_id = `s-${n}`;
      if (r() < 0.3) x.workbench_run_id = `run-${n}`;
      if (r() < 0.3) x.task_id = `task-${n}`;
      if (r() < 0.2) delete x.routing_config_hash;
      if (r() < 0.2) delete x.package_version;
      const o = ordered(x);
      assert.equal(terminalRecordJson(o), JSON.stringify(o), `record ${n}`);
    }
  });

  it('escapes what must be escaped, writes unmeasured numbers as null, and reads back equal whatever the member order', () => {
    const odd = rec({ request_id: 'a"b\\c\n\u2028é€\u0001', model: 'm"}', package_version: 'vé-ü-€' });
    odd.session_id = '</script>"';
    assert.deepEqual(JSON.parse(terminalRecordJson(odd)), odd);
    assert.equal(JSON.parse(terminalRecordJson(rec({ latency_ms: Number.NaN }))).latency_ms, null);
    assert.equal(
      JSON.parse(terminalRecordJson(rec({ upstream_duration_ms: Number.POSITIVE_INFINITY }))).upstream_duration_ms,
      null,
    );
  });
});

describe('terminal record bounds', () => {
  it('refuses values no real record reaches (durations over a week, 1-99 as a status, absurd token counts), so no reader shows them', () => {
    assert.ok(checkTerminalRecord.Check(rec()));
    assert.ok(checkTerminalRecord.Check(rec({ status_code: 0 })), '0: the client was sent nothing');
    assert.ok(
      checkTerminalRecord.Check(rec({ latency_ms: 86_400_000 + 3_600_000 })),
      'a day upstream plus an hour queued',
    );
    for (const bad of [
      { latency_ms: 1e308 },
      { upstream_duration_ms: 604_800_001 },
      { status_code: 42 },
      { status_code: 1000 },
      { usage: { ...rec().usage, completion_tokens: 2 ** 53 } },
    ]) {
      assert.equal(checkTerminalRecord.Check(rec(bad as Partial<TerminalRecord>)), false, JSON.stringify(bad));
    }
  });
});
