import type { Attributes, Context } from '@opentelemetry/api';
import { cleanTracestate } from './trace-context.js';
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
  /**
   * The W3C trace context a callee continues to make its spans this span's children:
   * `traceparent` (this span as parent) and, when the trace has one, `tracestate`
   * (the caller's, as cleaned when the trace came in). Sent as NATS headers (decision 0058).
   */
  readonly traceHeaders: Readonly<Record<string, string>>;
  /** Ends the span; `errorType` marks it failed (status ERROR, `error.type`). */
  end(attributes?: Attributes, errorType?: string): void;
}

export type ReadSpanKind = 'server' | 'client' | 'internal';

/** A caller's W3C trace context as it arrived (HTTP or NATS headers), unchecked. */
export interface RemoteTrace {
  readonly traceparent: string | string[] | undefined;
  readonly tracestate: string | string[] | undefined;
}

/** Makes read spans while traces are exported. */
export class ReadSpans {
  /**
   * `isCredential`: whether a value is a credential this server knows (its policy clients'
   * tokens, its NATS secrets): a `tracestate` naming one is dropped whole, never exported or
   * sent on (trace-context.ts cleanTracestate, as the router does).
   */
  constructor(
    private readonly tracing: Tracing,
    private readonly isCredential: (value: string) => boolean = () => false,
  ) {}

  /**
   * Starts a span. `parent`: a caller's trace context (checked: an invalid `traceparent`
   * starts a new trace; its `tracestate` cleaned), or a bare `traceparent`, the context of
   * the span this one is part of, or nothing (a new trace). `startMs`: when it began, if
   * before now.
   */
  start(
    name: string,
    kind: ReadSpanKind,
    parent: RemoteTrace | string | string[] | Context | undefined,
    attributes: Attributes,
    startMs?: number,
  ): ReadSpan {
    const { api, tracer } = this.tracing;
    const ctx =
      parent === undefined || typeof parent === 'string' || Array.isArray(parent)
        ? parentContext(api, parent)
        : 'traceparent' in parent
          ? this.#remote(parent)
          : parent;
    const span = tracer.startSpan(
      name,
      {
        kind: kind === 'server' ? api.SpanKind.SERVER : kind === 'client' ? api.SpanKind.CLIENT : api.SpanKind.INTERNAL,
        attributes,
        ...(startMs !== undefined ? { startTime: startMs } : {}),
      },
      ctx,
    );
    const sc = span.spanContext();
    const state = sc.traceState?.serialize();
    return {
      context: api.trace.setSpan(ctx, span),
      traceHeaders: {
        traceparent: `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`,
        ...(state ? { tracestate: state } : {}),
      },
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

  /** The parent context of a caller's trace: its `traceparent` checked, its `tracestate` cleaned. */
  #remote(t: RemoteTrace): Context {
    const { api } = this.tracing;
    const ctx = parentContext(api, t.traceparent);
    const parent = api.trace.getSpanContext(ctx);
    // No valid traceparent: a new trace, without the caller's tracestate (W3C).
    if (parent === undefined) return ctx;
    const state = cleanTracestate(t.tracestate, this.isCredential);
    return state === undefined
      ? ctx
      : api.trace.setSpanContext(api.ROOT_CONTEXT, { ...parent, traceState: api.createTraceState(state) });
  }
}
