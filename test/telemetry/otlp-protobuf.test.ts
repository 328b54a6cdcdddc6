import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import * as api from '@opentelemetry/api';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { AlwaysOnSampler, TracerProvider, type ReadableSpan, type SpanLimits } from '@opentelemetry/sdk-trace';
import { resources } from '@opentelemetry/sdk-node';
import { encodeSpan, encodeTraceExport } from '../../src/telemetry/otlp-protobuf.js';

/*
 * The request bytes our encoder writes against the SDK's own serializer's, byte for byte, for
 * spans the SDK made: every attribute value type, events, links, status, kinds, limits hit,
 * several resources and scopes, lengths of every varint size, and spans written at their end
 * (encodeSpan) as well as whole. Decoded with the official definitions too.
 */

const protoRoot = createRequire(import.meta.url)('@opentelemetry/otlp-proto-exporter-base/build/src/generated/root.js');
const ExportTraceServiceRequest = protoRoot.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;

const T = '4bf92f3577b34da6a3ce929d0e0e4736';
const P = '00f067aa0ba902b7';

/** Spans ended on a provider of their own (resource, limits), in the order they ended. */
function provider(resource: Record<string, api.AttributeValue>, spanLimits: SpanLimits = {}) {
  const ended: ReadableSpan[] = [];
  const p = new TracerProvider({
    resource: resources.resourceFromAttributes(resource),
    sampler: new AlwaysOnSampler(),
    spanLimits,
    spanProcessors: [
      {
        onStart() {},
        onEnd: (s: ReadableSpan) => void ended.push(s),
        forceFlush: async () => {},
        shutdown: async () => {},
      },
    ],
  });
  return {
    ended,
    tracer: (name: string, version?: string, schemaUrl?: string) =>
      p.getTracer(name, version, { ...(schemaUrl ? { schemaUrl } : {}) }),
  };
}

const remoteParent = api.trace.setSpanContext(api.ROOT_CONTEXT, {
  traceId: T,
  spanId: P,
  traceFlags: api.TraceFlags.SAMPLED,
  isRemote: true,
  traceState: api.createTraceState('vendor=abc,other=1'),
});

/** A spread of spans over two resources and three scopes. */
function spans(): ReadableSpan[] {
  const a = provider({ 'service.name': 'svc-a', 'host.name': 'hôte', 'svc.list': ['x', 'y'], 'svc.n': 3 });
  const b = provider(
    { 'service.name': 'svc-b' },
    { attributeCountLimit: 2, eventCountLimit: 1, attributeValueLengthLimit: 5 },
  );
  const t1 = a.tracer('svc-serving');
  const t2 = a.tracer('svc-other', '1.2.3', 'https://opentelemetry.io/schemas/1.30.0');
  const t3 = b.tracer('svc-limited');
  const now = Date.now();

  // The router's request span, as the SDK makes it.
  const req = t1.startSpan('chat sim-model', { kind: api.SpanKind.SERVER, startTime: now - 3 }, remoteParent);
  req.setAttributes({
    'gen_ai.operation.name': 'chat',
    'svc.request_id': `req_${'0'.repeat(31)}1`,
    'svc.outcome': 'success',
    'gen_ai.response.finish_reasons': ['stop'],
    'gen_ai.usage.input_tokens': 12,
    'server.port': 8000,
  });
  req.addEvent('admitted', now - 2.9);
  req.addEvent('first_content', now - 1.5);
  req.end(now);

  // Every attribute value type, and lengths that need more than one byte.
  const all = t1.startSpan(`long name ${'n'.repeat(200)}`, {
    kind: api.SpanKind.CLIENT,
    startTime: [1_800_000_000, 999_999_999],
  });
  all.setAttributes({
    ascii: 'plain',
    empty: '',
    accented: 'café',
    emoji: 'rocket 🚀',
    lone: 'half \ud800 pair',
    long: 'L'.repeat(300),
    longer: 'é'.repeat(9000),
    yes: true,
    no: false,
    zero: 0,
    small: 127,
    edge: 128,
    big: 2 ** 31,
    bigger: 2 ** 32,
    safe: Number.MAX_SAFE_INTEGER,
    huge: 2 ** 60,
    negative: -1,
    veryNegative: -(2 ** 40),
    half: 1.5,
    negZero: -0,
    infinite: Number.POSITIVE_INFINITY,
    nan: Number.NaN,
    strings: ['a', 'bé', ''],
    numbers: [1, 2.5, -3],
    flags: [true, false],
    holes: ['a', null, undefined, 'b'] as unknown as string[],
    none: [],
  });
  all.addEvent('with attributes', { k: 'v', n: 1 }, [1_800_000_000, 5]);
  all.addEvent('bare');
  all.addLink({ context: { traceId: T, spanId: P, traceFlags: 1, isRemote: true }, attributes: { l: 'link' } });
  all.addLink({
    context: { traceId: T, spanId: 'b7ad6b7169203331', traceFlags: 0, traceState: api.createTraceState('k=v') },
  });
  all.setStatus({ code: api.SpanStatusCode.ERROR, message: 'it failed: ü' });
  all.end([1_800_000_001, 0]);

  for (const kind of [api.SpanKind.INTERNAL, api.SpanKind.PRODUCER, api.SpanKind.CONSUMER]) {
    const s = t2.startSpan(`kind ${kind}`, { kind });
    s.setStatus({ code: api.SpanStatusCode.OK });
    s.end();
  }
  // Limits hit: attributes, events and values dropped or cut (the dropped counts are written).
  const limited = t3.startSpan('limited', { attributes: { a: 'abcdefgh', b: ['longer', 'x'], c: 1, d: 2 } });
  limited.addEvent('one');
  limited.addEvent('two');
  limited.end();
  return [...a.ended, ...b.ended];
}

const official = (s: readonly ReadableSpan[]): Buffer => Buffer.from(ProtobufTraceSerializer.serializeRequest([...s])!);
const ours = (s: readonly Parameters<typeof encodeTraceExport>[0][number][]): Buffer =>
  Buffer.from(encodeTraceExport(s));

describe('OTLP protobuf: our encoder against the SDK serializer', () => {
  it('writes the same bytes for spans of every kind, value type, limit and grouping', () => {
    const s = spans();
    const want = official(s);
    assert.ok(want.length > 20_000);
    assert.ok(ours(s).equals(want));
    // Decoded with the official definitions: resources, scopes and spans all there.
    const d = ExportTraceServiceRequest.toObject(ExportTraceServiceRequest.decode(ours(s)), { longs: String });
    assert.equal(d.resourceSpans.length, 2);
    assert.deepEqual(
      d.resourceSpans.map((r: { scopeSpans: unknown[] }) => r.scopeSpans.length),
      [2, 1],
    );
    assert.equal(d.resourceSpans.flatMap((r: any) => r.scopeSpans.flatMap((x: any) => x.spans)).length, s.length);
  });

  it('spans written at their end (encodeSpan), alone or mixed with the SDK spans, give the same request', () => {
    const s = spans();
    const want = official(s);
    assert.ok(ours(s.map(encodeSpan)).equals(want));
    assert.ok(ours(s.map((x, i) => (i % 2 === 0 ? encodeSpan(x) : x))).equals(want));
  });

  it('large batches: message lengths of three and four bytes, and buffers that grow', () => {
    const { ended, tracer } = provider({ 'service.name': 'svc-big' });
    const t = tracer('svc-serving');
    for (let i = 0; i < 6000; i++) {
      const s = t.startSpan(`span ${i}`, { kind: api.SpanKind.SERVER });
      s.setAttributes({ i, text: 'x'.repeat(i % 800), id: `req_${i}` });
      s.end();
    }
    const want = official(ended);
    assert.ok(want.length > 2 ** 21);
    assert.ok(ours(ended).equals(want));
    assert.ok(ours(ended.map(encodeSpan)).equals(want));
  });

  it('an empty batch is an empty request, as the SDK writes it', () => {
    assert.ok(ours([]).equals(official([])));
  });
});
