import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import * as api from '@opentelemetry/api';
import { resources } from '@opentelemetry/sdk-node';
import { AlwaysOnSampler, TracerProvider, type SpanProcessor } from '@opentelemetry/sdk-trace';
import { protobufParts, protobufSpanProcessor } from '../../src/telemetry/otlp-exporter.js';
import { startOtlpReceiver, type OtlpReceiver } from '../support/otlp-receiver.js';

/*
 * Our span processor for http/protobuf (the SDK's batch processor and OTLP/HTTP exporter,
 * spans written to bytes as they end) against a receiver decoding with the official
 * definitions: the standard variables apply (endpoint, headers, OTEL_BSP_*), what is not
 * sampled is not sent.
 */

const VARS = [
  'OTEL_EXPORTER_OTLP_ENDPOINT',
  'OTEL_EXPORTER_OTLP_HEADERS',
  'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
  'OTEL_BSP_MAX_QUEUE_SIZE',
  'OTEL_BSP_SCHEDULE_DELAY',
] as const;

describe('the http/protobuf span processor, configured from the standard variables', () => {
  let receiver: OtlpReceiver;
  let processor: SpanProcessor;
  const saved = new Map<string, string | undefined>();

  before(async () => {
    receiver = await startOtlpReceiver();
    for (const v of VARS) saved.set(v, process.env[v]);
    Object.assign(process.env, {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_HEADERS: 'x-tenant=t1',
      OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '2',
      OTEL_BSP_MAX_QUEUE_SIZE: '3',
      // Only full batches go before the test ends, unless flushed.
      OTEL_BSP_SCHEDULE_DELAY: '600000',
    });
    // Made while process.env holds the settings (the exporter reads them as it is made).
    processor = protobufSpanProcessor(await protobufParts());
  });
  after(async () => {
    await processor?.shutdown();
    await receiver?.close();
    for (const [k, v] of saved) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  });

  it('exports a full batch of OTEL_BSP_MAX_EXPORT_BATCH_SIZE at once, the rest after OTEL_BSP_SCHEDULE_DELAY or a flush, drops past OTEL_BSP_MAX_QUEUE_SIZE, skips spans not sampled', async () => {
    const provider = new TracerProvider({
      resource: resources.resourceFromAttributes({ 'service.name': 'svc-exporter-test' }),
      sampler: new AlwaysOnSampler(),
      spanProcessors: [processor],
    });
    const tracer = provider.getTracer('svc-serving');
    const notSampled = api.trace.setSpanContext(api.ROOT_CONTEXT, {
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      spanId: '00f067aa0ba902b7',
      traceFlags: api.TraceFlags.NONE,
      isRemote: true,
    });
    // Recorded but not sampled (a sampler that records every span): never written, never sent.
    const recorded = new TracerProvider({
      sampler: { shouldSample: () => ({ decision: 1 }) },
      spanProcessors: [processor],
    });
    recorded.getTracer('svc-serving').startSpan('not sampled', {}, notSampled).end();
    // 'one' and 'two' fill a batch: exported at once. While that export runs, the queue
    // (OTEL_BSP_MAX_QUEUE_SIZE 3) takes three more; 'six' finds it full and is dropped.
    for (const name of ['one', 'two', 'three', 'four', 'five', 'six'])
      tracer.startSpan(name, { kind: api.SpanKind.SERVER }).end();
    await receiver.waitFor((s) => s.name === 'four');
    await sleep(100);
    // 'five' waits for the schedule delay.
    assert.equal(receiver.exports.length, 2);
    assert.deepEqual(
      receiver.spans.map((s) => s.name),
      ['one', 'two', 'three', 'four'],
    );
    assert.match(receiver.exports[0]!.contentType, /^application\/x-protobuf/);
    assert.equal(receiver.exports[0]!.headers['x-tenant'], 't1');
    assert.equal(receiver.spans[0]!.resource['service.name'], 'svc-exporter-test');
    assert.equal(receiver.spans[0]!.kind, 2);
    await processor.forceFlush();
    assert.deepEqual(
      receiver.spans.map((s) => s.name),
      ['one', 'two', 'three', 'four', 'five'],
    );
  });
});
