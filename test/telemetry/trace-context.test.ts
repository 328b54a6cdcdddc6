import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  cleanTracestate,
  parseTraceparent,
  randomSpanIds,
  requestTrace,
  upstreamTraceparent,
} from '../../src/telemetry/trace-context.js';
import { requestSpanPlan, serverAddress } from '../../src/telemetry/request-span.js';
import { protobufExporterChosen, tracingRequested } from '../../src/telemetry/tracing.js';
import type { TerminalRecord } from '../../src/schema/terminal-record.js';

const T = '4bf92f3577b34da6a3ce929d0e0e4736';
const P = '00f067aa0ba902b7';
const noCredential = (): boolean => false;
const ids = { newTraceId: () => 'a'.repeat(32), newSpanId: () => 'b'.repeat(16) };

describe('W3C trace context as the router reads it', () => {
  it('traceparent: a valid one is read; malformed, upper-case, all-zero ids, version ff and a long version 00 are not', () => {
    assert.deepEqual(parseTraceparent(`00-${T}-${P}-01`), { traceId: T, parentId: P, flags: 1 });
    assert.deepEqual(parseTraceparent(`00-${T}-${P}-00`), { traceId: T, parentId: P, flags: 0 });
    // A later version is read as version 00, its extra fields ignored.
    assert.deepEqual(parseTraceparent(`01-${T}-${P}-01-extra`), { traceId: T, parentId: P, flags: 1 });
    for (const bad of [
      undefined,
      '',
      'garbage',
      `00-${T.toUpperCase()}-${P}-01`,
      `00-${'0'.repeat(32)}-${P}-01`,
      `00-${T}-${'0'.repeat(16)}-01`,
      `ff-${T}-${P}-01`,
      `00-${T}-${P}-01-extra`,
      `00-${T}-${P}-1`,
      [`00-${T}-${P}-01`, `00-${T}-${P}-01`],
    ])
      assert.equal(parseTraceparent(bad), undefined, String(bad));
  });

  it('tracestate: well-formed lists pass (repeated headers joined); a malformed one, an oversized one or one holding a credential (as a value or a key) is dropped whole', () => {
    assert.equal(
      cleanTracestate('congo=t61rcWkgMzE, rojo=00f067aa0ba902b7', noCredential),
      'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7',
    );
    assert.equal(cleanTracestate(['a=1', 'b=2'], noCredential), 'a=1,b=2');
    assert.equal(cleanTracestate('tenant@vendor=x', noCredential), 'tenant@vendor=x');
    for (const bad of [undefined, '', 'UPPER=1', 'a=1,=2', 'a', 'a=b=c', `a=${'x'.repeat(600)}`, 'a=\u00e9']) {
      assert.equal(cleanTracestate(bad, noCredential), undefined, String(bad));
    }
    const many = Array.from({ length: 33 }, (_, i) => `k${i}=v`).join(',');
    assert.equal(cleanTracestate(many, noCredential), undefined);
    const isKey = (v: string): boolean => v === 'sk-secret';
    assert.equal(cleanTracestate('a=1,k=sk-secret', isKey), undefined);
    assert.equal(cleanTracestate('a=1,k=other', isKey), 'a=1,k=other');
    // As a member's key, or the tenant or system of a multi-tenant key, too.
    const isLowerKey = (v: string): boolean => v === 'dp-secret';
    for (const ts of ['dp-secret=1', 'a=1,dp-secret=1', 'dp-secret@vendor=1', 'tenant@dp-secret=1'])
      assert.equal(cleanTracestate(ts, isLowerKey), undefined, ts);
    assert.equal(cleanTracestate('dp-other@vendor=1', isLowerKey), 'dp-other@vendor=1');
  });

  it("requestTrace: the caller's trace continued; a new one only when the router makes spans; the engine's traceparent names the router's span when there is one", () => {
    const headers = { traceparent: `00-${T}-${P}-01`, tracestate: 'a=1' };
    const off = requestTrace(headers, undefined, noCredential)!;
    assert.deepEqual(
      { ...off },
      {
        traceId: T,
        parentId: P,
        flags: 1,
        traceState: 'a=1',
        spanId: undefined,
        admittedAt: undefined,
        dispatchedAt: undefined,
      },
    );
    assert.equal(upstreamTraceparent(off), `00-${T}-${P}-01`);
    const on = requestTrace(headers, ids, noCredential)!;
    assert.equal(on.traceId, T);
    assert.equal(upstreamTraceparent(on), `00-${T}-${'b'.repeat(16)}-01`);
    assert.equal(requestTrace({}, undefined, noCredential), undefined);
    assert.equal(requestTrace({ traceparent: 'bad', tracestate: 'a=1' }, undefined, noCredential), undefined);
    const fresh = requestTrace({ tracestate: 'a=1' }, ids, noCredential)!;
    assert.equal(fresh.parentId, undefined);
    // No caller trace: its tracestate has nothing to belong to.
    assert.equal(fresh.traceState, undefined);
    assert.equal(upstreamTraceparent(fresh), `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`);
    // An unsampled caller's flags travel on as they came.
    assert.equal(
      upstreamTraceparent(requestTrace({ traceparent: `00-${T}-${P}-00` }, ids, noCredential)!).slice(-2),
      '00',
    );
  });

  it('span ids: lower-case hex of 16 and 8 bytes, all different over many pool refills, never all zero', () => {
    const ids = randomSpanIds();
    const seen = new Set<string>();
    for (let i = 0; i < 3000; i++) {
      const t = ids.newTraceId();
      const s = ids.newSpanId();
      assert.match(t, /^[0-9a-f]{32}$/);
      assert.match(s, /^[0-9a-f]{16}$/);
      assert.notEqual(t, '0'.repeat(32));
      assert.notEqual(s, '0'.repeat(16));
      seen.add(t).add(s);
    }
    assert.equal(seen.size, 6000);
  });

  it('tracing is requested only by OTEL_TRACES_EXPORTER=otlp or an OTLP endpoint; none, another exporter or OTEL_SDK_DISABLED turn it off', () => {
    assert.equal(tracingRequested({}), false);
    assert.equal(tracingRequested({ OTEL_SERVICE_NAME: 'x', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }), false);
    assert.equal(tracingRequested({ OTEL_TRACES_EXPORTER: 'otlp' }), true);
    assert.equal(tracingRequested({ OTEL_TRACES_EXPORTER: 'console, otlp' }), true);
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }), true);
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces' }), true);
    assert.equal(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: ' ' }), false);
    assert.equal(
      tracingRequested({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }),
      false,
    );
    assert.equal(tracingRequested({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_SDK_DISABLED: 'true' }), false);
  });

  it('our protobuf encoder is used exactly where the SDK would make one OTLP http/protobuf exporter; any other choice keeps the SDK exporter', () => {
    const E = 'http://c:4318';
    for (const env of [
      { OTEL_EXPORTER_OTLP_ENDPOINT: E },
      { OTEL_EXPORTER_OTLP_ENDPOINT: E, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf' },
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: E,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf',
      },
      { OTEL_EXPORTER_OTLP_ENDPOINT: E, OTEL_EXPORTER_OTLP_PROTOCOL: ' ' },
      { OTEL_TRACES_EXPORTER: 'otlp' },
      { OTEL_TRACES_EXPORTER: 'otlp, otlp, null' },
      // The SDK reads `none` after another name as `otlp` alone.
      { OTEL_TRACES_EXPORTER: 'otlp,none' },
    ])
      assert.equal(protobufExporterChosen(env), true, JSON.stringify(env));
    for (const env of [
      { OTEL_EXPORTER_OTLP_ENDPOINT: E, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' },
      { OTEL_EXPORTER_OTLP_ENDPOINT: E, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' },
      { OTEL_EXPORTER_OTLP_ENDPOINT: E, OTEL_EXPORTER_OTLP_PROTOCOL: ' http/protobuf' },
      { OTEL_TRACES_EXPORTER: 'otlp,console' },
      { OTEL_TRACES_EXPORTER: 'zipkin' },
      { OTEL_TRACES_EXPORTER: 'none,otlp' },
    ])
      assert.equal(protobufExporterChosen(env), false, JSON.stringify(env));
  });
});

const RECORD: TerminalRecord = {
  request_id: 'req_0123456789abcdef0123456789abcdef',
  model: 'chat',
  route: 'chat.completions',
  outcome: 'success',
  status_code: 200,
  started_at: '2026-11-27T10:00:00.000Z',
  finished_at: '2026-11-27T10:00:01.500Z',
  latency_ms: 1500,
  readiness_check_ms: 0,
  admission_wait_ms: 0,
  upstream_duration_ms: 1490,
  time_to_first_content_ms: 200,
  finish_reason: 'length',
  usage: { prompt_tokens: 12, completion_tokens: 30, prompt_source: 'estimated', completion_source: 'upstream' },
  output_limit: null,
};

describe("a request's span from its terminal record", () => {
  const t = requestTrace({}, ids, noCredential)!;
  const start = Date.parse(RECORD.started_at);

  it('holds every phase within the span: milliseconds of wall clock against monotonic offsets', () => {
    // First content measured 0.6 ms after the recorded (rounded) end: drawn at the end.
    t.admittedAt = start - 1;
    t.dispatchedAt = start + 2;
    const p = requestSpanPlan(
      { ...RECORD, finished_at: '2026-11-27T10:00:00.010Z', time_to_first_content_ms: 10.6 },
      t,
    );
    assert.deepEqual(p.events, [
      { name: 'admitted', atMs: start },
      { name: 'dispatched', atMs: start + 2 },
      { name: 'first_content', atMs: start + 10 },
    ]);
  });

  it('names the operation and alias; the engine counts as gen_ai.usage, estimates as svc.usage', () => {
    t.admittedAt = start + 1;
    t.dispatchedAt = start + 2;
    const p = requestSpanPlan(RECORD, t, { address: '10.0.0.5', port: 8001 });
    assert.equal(p.name, 'chat chat');
    assert.equal(p.startMs, start);
    assert.equal(p.endMs, start + 1500);
    assert.equal(p.failed, false);
    assert.deepEqual(p.attributes, {
      'gen_ai.operation.name': 'chat',
      'gen_ai.request.model': 'chat',
      'gen_ai.response.finish_reasons': ['length'],
      'svc.usage.input_tokens_estimated': 12,
      'gen_ai.usage.output_tokens': 30,
      'server.address': '10.0.0.5',
      'server.port': 8001,
      'http.response.status_code': 200,
      'svc.request_id': RECORD.request_id,
      'svc.outcome': 'success',
      'svc.route': 'chat.completions',
    });
    assert.deepEqual(p.events, [
      { name: 'admitted', atMs: start + 1 },
      { name: 'dispatched', atMs: start + 2 },
      { name: 'first_content', atMs: start + 200 },
    ]);
  });

  it('operation names per route, and which outcomes are the server error', () => {
    const op = (route: TerminalRecord['route']) =>
      requestSpanPlan({ ...RECORD, route }, t).attributes['gen_ai.operation.name'];
    assert.deepEqual(
      (['chat.completions', 'completions', 'embeddings', 'rerank', 'audio.transcriptions', 'responses'] as const).map(
        op,
      ),
      ['chat', 'text_completion', 'embeddings', 'rerank', 'transcription', 'chat'],
    );
    const failed = (o: Partial<TerminalRecord>) => requestSpanPlan({ ...RECORD, ...o }, t).failed;
    assert.equal(failed({ outcome: 'error', status_code: 502 }), true);
    assert.equal(failed({ outcome: 'timeout', status_code: 504 }), true);
    assert.equal(failed({ outcome: 'rejected', status_code: 502 }), true);
    assert.equal(failed({ outcome: 'rejected', status_code: 429, refusal: 'admission_full' }), false);
    assert.equal(failed({ outcome: 'disconnected', status_code: 0 }), false);
    const rejected = requestSpanPlan(
      { ...RECORD, outcome: 'rejected', status_code: 429, refusal: 'admission_full' },
      t,
    );
    assert.equal(rejected.attributes['error.type'], 'admission_full');
    const cut = requestSpanPlan({ ...RECORD, outcome: 'disconnected', status_code: 0 }, t);
    assert.equal(cut.attributes['error.type'], 'disconnected');
    assert.equal(cut.attributes['http.response.status_code'], undefined);
  });

  it('server.address is the host only: never credentials or a path', () => {
    assert.deepEqual(serverAddress('http://user:secret@engine.local:8001/v1'), { address: 'engine.local', port: 8001 });
    assert.deepEqual(serverAddress('https://[::1]/v1'), { address: '::1', port: undefined });
    assert.equal(serverAddress('not a url'), undefined);
  });
});
