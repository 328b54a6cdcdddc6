import { createServer, type Server } from 'node:http';
import { createRequire } from 'node:module';
import { gunzipSync } from 'node:zlib';

/**
 * An OTLP/HTTP trace receiver, as a collector is one: `POST /v1/traces` in
 * `application/x-protobuf` (decoded with code generated from the official opentelemetry-proto
 * definitions, shipped in `@opentelemetry/otlp-proto-exporter-base`) and `application/json`
 * (OTLP/JSON), gzip or not. It keeps every request as it came and every span, flattened.
 */

/** The protobuf classes generated from opentelemetry-proto (protobufjs static code). */
const protoRoot = createRequire(import.meta.url)('@opentelemetry/otlp-proto-exporter-base/build/src/generated/root.js');
const ExportTraceServiceRequest = protoRoot.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;

/** One span as a collector received it: ids in hex, times in epoch nanoseconds, attributes as plain values. */
export interface ReceivedSpan {
  readonly traceId: string;
  readonly spanId: string;
  /** Empty for a root span. */
  readonly parentSpanId: string;
  readonly traceState: string;
  readonly name: string;
  /** OTLP SpanKind: 1 internal, 2 server, 3 client. */
  readonly kind: number;
  readonly startNs: bigint;
  readonly endNs: bigint;
  readonly attributes: Record<string, unknown>;
  readonly events: readonly { name: string; timeNs: bigint; attributes: Record<string, unknown> }[];
  /** OTLP status code: 0 unset, 1 ok, 2 error. */
  readonly status: { code: number; message: string };
  readonly resource: Record<string, unknown>;
  readonly scope: string;
}

/** One export request as it arrived. */
export interface ReceivedExport {
  readonly contentType: string;
  readonly body: Buffer;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
}

export interface OtlpReceiver {
  /** The origin to give as `OTEL_EXPORTER_OTLP_ENDPOINT`. */
  readonly url: string;
  readonly exports: ReceivedExport[];
  readonly spans: ReceivedSpan[];
  /** Resolves with the first span `pred` accepts, once it arrived. Thrown when: none within `timeoutMs`. */
  waitFor(pred: (s: ReceivedSpan) => boolean, timeoutMs?: number): Promise<ReceivedSpan>;
  close(): Promise<void>;
}

type AnyValue = {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number;
  arrayValue?: { values?: AnyValue[] };
  kvlistValue?: { values?: KeyValue[] };
  bytesValue?: string;
};
type KeyValue = { key: string; value?: AnyValue };

function plain(v: AnyValue | undefined): unknown {
  if (v === undefined) return undefined;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue !== undefined) return (v.arrayValue.values ?? []).map(plain);
  if (v.kvlistValue !== undefined) return attributesOf(v.kvlistValue.values);
  return v.bytesValue;
}

function attributesOf(kvs: readonly KeyValue[] | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of kvs ?? []) out[kv.key] = plain(kv.value);
  return out;
}

/** A protobuf export as the OTLP/JSON shape (ids still base64: `hexId` turns them to hex). */
function decodeProtobuf(body: Buffer): Record<string, unknown> {
  const msg = ExportTraceServiceRequest.decode(body);
  return ExportTraceServiceRequest.toObject(msg, { longs: String, bytes: String, enums: Number, arrays: true });
}

/** Flattens an export request (`resourceSpans` → `scopeSpans` → `spans`); `id` reads a trace or span id as hex. */
function flatten(req: Record<string, any>, id: (v: string | undefined) => string): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const rs of req['resourceSpans'] ?? []) {
    const resource = attributesOf(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          traceId: id(s.traceId),
          spanId: id(s.spanId),
          parentSpanId: id(s.parentSpanId),
          traceState: s.traceState ?? '',
          name: s.name,
          kind: Number(s.kind ?? 0),
          startNs: BigInt(s.startTimeUnixNano ?? 0),
          endNs: BigInt(s.endTimeUnixNano ?? 0),
          attributes: attributesOf(s.attributes),
          events: (s.events ?? []).map((e: any) => ({
            name: e.name,
            timeNs: BigInt(e.timeUnixNano ?? 0),
            attributes: attributesOf(e.attributes),
          })),
          status: { code: Number(s.status?.code ?? 0), message: s.status?.message ?? '' },
          resource,
          scope: ss.scope?.name ?? '',
        });
      }
    }
  }
  return out;
}

const base64Hex = (v: string | undefined): string => (v ? Buffer.from(v, 'base64').toString('hex') : '');
/** OTLP/JSON carries ids as hex already (the OTLP specification's exception to proto3 JSON). */
const hexAsIs = (v: string | undefined): string => (v ?? '').toLowerCase();

/**
 * Starts a receiver on 127.0.0.1 and a free port, or where `at` says (`::` listens on IPv6 and
 * IPv4 alike, as `localhost` may be either). Thrown when: the port is taken.
 */
export async function startOtlpReceiver(
  at: { port: number; host: string } = { port: 0, host: '127.0.0.1' },
): Promise<OtlpReceiver> {
  const exports: ReceivedExport[] = [];
  const spans: ReceivedSpan[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let body = Buffer.concat(chunks);
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      if (/gzip/i.test(String(req.headers['content-encoding'] ?? ''))) body = gunzipSync(body);
      const contentType = String(req.headers['content-type'] ?? '');
      exports.push({ contentType, body, headers: req.headers });
      try {
        if (/^application\/x-protobuf/i.test(contentType)) {
          spans.push(...flatten(decodeProtobuf(body), base64Hex));
          res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
        } else if (/^application\/json/i.test(contentType)) {
          spans.push(...flatten(JSON.parse(body.toString('utf8')), hexAsIs));
          res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        } else res.writeHead(415).end();
      } catch {
        res.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(at.port, at.host, resolve);
  });
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    exports,
    spans,
    async waitFor(pred, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const s = spans.find(pred);
        if (s !== undefined) return s;
        if (Date.now() > deadline) throw new Error(`no such span within ${timeoutMs} ms (${spans.length} received)`);
        await new Promise((r) => setTimeout(r, 25));
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
