import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as api from '@opentelemetry/api';
import { JsonTraceSerializer, ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { core, resources } from '@opentelemetry/sdk-node';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  ParentBasedSampler,
  RandomIdGenerator,
  SamplingDecision,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type ReadableSpan,
  type Sampler,
  type SpanLimits,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace';
import { EncodeAtEnd } from '../../src/telemetry/otlp-exporter.js';
import { encodeTraceExport, type EncodedSpan } from '../../src/telemetry/otlp-protobuf.js';
import { emitRequestSpan, type ServerAddress } from '../../src/telemetry/request-span.js';
import type { RequestTrace } from '../../src/telemetry/trace-context.js';
import { StagedIds, tracingParts, type Tracing } from '../../src/telemetry/tracing.js';
import type { TerminalRecord } from '../../src/schema/terminal-record.js';

/*
 * The request span made straight from its record (record-span.ts), and written straight to
 * OTLP bytes when our processor is the only one, against the same span made by the SDK's
 * tracer from the same record, ids and parent: the same spans (or none) through both of the
 * SDK's serializers, byte for byte, under samplers of every outcome and span limits that cut.
 */

const RESOURCE = resources.resourceFromAttributes({ 'service.name': 'svc-test', 'host.name': 'h' });
const SERVER: ServerAddress = { address: '10.0.0.5', port: 8001 };

type Mode = 'sdk' | 'record' | 'sdk-encoded' | 'direct';

/** A tracing over a provider of its own whose one processor keeps what it is handed. */
function tracingFor(mode: Mode, sampler: Sampler, spanLimits: SpanLimits): { tracing: Tracing; kept: unknown[] } {
  const kept: unknown[] = [];
  const keep: SpanProcessor = {
    onStart() {},
    onEnd: (s) => void kept.push(s),
    forceFlush: async () => {},
    shutdown: async () => {},
  };
  const encoded = mode === 'sdk-encoded' || mode === 'direct' ? new EncodeAtEnd(keep) : undefined;
  const staged = new StagedIds(new RandomIdGenerator());
  const provider = new TracerProvider({
    resource: RESOURCE,
    idGenerator: staged,
    sampler,
    spanLimits,
    spanProcessors: [encoded ?? keep],
  });
  const parts = tracingParts(
    api,
    provider.getTracer('svc-serving'),
    staged,
    core,
    mode === 'direct' ? encoded : undefined,
  );
  const pipeline = mode === 'record' || mode === 'direct' ? parts.pipeline : undefined;
  if (mode !== 'sdk' && mode !== 'sdk-encoded') assert.ok(pipeline, 'the SDK tracer holds its pipeline as expected');
  return { tracing: { ...parts, pipeline, flush: async () => {}, release: async () => {} }, kept };
}

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
  time_to_first_content_ms: 200.25,
  finish_reason: 'stop',
  usage: { prompt_tokens: 12, completion_tokens: 30, prompt_source: 'upstream', completion_source: 'upstream' },
  output_limit: null,
  upstream_replica: 0,
  session_id: 'sess-1',
};
const START = Date.parse(RECORD.started_at);

/** Records of each shape a span takes: phases or none, failure, refusal, estimates, a first content past the end. */
const RECORDS: TerminalRecord[] = [
  RECORD,
  { ...RECORD, outcome: 'error', status_code: 502, finish_reason: null, time_to_first_content_ms: null },
  {
    ...RECORD,
    model: null,
    outcome: 'rejected',
    status_code: 404,
    refusal: 'unknown_model',
    finish_reason: null,
    time_to_first_content_ms: null,
    usage: { prompt_tokens: null, completion_tokens: null, prompt_source: 'unknown', completion_source: 'unknown' },
  },
  {
    ...RECORD,
    outcome: 'disconnected',
    status_code: 0,
    finished_at: '2026-11-27T10:00:00.010Z',
    time_to_first_content_ms: 10.6,
    usage: { prompt_tokens: 7, completion_tokens: 3, prompt_source: 'estimated', completion_source: 'estimated' },
  },
];

/** `n` bytes of hex, the same for the same seed (a xorshift generator). */
function hex(n: number, seed: number): string {
  let x = (seed * 2654435761) >>> 0 || 1;
  let out = '';
  while (out.length < 2 * n) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out += (x >>> 0).toString(16).padStart(8, '0');
  }
  return out.slice(0, 2 * n);
}

/** Traces: a new one, a caller's sampled one with trace state, a caller's not sampled. */
function traces(seed: number): RequestTrace[] {
  const base = { admittedAt: START + 1, dispatchedAt: START + 2.5 };
  return [
    { traceId: hex(16, seed), parentId: undefined, flags: 1, traceState: undefined, spanId: hex(8, seed + 1), ...base },
    {
      traceId: hex(16, seed + 2),
      parentId: hex(8, seed + 3),
      flags: 1,
      traceState: 'vendor=abc,other=1',
      spanId: hex(8, seed + 4),
      ...base,
    },
    {
      traceId: hex(16, seed + 5),
      parentId: hex(8, seed + 6),
      flags: 0,
      traceState: undefined,
      spanId: hex(8, seed + 7),
      ...base,
    },
  ];
}

/** A sampler that records without sampling, or samples with attributes and trace state of its own. */
const custom = (decision: SamplingDecision): Sampler => ({
  shouldSample: () => ({
    decision,
    attributes: { 'sampler.rule': 'r1', 'svc.outcome': 'from-sampler' },
    traceState: api.createTraceState('sampler=1'),
  }),
  toString: () => 'custom',
});

const SAMPLERS: [string, Sampler][] = [
  ['parent-based always on (the default)', new ParentBasedSampler({ root: new AlwaysOnSampler() })],
  ['always off', new AlwaysOffSampler()],
  ['trace id ratio 0.5', new TraceIdRatioBasedSampler(0.5)],
  ['custom: sampled, with attributes and trace state', custom(SamplingDecision.RECORD_AND_SAMPLED)],
  ['custom: recorded, not sampled', custom(SamplingDecision.RECORD)],
];

const LIMITS: [string, SpanLimits][] = [
  ['defaults', {}],
  ['3 attributes', { attributeCountLimit: 3 }],
  ['values of 4 characters', { attributeValueLengthLimit: 4 }],
  ['1 event', { eventCountLimit: 1 }],
  ['2 events (the latest kept)', { eventCountLimit: 2 }],
  ['no events', { eventCountLimit: 0 }],
];

/** What `mode` hands its processor for every record and trace, under `sampler` and `limits`. */
function run(mode: Mode, sampler: Sampler, limits: SpanLimits): unknown[] {
  const { tracing, kept } = tracingFor(mode, sampler, limits);
  let seed = 1;
  for (const r of RECORDS) for (const t of traces((seed += 16))) emitRequestSpan(tracing, r, t, SERVER);
  return kept;
}

const text = (b: Uint8Array | undefined): string => Buffer.from(b ?? []).toString('hex');

describe('the request span made from its record, against the SDK-made span', () => {
  for (const [samplerName, sampler] of SAMPLERS)
    for (const [limitsName, limits] of LIMITS)
      it(`${samplerName}, limits ${limitsName}: the same spans, byte for byte in protobuf and JSON`, () => {
        const sdk = run('sdk', sampler, limits) as ReadableSpan[];
        const made = run('record', sampler, limits) as ReadableSpan[];
        assert.equal(made.length, sdk.length);
        // Each sampler drops some or all, or keeps all but those of a caller that did not sample.
        if (samplerName === 'always off') assert.equal(sdk.length, 0);
        else assert.ok(sdk.length >= 2, `${sdk.length} spans`);
        assert.equal(
          text(ProtobufTraceSerializer.serializeRequest(made)),
          text(ProtobufTraceSerializer.serializeRequest(sdk)),
        );
        assert.equal(
          Buffer.from(JsonTraceSerializer.serializeRequest(made)!).toString(),
          Buffer.from(JsonTraceSerializer.serializeRequest(sdk)!).toString(),
        );
        for (const [i, s] of made.entries()) {
          assert.deepEqual(s.duration, sdk[i]!.duration);
          assert.equal(s.ended, true);
        }
        // Written straight to bytes (our processor alone), against the SDK's span written at its end.
        const encoded = run('sdk-encoded', sampler, limits) as EncodedSpan[];
        const direct = run('direct', sampler, limits) as EncodedSpan[];
        assert.equal(direct.length, encoded.length);
        assert.equal(text(encodeTraceExport(direct)), text(encodeTraceExport(encoded)));
        // And those bytes are the SDK serializer's for the sampled SDK spans.
        const sampled = sdk.filter((s) => (s.spanContext().traceFlags & api.TraceFlags.SAMPLED) !== 0);
        assert.equal(text(encodeTraceExport(direct)), text(ProtobufTraceSerializer.serializeRequest(sampled)));
      });
});
