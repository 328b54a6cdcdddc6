import type { Attributes, AttributeValue, HrTime, Link, SpanContext } from '@opentelemetry/api';
import type { ReadableSpan, TimedEvent } from '@opentelemetry/sdk-trace';

/*
 * The OTLP `ExportTraceServiceRequest` of a batch of finished spans, in protobuf: the same
 * bytes as the SDK's own serializer (@opentelemetry/otlp-transformer's
 * `ProtobufTraceSerializer`: same fields, same order, same defaults written), in one pass into
 * one buffer instead of a size-estimating pass and a writing pass with an id array allocated
 * per id (docs/decisions/0033). test/telemetry/otlp-protobuf.test.ts compares the two byte for
 * byte. Field numbers: opentelemetry-proto, trace/v1/trace.proto and common/v1/common.proto.
 */

type Resource = ReadableSpan['resource'];
/** The scope as the SDK may hold it (attributes are newer than the declared type). */
type Scope = ReadableSpan['instrumentationScope'] & {
  readonly attributes?: Attributes;
  readonly droppedAttributesCount?: number;
};

/** Wire types. */
const VARINT = 0;
const FIXED64 = 1;
const LEN = 2;
const FIXED32 = 5;

/** Tags of KeyValue.key, KeyValue.value and AnyValue.string_value. */
const KEY = (1 << 3) | LEN;
const VALUE = (2 << 3) | LEN;
const STRING_VALUE = (1 << 3) | LEN;
const INT_VALUE = (3 << 3) | VARINT;

/** W3C span flags in OTLP: the context's trace flags, and whether its `is_remote` is known (always) and set. */
const HAS_IS_REMOTE = 0x100;
const IS_REMOTE = 0x200;

/** Bytes held for a length before the message is written (most spans are 128..16383 bytes; most parts under 128). */
const SPAN_LENGTH_BYTES = 2;
const PART_LENGTH_BYTES = 1;
const BATCH_LENGTH_BYTES = 3;

/** Strings shorter than this are copied by hand (their length's varint is one byte); longer ones natively. */
const SHORT_STRING = 128;
const TWO_32 = 0x1_0000_0000;
const INT64_MIN = -(2 ** 63);
const INT64_MAX_EXCLUSIVE = 2 ** 63;

function varintSize(v: number): number {
  return v < 0x80 ? 1 : v < 0x4000 ? 2 : v < 0x20_0000 ? 3 : v < 0x1000_0000 ? 4 : 5;
}

/** A hex digit's value (what the SDK's serializer reads; ids are lower-case hex already). */
function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48;
  if (c >= 97 && c <= 102) return c - 87;
  return c - 55;
}

/** hexValue of the ASCII codes, looked up (random hex digits make its branches unpredictable). */
const HEX_VALUES = Int16Array.from({ length: 128 }, (_, c) => hexValue(c));
const hexAt = (s: string, i: number): number => {
  const c = s.charCodeAt(i);
  return c < 128 ? HEX_VALUES[c]! : hexValue(c);
};

/** A growing buffer with a write position; lengths are written after their message (`open`/`close`). */
class Writer {
  buf: Buffer;
  pos = 0;

  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }

  private ensure(n: number): void {
    if (this.pos + n > this.buf.length) this.grow(n);
  }

  private grow(n: number): void {
    let size = this.buf.length * 2;
    while (size < this.pos + n) size *= 2;
    const next = Buffer.allocUnsafe(size);
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  tag(field: number, wire: number): void {
    const t = (field << 3) | wire;
    if (t < 0x80) {
      this.ensure(1);
      this.buf[this.pos++] = t;
    } else this.varint(t);
  }

  /** A varint of a JS number: 32-bit unsigned as is, anything else as a 64-bit two's complement (10 bytes when negative). */
  varint(value: number): void {
    this.ensure(10);
    const b = this.buf;
    let p = this.pos;
    if (value >= 0 && value <= 0xffff_ffff) {
      let v = value >>> 0;
      while (v > 0x7f) {
        b[p++] = (v & 0x7f) | 0x80;
        v >>>= 7;
      }
      b[p++] = v;
    } else {
      const abs = Math.abs(value);
      let low = abs >>> 0;
      let high = (abs / TWO_32) >>> 0;
      if (value < 0) {
        low = ~low >>> 0;
        high = ~high >>> 0;
        low = (low + 1) >>> 0;
        if (low === 0) high = (high + 1) >>> 0;
      }
      while (high > 0 || low > 0x7f) {
        b[p++] = (low & 0x7f) | 0x80;
        low = ((low >>> 7) | (high << 25)) >>> 0;
        high >>>= 7;
      }
      b[p++] = low & 0x7f;
    }
    this.pos = p;
  }

  fixed32(v: number): void {
    this.ensure(4);
    const b = this.buf;
    const p = this.pos;
    b[p] = v;
    b[p + 1] = v >>> 8;
    b[p + 2] = v >>> 16;
    b[p + 3] = v >>> 24;
    this.pos = p + 4;
  }

  fixed64(low: number, high: number): void {
    this.ensure(8);
    const b = this.buf;
    const p = this.pos;
    b[p] = low;
    b[p + 1] = low >>> 8;
    b[p + 2] = low >>> 16;
    b[p + 3] = low >>> 24;
    b[p + 4] = high;
    b[p + 5] = high >>> 8;
    b[p + 6] = high >>> 16;
    b[p + 7] = high >>> 24;
    this.pos = p + 8;
  }

  double(v: number): void {
    this.ensure(8);
    this.buf.writeDoubleLE(v, this.pos);
    this.pos += 8;
  }

  /** An HrTime ([seconds, nanoseconds]) as fixed64 nanoseconds, exact beyond 2^53 (seconds split at bit 16). */
  time(t: HrTime): void {
    this.timeParts(t[0], t[1]);
  }

  /** Epoch milliseconds as the SDK's core makes them an HrTime (millisToHrTime), then as time() writes that. */
  timeMs(ms: number): void {
    this.timeParts(Math.trunc(ms / 1000), Math.round((ms % 1000) * 1e6));
  }

  private timeParts(seconds: number, nanos: number): void {
    const lowSeconds = seconds & 0xffff;
    const highSeconds = (seconds / 0x1_0000) >>> 0;
    const lowPart = lowSeconds * 1e9; // < 2^53
    const highPart = highSeconds * 1e9; // < 2^53, worth highPart * 2^16
    const sum = (lowPart >>> 0) + (((highPart & 0xffff) * 0x1_0000) >>> 0) + nanos;
    const low = sum >>> 0;
    const high = Math.floor(lowPart / TWO_32) + ((highPart / 0x1_0000) >>> 0) + Math.floor(sum / TWO_32);
    this.fixed64(low, high >>> 0);
  }

  /** A hex id as bytes (length-delimited). */
  hexBytes(hex: string): void {
    const n = hex.length >>> 1;
    this.varint(n);
    this.ensure(n);
    const b = this.buf;
    let p = this.pos;
    for (let i = 0; i < 2 * n; i += 2) b[p++] = (hexAt(hex, i) << 4) | hexAt(hex, i + 1);
    this.pos = p;
  }

  bytes(v: Uint8Array): void {
    this.varint(v.length);
    this.ensure(v.length);
    this.buf.set(v, this.pos);
    this.pos += v.length;
  }

  /** A string as UTF-8 (length-delimited; a lone surrogate becomes U+FFFD, as TextEncoder writes it). */
  string(s: string): void {
    const n = s.length;
    if (n < SHORT_STRING) {
      this.ensure(n + 1);
      const b = this.buf;
      const start = this.pos;
      let p = start + 1;
      let i = 0;
      for (; i < n; i++) {
        const c = s.charCodeAt(i);
        if (c > 0x7f) break;
        b[p++] = c;
      }
      if (i === n) {
        b[start] = n;
        this.pos = p;
        return;
      }
    }
    const bytes = Buffer.byteLength(s, 'utf8');
    this.varint(bytes);
    this.ensure(bytes);
    this.pos += this.buf.write(s, this.pos, bytes, 'utf8');
  }

  /** Copies `length` bytes of `from` at `start`. */
  copy(from: Buffer, start: number, length: number): void {
    this.ensure(length);
    from.copy(this.buf, this.pos, start, start + length);
    this.pos += length;
  }

  /**
   * A `KeyValue` of an ASCII key and value whose message is under 128 bytes (every length one
   * byte), written in one go: false, and nothing written, for any other.
   */
  shortStringKeyValue(key: string, value: string): boolean {
    const kl = key.length;
    const vl = value.length;
    const len = 6 + kl + vl;
    if (len > 0x7f) return false;
    this.ensure(len + 1);
    const b = this.buf;
    let p = this.pos;
    b[p++] = len;
    b[p++] = KEY;
    b[p++] = kl;
    for (let i = 0; i < kl; i++) {
      const c = key.charCodeAt(i);
      if (c > 0x7f) return false;
      b[p++] = c;
    }
    b[p++] = VALUE;
    b[p++] = vl + 2;
    b[p++] = STRING_VALUE;
    b[p++] = vl;
    for (let i = 0; i < vl; i++) {
      const c = value.charCodeAt(i);
      if (c > 0x7f) return false;
      b[p++] = c;
    }
    this.pos = p;
    return true;
  }

  /**
   * A `KeyValue` of an ASCII key and an integer value from 0 to 2^28 - 1 (a varint of at most
   * four bytes), under 128 bytes: false, and nothing written, for any other.
   */
  shortIntKeyValue(key: string, value: number): boolean {
    if (!(value >= 0 && value < 0x1000_0000 && Number.isInteger(value))) return false;
    const kl = key.length;
    const vl = varintSize(value);
    const len = 5 + kl + vl;
    if (len > 0x7f) return false;
    this.ensure(len + 1);
    const b = this.buf;
    let p = this.pos;
    b[p++] = len;
    b[p++] = KEY;
    b[p++] = kl;
    for (let i = 0; i < kl; i++) {
      const c = key.charCodeAt(i);
      if (c > 0x7f) return false;
      b[p++] = c;
    }
    b[p++] = VALUE;
    b[p++] = vl + 1;
    b[p++] = INT_VALUE;
    let v = value;
    while (v > 0x7f) {
      b[p++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    b[p++] = v;
    this.pos = p;
    return true;
  }

  /** Holds `reserve` bytes for a length; returns where. */
  open(reserve: number): number {
    this.ensure(reserve);
    const at = this.pos;
    this.pos += reserve;
    return at;
  }

  /** Writes the length of what followed `open`, moving it when the length's varint is not `reserve` bytes. */
  close(at: number, reserve: number): void {
    const len = this.pos - at - reserve;
    const size = varintSize(len);
    if (size !== reserve) {
      this.ensure(size - reserve);
      this.buf.copyWithin(at + size, at + reserve, this.pos);
      this.pos += size - reserve;
    }
    const b = this.buf;
    let v = len;
    let p = at;
    while (v > 0x7f) {
      b[p++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    b[p] = v;
  }
}

/** `AnyValue`'s content (nothing for a value of no OTLP type, as the SDK writes it). */
function anyValue(w: Writer, v: unknown): void {
  const t = typeof v;
  if (t === 'string') {
    w.tag(1, LEN);
    w.string(v as string);
  } else if (t === 'boolean') {
    w.tag(2, VARINT);
    w.varint(v ? 1 : 0);
  } else if (t === 'number') {
    const n = v as number;
    if (Number.isInteger(n) && n >= INT64_MIN && n < INT64_MAX_EXCLUSIVE) {
      w.tag(3, VARINT);
      w.varint(n);
    } else {
      w.tag(4, FIXED64);
      w.double(n);
    }
  } else if (v instanceof Uint8Array) {
    w.tag(7, LEN);
    w.bytes(v);
  } else if (Array.isArray(v)) {
    w.tag(5, LEN);
    const at = w.open(PART_LENGTH_BYTES);
    for (const item of v) {
      w.tag(1, LEN);
      const i = w.open(PART_LENGTH_BYTES);
      anyValue(w, item);
      w.close(i, PART_LENGTH_BYTES);
    }
    w.close(at, PART_LENGTH_BYTES);
  } else if (t === 'object' && v !== null) {
    w.tag(6, LEN);
    const at = w.open(PART_LENGTH_BYTES);
    const o = v as Record<string, unknown>;
    for (const k in o) {
      if (!Object.hasOwn(o, k)) continue;
      w.tag(1, LEN);
      keyValue(w, k, o[k]);
    }
    w.close(at, PART_LENGTH_BYTES);
  }
}

/** A `KeyValue` message (length-delimited; its tag already written). */
function keyValue(w: Writer, key: string, value: unknown): void {
  if (
    typeof value === 'string'
      ? w.shortStringKeyValue(key, value)
      : typeof value === 'number' && w.shortIntKeyValue(key, value)
  )
    return;
  const at = w.open(PART_LENGTH_BYTES);
  w.tag(1, LEN);
  w.string(key);
  w.tag(2, LEN);
  const v = w.open(PART_LENGTH_BYTES);
  anyValue(w, value);
  w.close(v, PART_LENGTH_BYTES);
  w.close(at, PART_LENGTH_BYTES);
}

/** Repeated `KeyValue` in field `field`. */
function attributes(w: Writer, a: Attributes | Record<string, AttributeValue | undefined>, field: number): void {
  for (const key in a) {
    if (!Object.hasOwn(a, key)) continue;
    w.tag(field, LEN);
    keyValue(w, key, a[key]);
  }
}

function spanFlags(traceFlags: number, isRemote: boolean | undefined): number {
  return (traceFlags & 0xff) | HAS_IS_REMOTE | (isRemote ? IS_REMOTE : 0);
}

/** `Span.Event` (its tag written). */
function event(w: Writer, e: TimedEvent): void {
  const at = w.open(PART_LENGTH_BYTES);
  w.tag(1, FIXED64);
  w.time(e.time);
  w.tag(2, LEN);
  w.string(e.name);
  if (e.attributes) attributes(w, e.attributes, 3);
  w.tag(4, VARINT);
  w.varint(e.droppedAttributesCount || 0);
  w.close(at, PART_LENGTH_BYTES);
}

/** `Span.Link` (its tag written). */
function link(w: Writer, l: Link & { droppedAttributesCount?: number }): void {
  const at = w.open(PART_LENGTH_BYTES);
  const c = l.context;
  w.tag(1, LEN);
  w.hexBytes(c.traceId);
  w.tag(2, LEN);
  w.hexBytes(c.spanId);
  const state = c.traceState?.serialize();
  if (state) {
    w.tag(3, LEN);
    w.string(state);
  }
  if (l.attributes) attributes(w, l.attributes, 4);
  w.tag(5, VARINT);
  w.varint(l.droppedAttributesCount || 0);
  w.tag(6, FIXED32);
  w.fixed32(spanFlags(c.traceFlags, c.isRemote));
  w.close(at, PART_LENGTH_BYTES);
}

/** `Span` (its tag written). */
function span(w: Writer, s: ReadableSpan): void {
  const at = w.open(SPAN_LENGTH_BYTES);
  const ctx = s.spanContext();
  w.tag(1, LEN);
  w.hexBytes(ctx.traceId);
  w.tag(2, LEN);
  w.hexBytes(ctx.spanId);
  const state = ctx.traceState?.serialize();
  if (state) {
    w.tag(3, LEN);
    w.string(state);
  }
  const parent = s.parentSpanContext;
  if (parent?.spanId) {
    w.tag(4, LEN);
    w.hexBytes(parent.spanId);
  }
  w.tag(5, LEN);
  w.string(s.name);
  // OTLP's SpanKind counts from 1 (0 is unspecified); the API's from 0.
  const kind = s.kind == null ? 0 : s.kind + 1;
  if (kind !== 0) {
    w.tag(6, VARINT);
    w.varint(kind);
  }
  w.tag(7, FIXED64);
  w.time(s.startTime);
  w.tag(8, FIXED64);
  w.time(s.endTime);
  if (s.attributes) attributes(w, s.attributes, 9);
  w.tag(10, VARINT);
  w.varint(s.droppedAttributesCount);
  for (const e of s.events) {
    w.tag(11, LEN);
    event(w, e);
  }
  w.tag(12, VARINT);
  w.varint(s.droppedEventsCount);
  for (const l of s.links) {
    w.tag(13, LEN);
    link(w, l);
  }
  w.tag(14, VARINT);
  w.varint(s.droppedLinksCount);
  w.tag(15, LEN);
  const st = w.open(PART_LENGTH_BYTES);
  if (s.status.message) {
    w.tag(2, LEN);
    w.string(s.status.message);
  }
  w.tag(3, VARINT);
  w.varint(s.status.code);
  w.close(st, PART_LENGTH_BYTES);
  w.tag(16, FIXED32);
  w.fixed32(spanFlags(ctx.traceFlags, parent?.isRemote));
  w.close(at, SPAN_LENGTH_BYTES);
}

function scopeSpans(w: Writer, scope: Scope, spans: readonly Queued[]): void {
  const at = w.open(BATCH_LENGTH_BYTES);
  w.tag(1, LEN);
  const sc = w.open(PART_LENGTH_BYTES);
  w.tag(1, LEN);
  w.string(scope.name);
  if (scope.version) {
    w.tag(2, LEN);
    w.string(scope.version);
  }
  if (scope.attributes) attributes(w, scope.attributes, 3);
  if (scope.droppedAttributesCount) {
    w.tag(4, VARINT);
    w.varint(scope.droppedAttributesCount);
  }
  w.close(sc, PART_LENGTH_BYTES);
  for (const s of spans) {
    if (s instanceof EncodedSpan) s.copyTo(w);
    else {
      w.tag(2, LEN);
      span(w, s);
    }
  }
  if (scope.schemaUrl) {
    w.tag(3, LEN);
    w.string(scope.schemaUrl);
  }
  w.close(at, BATCH_LENGTH_BYTES);
}

function resourceSpans(w: Writer, resource: Resource, scopes: ReadonlyMap<Scope, Queued[]>): void {
  const at = w.open(BATCH_LENGTH_BYTES);
  w.tag(1, LEN);
  const r = w.open(PART_LENGTH_BYTES);
  if (resource.attributes) attributes(w, resource.attributes, 1);
  w.tag(2, VARINT);
  w.varint(0);
  w.close(r, PART_LENGTH_BYTES);
  for (const [scope, spans] of scopes) {
    w.tag(2, LEN);
    scopeSpans(w, scope, spans);
  }
  if (resource.schemaUrl) {
    w.tag(3, LEN);
    w.string(resource.schemaUrl);
  }
  w.close(at, BATCH_LENGTH_BYTES);
}

/**
 * A finished span already written as its `Span` message (tag and length included), made at
 * the span's end by encodeSpan: what the batch processor queues instead of the SDK's span
 * object. It answers what the batch processor and the exporter ask of a queued span (its
 * context's sampled flag, its resource and scope); its bytes are copied into the request.
 */
export class EncodedSpan {
  constructor(
    private readonly context: SpanContext,
    readonly resource: Resource,
    readonly instrumentationScope: Scope,
    private readonly slab: Buffer,
    private readonly start: number,
    readonly byteLength: number,
  ) {}

  spanContext(): SpanContext {
    return this.context;
  }

  copyTo(w: Writer): void {
    w.copy(this.slab, this.start, this.byteLength);
  }
}

/** Spans are written one after another into a slab; a new slab when less than this is left. */
const SLAB_BYTES = 64 * 1024;
const SLAB_MIN_FREE = 4 * 1024;
let slab = new Writer(SLAB_BYTES);

/** A finished span written now, while its objects are fresh, to be queued and exported later. */
export function encodeSpan(s: ReadableSpan): EncodedSpan {
  if (slab.buf.length - slab.pos < SLAB_MIN_FREE) slab = new Writer(SLAB_BYTES);
  const start = slab.pos;
  slab.tag(2, LEN);
  span(slab, s);
  // A span larger than what was left grew the slab into a new buffer: its bytes are there.
  return new EncodedSpan(s.spanContext(), s.resource, s.instrumentationScope, slab.buf, start, slab.pos - start);
}

/**
 * A span of kind SERVER with no links, its times in epoch milliseconds, events without
 * attributes, nothing dropped: the request span, written without a span object (record-span.ts).
 */
export interface PlannedSpan {
  readonly context: SpanContext;
  readonly parent: SpanContext | undefined;
  readonly name: string;
  readonly startMs: number;
  readonly endMs: number;
  readonly attributes: Attributes;
  readonly events: readonly { readonly name: string; readonly atMs: number }[];
  readonly statusCode: number;
  readonly resource: Resource;
  readonly scope: Scope;
}

/** The bytes encodeSpan writes for the finished span a PlannedSpan describes (record-span.ts's RecordSpan). */
export function encodePlannedSpan(s: PlannedSpan): EncodedSpan {
  if (slab.buf.length - slab.pos < SLAB_MIN_FREE) slab = new Writer(SLAB_BYTES);
  const w = slab;
  const start = w.pos;
  w.tag(2, LEN);
  const at = w.open(SPAN_LENGTH_BYTES);
  const ctx = s.context;
  w.tag(1, LEN);
  w.hexBytes(ctx.traceId);
  w.tag(2, LEN);
  w.hexBytes(ctx.spanId);
  const state = ctx.traceState?.serialize();
  if (state) {
    w.tag(3, LEN);
    w.string(state);
  }
  if (s.parent?.spanId) {
    w.tag(4, LEN);
    w.hexBytes(s.parent.spanId);
  }
  w.tag(5, LEN);
  w.string(s.name);
  w.tag(6, VARINT);
  w.varint(SERVER_KIND + 1);
  w.tag(7, FIXED64);
  w.timeMs(s.startMs);
  w.tag(8, FIXED64);
  // An end before the start is written as the start (the SDK's span ends so).
  w.timeMs(endsBefore(s.startMs, s.endMs) ? s.startMs : s.endMs);
  attributes(w, s.attributes, 9);
  w.tag(10, VARINT);
  w.varint(0);
  for (const e of s.events) {
    w.tag(11, LEN);
    const ev = w.open(PART_LENGTH_BYTES);
    w.tag(1, FIXED64);
    w.timeMs(e.atMs);
    w.tag(2, LEN);
    w.string(e.name);
    w.tag(4, VARINT);
    w.varint(0);
    w.close(ev, PART_LENGTH_BYTES);
  }
  w.tag(12, VARINT);
  w.varint(0);
  w.tag(14, VARINT);
  w.varint(0);
  w.tag(15, LEN);
  const st = w.open(PART_LENGTH_BYTES);
  w.tag(3, VARINT);
  w.varint(s.statusCode);
  w.close(st, PART_LENGTH_BYTES);
  w.tag(16, FIXED32);
  w.fixed32(spanFlags(ctx.traceFlags, s.parent?.isRemote));
  w.close(at, SPAN_LENGTH_BYTES);
  return new EncodedSpan(ctx, s.resource, s.scope, w.buf, start, w.pos - start);
}

/** The API's SpanKind.SERVER. */
const SERVER_KIND = 1;

/** Whether the end's HrTime (millisToHrTime's) comes before the start's, as the SDK's hrTimeDuration tells it. */
function endsBefore(startMs: number, endMs: number): boolean {
  let seconds = Math.trunc(endMs / 1000) - Math.trunc(startMs / 1000);
  if (Math.round((endMs % 1000) * 1e6) - Math.round((startMs % 1000) * 1e6) < 0) seconds -= 1;
  return seconds < 0;
}

type Queued = ReadableSpan | EncodedSpan;

/** Spans by resource, then by scope (the same objects, in the order first seen). */
function grouped(spans: readonly Queued[]): Map<Resource, Map<Scope, Queued[]>> {
  const out = new Map<Resource, Map<Scope, Queued[]>>();
  for (const s of spans) {
    let scopes = out.get(s.resource);
    if (scopes === undefined) {
      scopes = new Map();
      out.set(s.resource, scopes);
    }
    let list = scopes.get(s.instrumentationScope);
    if (list === undefined) {
      list = [];
      scopes.set(s.instrumentationScope, list);
    }
    list.push(s);
  }
  return out;
}

/** Bytes a span took in the last batch (the next buffer's first size; it grows when short). */
let bytesPerSpan = 640;

/** `ExportTraceServiceRequest` of `spans` (the SDK's spans, or spans written at their end), protobuf. */
export function encodeTraceExport(spans: readonly Queued[]): Uint8Array {
  let size = 4096;
  for (const s of spans) size += s instanceof EncodedSpan ? s.byteLength : bytesPerSpan;
  const w = new Writer(size);
  for (const [resource, scopes] of grouped(spans)) {
    w.tag(1, LEN);
    resourceSpans(w, resource, scopes);
  }
  if (spans.length > 0) bytesPerSpan = Math.max(64, Math.ceil(w.pos / spans.length) + 32);
  return w.buf.subarray(0, w.pos);
}
