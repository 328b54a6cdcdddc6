import type { Attributes, Context } from '@opentelemetry/api';
import { parentContext, type Tracing } from './tracing.js';

/*
 * Spans of the controller's and the fleet's reads (`/tools/call`, MCP, NATS requests, the
 * fleet's fan-out to each node). Reads are few next to inference requests, so these are live
 * spans, their contexts passed by hand (no async context tracking in the process). Attributes
 * are fixed names and values of ours: tool names, node ids, outcomes; never arguments' values,
 * headers or credentials.
 */

/** A span in progress; `context` is the parent of the spans made under it. */
export interface ReadSpan {
  readonly context: Context;
  /** Ends the span; `errorType` marks it failed (status ERROR, `error.type`). */
  end(attributes?: Attributes, errorType?: string): void;
}

export type ReadSpanKind = 'server' | 'client' | 'internal';

/** Makes read spans while traces are exported. */
export class ReadSpans {
  constructor(private readonly tracing: Tracing) {}

  /**
   * Starts a span. `parent`: a caller's `traceparent` header, the context of the span this one
   * is part of, or nothing (a new trace). `startMs`: when it began, if before now.
   */
  start(
    name: string,
    kind: ReadSpanKind,
    parent: string | string[] | Context | undefined,
    attributes: Attributes,
    startMs?: number,
  ): ReadSpan {
    const { api, tracer } = this.tracing;
    const ctx =
      parent === undefined || typeof parent === 'string' || Array.isArray(parent) ? parentContext(api, parent) : parent;
    const span = tracer.startSpan(
      name,
      {
        kind: kind === 'server' ? api.SpanKind.SERVER : kind === 'client' ? api.SpanKind.CLIENT : api.SpanKind.INTERNAL,
        attributes,
        ...(startMs !== undefined ? { startTime: startMs } : {}),
      },
      ctx,
    );
    return {
      context: api.trace.setSpan(ctx, span),
      end(more, errorType) {
        if (more) span.setAttributes(more);
        if (errorType !== undefined) {
          span.setAttribute('error.type', errorType);
          span.setStatus({ code: api.SpanStatusCode.ERROR });
        }
        span.end();
      },
    };
  }
}
