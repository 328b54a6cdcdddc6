import type { Context } from '@opentelemetry/api';
import type { ReadableSpan, Span, SpanExporter, SpanProcessor } from '@opentelemetry/sdk-trace';
import { encodeSpan, encodeTraceExport, type EncodedSpan } from './otlp-protobuf.js';

/*
 * Spans over OTLP/HTTP protobuf, the SDK's way but for two parts (docs/decisions/0033):
 * - the exporter is the SDK's own, put together as @opentelemetry/exporter-trace-otlp-proto
 *   puts it together (the same OTEL_EXPORTER_OTLP_* settings, transport, retries, timeouts,
 *   concurrency bound and response handling), with encodeTraceExport writing the request: the
 *   same bytes as the SDK's serializer at a fraction of its CPU;
 * - each span is written to bytes as it ends (encodeSpan), and the SDK's batch processor
 *   (OTEL_BSP_* as the SDK reads them) queues those bytes instead of the span's objects: a
 *   queue of thousands of object graphs outlived the young generation and was read back cold
 *   at export, which cost more than writing it.
 */

/** `otel.component.type` of the SDK's OTLP/HTTP span exporter (its self-observability metrics). */
const COMPONENT_TYPE = 'otlp_http_span_exporter';

/** The SDK packages the exporter and its processor are made of (imported only when traces are exported). */
export interface ProtobufParts {
  readonly base: typeof import('@opentelemetry/otlp-exporter-base');
  readonly nodeHttp: typeof import('@opentelemetry/otlp-exporter-base/node-http');
  readonly transformer: typeof import('@opentelemetry/otlp-transformer');
  readonly sdkNode: typeof import('@opentelemetry/sdk-node');
  readonly sdkTrace: typeof import('@opentelemetry/sdk-trace');
}

/** Imports what protobufSpanProcessor is made of. */
export async function protobufParts(): Promise<ProtobufParts> {
  const [base, nodeHttp, transformer, sdkNode, sdkTrace] = await Promise.all([
    import('@opentelemetry/otlp-exporter-base'),
    import('@opentelemetry/otlp-exporter-base/node-http'),
    import('@opentelemetry/otlp-transformer'),
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/sdk-trace'),
  ]);
  return { base, nodeHttp, transformer, sdkNode, sdkTrace };
}

/**
 * The exporter `OTEL_TRACES_EXPORTER=otlp` with `http/protobuf` makes, but for its encoder.
 * Synchronous: its OTEL_EXPORTER_OTLP_* settings are read from process.env as it is made
 * (tracing.ts makes it while process.env is the server's own env).
 */
export function protobufSpanExporter(p: ProtobufParts): SpanExporter {
  const { base, nodeHttp, transformer } = p;
  const serializer = {
    serializeRequest: encodeTraceExport,
    deserializeResponse: transformer.ProtobufTraceSerializer.deserializeResponse,
  };
  const options = nodeHttp.convertLegacyHttpOptions({}, 'TRACES', 'v1/traces', {
    'Content-Type': 'application/x-protobuf',
  });
  return new base.OTLPExporterBase(
    nodeHttp.createOtlpHttpExportDelegate(
      options,
      serializer,
      COMPONENT_TYPE,
      transformer.TraceExporterMetricsHelper,
      undefined,
    ),
  );
}

/** W3C trace flags: sampled. */
const SAMPLED = 1;

/** Hands the next processor each sampled span written to bytes (the batch processor queues and exports those). */
export class EncodeAtEnd implements SpanProcessor {
  constructor(private readonly next: SpanProcessor) {}

  onStart(span: Span, parent: Context): void {
    this.next.onStart(span, parent);
  }

  onEnd(span: ReadableSpan): void {
    // The batch processor drops spans not sampled: nothing to write for them.
    if ((span.spanContext().traceFlags & SAMPLED) === 0) return;
    // An EncodedSpan answers all the batch processor and the exporter read of a queued span.
    this.next.onEnd(encodeSpan(span) as unknown as ReadableSpan);
  }

  /** A span already written (record-span.ts writes the request span straight from its record). */
  onEncoded(span: EncodedSpan): void {
    this.next.onEnd(span as unknown as ReadableSpan);
  }

  forceFlush(): Promise<void> {
    return this.next.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.next.shutdown();
  }
}

/** An OTEL_BSP_* number as the SDK reads it: unset, not a number, or not above 0: the default. */
function positive(read: (name: string) => number | undefined, name: string): number | undefined {
  const v = read(name);
  return v !== undefined && v > 0 ? v : undefined;
}

/**
 * The span processor the SDK makes for an OTLP exporter (its batch processor, configured from
 * OTEL_BSP_*), with the exporter above, fed spans written at their end. Synchronous, reading
 * process.env as protobufSpanExporter does.
 */
export function protobufSpanProcessor(p: ProtobufParts): EncodeAtEnd {
  const read = p.sdkNode.core.getNumberFromEnv;
  const batch = new p.sdkTrace.BatchSpanProcessor({
    exporter: protobufSpanExporter(p),
    maxQueueSize: positive(read, 'OTEL_BSP_MAX_QUEUE_SIZE'),
    scheduledDelayMillis: positive(read, 'OTEL_BSP_SCHEDULE_DELAY'),
    exportTimeoutMillis: positive(read, 'OTEL_BSP_EXPORT_TIMEOUT'),
    maxExportBatchSize: positive(read, 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE'),
  });
  return new EncodeAtEnd(batch);
}
