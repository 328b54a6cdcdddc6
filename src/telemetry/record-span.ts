import type { Attributes, AttributeValue, Context, HrTime, Link, SpanContext, SpanStatus } from '@opentelemetry/api';
import type { ReadableSpan, Sampler, SpanLimits, SpanProcessor, TimedEvent } from '@opentelemetry/sdk-trace';
import { encodePlannedSpan, type EncodedSpan } from './otlp-protobuf.js';

/*
 * The request span made straight from its terminal record, as the finished span the SDK's
 * span processors receive (docs/decisions/0034). Everything but the span object is the SDK's
 * own, taken from the SDK's tracer: its sampler decides (with what the SDK's tracer gives
 * it), its span limits apply (attribute count and value length, event count), its resource
 * and scope are the span's, its processors get it at its end. What is not made is the SDK's
 * writable Span (a span made already finished has nothing to write), which cost the router
 * more than writing the span's bytes did. test/telemetry/record-span.test.ts holds the spans
 * made here to the SDK's, through both OTLP serializers, byte for byte.
 */

/** The parts of the SDK's tracer a span made here goes through. */
export interface SpanPipeline {
  readonly sampler: Sampler;
  readonly limits: SpanLimits;
  readonly resource: ReadableSpan['resource'];
  readonly scope: ReadableSpan['instrumentationScope'];
  /** The tracer provider's processors (one processor calling each). */
  readonly processor: SpanProcessor;
  /** @opentelemetry/core's, for times and attributes exactly as the SDK's span has them. */
  readonly millisToHrTime: (epochMillis: number) => HrTime;
  readonly hrTimeDuration: (start: HrTime, end: HrTime) => HrTime;
  readonly sanitizeAttributes: (attributes: unknown) => Attributes;
  readonly isAttributeValue: (value: unknown) => boolean;
  /**
   * Set when the tracer's one processor writes spans to OTLP bytes as they end (EncodeAtEnd):
   * a sampled span nothing was dropped from is then written straight from its record.
   */
  readonly direct?: { onEncoded(span: EncodedSpan): void };
}

/** What the SDK's tracer (2.12) holds, under the names it holds them. */
interface TracerParts {
  readonly _sampler?: Sampler;
  readonly _spanLimits?: SpanLimits;
  readonly _resource?: ReadableSpan['resource'];
  readonly _spanProcessor?: SpanProcessor;
  readonly instrumentationScope?: ReadableSpan['instrumentationScope'];
}

type Core = Pick<SpanPipeline, 'millisToHrTime' | 'hrTimeDuration' | 'sanitizeAttributes' | 'isAttributeValue'>;

/**
 * The pipeline of the SDK's tracer, or undefined when the tracer does not hold it as the SDK
 * this project pins does (the request span is then made with the SDK's Span, as read spans are).
 */
export function sdkPipeline(tracer: unknown, core: Core, direct?: SpanPipeline['direct']): SpanPipeline | undefined {
  const t = tracer as TracerParts;
  if (
    typeof t._sampler?.shouldSample !== 'function' ||
    typeof t._spanProcessor?.onEnd !== 'function' ||
    typeof t._spanLimits !== 'object' ||
    typeof t._resource !== 'object' ||
    typeof t.instrumentationScope !== 'object'
  )
    return undefined;
  return {
    sampler: t._sampler,
    limits: t._spanLimits,
    resource: t._resource,
    scope: t.instrumentationScope,
    processor: t._spanProcessor,
    millisToHrTime: core.millisToHrTime,
    hrTimeDuration: core.hrTimeDuration,
    sanitizeAttributes: core.sanitizeAttributes,
    isAttributeValue: core.isAttributeValue,
    ...(direct !== undefined ? { direct } : {}),
  };
}

/** The OpenTelemetry API's values this file uses (its enums, as numbers). */
const SERVER = 1; // SpanKind.SERVER
const SAMPLED = 1; // TraceFlags.SAMPLED
const NOT_SAMPLED = 0; // TraceFlags.NONE
const NOT_RECORD = 0; // SamplingDecision.NOT_RECORD
const RECORD_AND_SAMPLED = 2; // SamplingDecision.RECORD_AND_SAMPLED
const UNSET = 0; // SpanStatusCode.UNSET
const ERROR = 2; // SpanStatusCode.ERROR

/** A finished span of kind SERVER, as the SDK's processors and exporters read one. */
class RecordSpan implements ReadableSpan {
  readonly kind = SERVER;
  readonly links: Link[] = [];
  readonly droppedLinksCount = 0;
  readonly ended = true;

  constructor(
    private readonly context: SpanContext,
    readonly parentSpanContext: SpanContext | undefined,
    readonly name: string,
    readonly startTime: HrTime,
    readonly endTime: HrTime,
    readonly duration: HrTime,
    readonly attributes: Attributes,
    readonly droppedAttributesCount: number,
    readonly events: TimedEvent[],
    readonly droppedEventsCount: number,
    readonly status: SpanStatus,
    readonly resource: ReadableSpan['resource'],
    readonly instrumentationScope: ReadableSpan['instrumentationScope'],
  ) {}

  spanContext(): SpanContext {
    return this.context;
  }
}

/** A request span as its record describes it (request-span.ts's plan, with its ids and parent). */
export interface RecordSpanInput {
  readonly name: string;
  readonly traceId: string;
  readonly spanId: string;
  /** The caller's span (remote), its context the parent context; undefined for a new trace. */
  readonly parent: SpanContext | undefined;
  readonly parentContext: Context;
  readonly startMs: number;
  readonly endMs: number;
  readonly attributes: Attributes;
  readonly events: readonly { readonly name: string; readonly atMs: number }[];
  readonly failed: boolean;
}

/** Attributes kept and dropped under the span limits, as the SDK's span sets them one by one. */
class AttributesWithin {
  readonly out: Attributes = {};
  count = 0;
  dropped = 0;
  constructor(private readonly p: SpanPipeline) {}

  set(key: string, value: AttributeValue | undefined): void {
    if (value == null || key.length === 0 || !this.p.isAttributeValue(value)) return;
    const limit = this.p.limits.attributeCountLimit;
    const isNew = !Object.hasOwn(this.out, key);
    if (limit !== undefined && this.count >= limit && isNew) {
      this.dropped++;
      return;
    }
    this.out[key] = truncated(value, this.p.limits.attributeValueLengthLimit ?? 0);
    if (isNew) this.count++;
  }

  setAll(a: Attributes): void {
    for (const key in a) if (Object.hasOwn(a, key)) this.set(key, a[key]);
  }
}

/** A value under the value length limit (strings and the strings of arrays; a limit not above 0 cuts nothing). */
function truncated(v: AttributeValue, limit: number): AttributeValue {
  if (limit <= 0) return v;
  if (typeof v === 'string') return v.length <= limit ? v : v.substring(0, limit);
  if (Array.isArray(v))
    return v.map((x) => (typeof x === 'string' && x.length > limit ? x.substring(0, limit) : x)) as AttributeValue;
  return v;
}

function countKeys(a: Attributes): number {
  let n = 0;
  for (const key in a) if (Object.hasOwn(a, key)) n++;
  return n;
}

/** The span's attributes: the sampler's first, then the record's, under the limits. */
function spanAttributes(p: SpanPipeline, fromSampler: Attributes, own: Attributes): { a: Attributes; dropped: number } {
  const countLimit = p.limits.attributeCountLimit;
  const lengthLimit = p.limits.attributeValueLengthLimit ?? 0;
  // The common case: nothing from the sampler, no limit reached: the record's object as it is.
  if (
    countKeys(fromSampler) === 0 &&
    (countLimit === undefined || countKeys(own) <= countLimit) &&
    !(lengthLimit > 0 && lengthLimit < Number.POSITIVE_INFINITY)
  )
    return { a: own, dropped: 0 };
  const w = new AttributesWithin(p);
  w.setAll(fromSampler);
  w.setAll(own);
  return { a: w.out, dropped: w.dropped };
}

/** The events kept under the event count limit (the SDK keeps the latest), and how many were dropped. */
function spanEvents(p: SpanPipeline, own: RecordSpanInput['events']): { events: TimedEvent[]; dropped: number } {
  const limit = p.limits.eventCountLimit;
  const events: TimedEvent[] = [];
  let dropped = 0;
  for (const e of own) {
    if (limit === 0) {
      dropped++;
      continue;
    }
    if (limit !== undefined && events.length >= limit) {
      events.shift();
      dropped++;
    }
    events.push({ name: e.name, attributes: {}, time: p.millisToHrTime(e.atMs), droppedAttributesCount: 0 });
  }
  return { events, dropped };
}

/**
 * Makes the request's span (kind SERVER) as the SDK's tracer would, the sampler deciding,
 * and hands it, finished, to the SDK's processors. Nothing when the sampler drops it.
 */
export function endRecordSpan(p: SpanPipeline, s: RecordSpanInput): void {
  // The SDK's tracer gives the sampler a span's start attributes (none here) and links (none).
  const fromSampler: Attributes = {};
  const decision = p.sampler.shouldSample(s.parentContext, s.traceId, s.name, SERVER, fromSampler, []);
  if (decision.decision === NOT_RECORD) return;
  const context: SpanContext = {
    traceId: s.traceId,
    spanId: s.spanId,
    traceFlags: decision.decision === RECORD_AND_SAMPLED ? SAMPLED : NOT_SAMPLED,
    traceState: decision.traceState ?? s.parent?.traceState,
  };
  // The sampler may have added to the attributes it was given, and may return more.
  Object.assign(fromSampler, decision.attributes);
  const initial = countKeys(fromSampler) === 0 ? fromSampler : p.sanitizeAttributes(fromSampler);
  const { a, dropped } = spanAttributes(p, initial, s.attributes);
  if (p.direct !== undefined) {
    // The one processor drops what is not sampled.
    if (context.traceFlags !== SAMPLED) return;
    const eventLimit = p.limits.eventCountLimit;
    if (dropped === 0 && (eventLimit === undefined || s.events.length <= eventLimit)) {
      p.direct.onEncoded(
        encodePlannedSpan({
          context,
          parent: s.parent,
          name: s.name,
          startMs: s.startMs,
          endMs: s.endMs,
          attributes: a,
          events: s.events,
          statusCode: s.failed ? ERROR : UNSET,
          resource: p.resource,
          scope: p.scope,
        }),
      );
      return;
    }
  }
  const events = spanEvents(p, s.events);
  const startTime = p.millisToHrTime(s.startMs);
  let endTime = p.millisToHrTime(s.endMs);
  let duration = p.hrTimeDuration(startTime, endTime);
  if (duration[0] < 0) {
    endTime = [startTime[0], startTime[1]];
    duration = [0, 0];
  }
  const span = new RecordSpan(
    context,
    s.parent,
    s.name,
    startTime,
    endTime,
    duration,
    a,
    dropped,
    events.events,
    events.dropped,
    { code: s.failed ? ERROR : UNSET },
    p.resource,
    p.scope,
  );
  p.processor.onEnd(span);
}
