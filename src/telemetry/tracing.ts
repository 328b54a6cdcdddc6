import type { Logger } from 'pino';
import type { Context, Span, SpanOptions, Tracer } from '@opentelemetry/api';
import { protobufParts, protobufSpanProcessor } from './otlp-exporter.js';
import { sdkPipeline, type SpanPipeline } from './record-span.js';
import { SpanBatch } from './span-batch.js';
import { parseTraceparent, randomSpanIds, type SpanIds } from './trace-context.js';

/*
 * OpenTelemetry traces, exported over OTLP only when the standard variables ask for it
 * (CONTRACT.md, Telemetry: a deliberate difference from the SDK's default of exporting to
 * localhost). The SDK is imported only then: a process that does not export pays nothing for
 * it, not even the import. The variables are read from the environment a server is given
 * (its deps.env, else process.env): servers in one process with the same OTEL_* settings
 * share one SDK, servers with other settings get their own (decision 0057).
 */

/** The OpenTelemetry API and SDK pieces a span maker needs (loaded lazily). */
type Api = typeof import('@opentelemetry/api');

/** True when the environment asks for traces over OTLP (docs/operations.md, Tracing). */
export function tracingRequested(env: NodeJS.ProcessEnv = process.env): boolean {
  if (/^\s*true\s*$/i.test(env['OTEL_SDK_DISABLED'] ?? '')) return false;
  const exporters = (env['OTEL_TRACES_EXPORTER'] ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  if (exporters.includes('otlp')) return true;
  // `none` (or only exporters other than OTLP) with an endpoint set: still no export.
  if (exporters.length > 0) return false;
  return Boolean(env['OTEL_EXPORTER_OTLP_ENDPOINT']?.trim() || env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT']?.trim());
}

/** A process's tracing, while traces are exported. */
export interface Tracing {
  readonly api: Api;
  readonly tracer: Tracer;
  /** Ids for spans whose id must be known before the span is made (the router's request span). */
  readonly ids: SpanIds;
  /**
   * Starts a span whose trace and span ids were chosen beforehand (sent upstream while the
   * request ran): the SDK's id generator hands them out for this one call.
   */
  startSpanWithIds(name: string, options: SpanOptions, parent: Context, ids: { traceId: string; spanId: string }): Span;
  /**
   * The SDK tracer's sampler, limits, resource, scope and processors, through which the
   * request span is made straight from its record (record-span.ts); undefined if the SDK's
   * tracer does not hold them as the pinned SDK does (startSpanWithIds makes it then).
   */
  readonly pipeline: SpanPipeline | undefined;
  /** Runs span work later, a batch at a time (span-batch.ts); flush and release run what is queued first. */
  later(task: () => void): void;
  /** Exports every span ended so far. */
  flush(): Promise<void>;
  /** This server no longer makes spans; the last one to release it shuts the SDK down (exporting what is left). */
  release(): Promise<void>;
}

/** The SDK's id generator, with ids staged for the next span (synchronous: nothing runs between stage and use). */
export class StagedIds {
  traceId: string | undefined;
  spanId: string | undefined;
  constructor(private readonly random: { generateTraceId(): string; generateSpanId(): string }) {}
  generateTraceId = (): string => {
    const t = this.traceId;
    this.traceId = undefined;
    return t ?? this.random.generateTraceId();
  };
  generateSpanId = (): string => {
    const s = this.spanId;
    this.spanId = undefined;
    return s ?? this.random.generateSpanId();
  };
}

/** The SDKs started, by their OTEL_* settings (otelKey), each with how many servers use it. */
const shared = new Map<string, { tracing: Promise<Tracing>; users: number }>();

/** What sets an SDK apart: every OTEL_* variable of `env`, in name order. */
function otelKey(env: NodeJS.ProcessEnv): string {
  return JSON.stringify(
    Object.keys(env)
      .filter((k) => k.startsWith('OTEL_'))
      .sort()
      .map((k) => [k, env[k]]),
  );
}

/** Longest wait at a stop for the last spans' export. */
const SHUTDOWN_WAIT_MS = 2_000;

/**
 * A server's tracing when `env` (its deps.env, else process.env) asks for it
 * (tracingRequested), else undefined. Callers with the same OTEL_* settings get one shared
 * SDK; each releases it when it stops.
 */
export async function startTracing(log: Logger, env: NodeJS.ProcessEnv = process.env): Promise<Tracing | undefined> {
  if (!tracingRequested(env)) return undefined;
  const key = otelKey(env);
  let s = shared.get(key);
  if (s === undefined) {
    const started = { tracing: loadTracing(log, env, key), users: 0 };
    shared.set(key, started);
    // A failed start leaves nothing behind: the next caller tries again.
    started.tracing.catch(() => {
      if (shared.get(key) === started) shared.delete(key);
    });
    s = started;
  }
  s.users++;
  return s.tracing;
}

/**
 * `make()` with `env` as process.env: the SDK reads its settings from process.env alone, while
 * it is made and started. Synchronous, so no other code runs while the swap lasts.
 */
function withEnv<T>(env: NodeJS.ProcessEnv, make: () => T): T {
  const own = process.env;
  if (env === own) return make();
  process.env = env;
  try {
    return make();
  } finally {
    process.env = own;
  }
}

/** A standard variable as the SDK reads it: undefined when unset or blank, else as written. */
function envValue(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === '' ? undefined : v;
}

/** The traces' OTLP protocol as the SDK chooses it. */
function otlpProtocol(env: NodeJS.ProcessEnv): string {
  return (
    envValue(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') ??
    envValue(env, 'OTEL_EXPORTER_OTLP_PROTOCOL') ??
    'http/protobuf'
  );
}

/**
 * True when the SDK, left to the environment, would make one span exporter and it is OTLP over
 * `http/protobuf` (its reading of OTEL_TRACES_EXPORTER: `null` ignored, none listed means
 * `otlp`, `none` after another name is dropped for `otlp`).
 */
export function protobufExporterChosen(env: NodeJS.ProcessEnv = process.env): boolean {
  let names = [
    ...new Set(
      (envValue(env, 'OTEL_TRACES_EXPORTER') ?? '')
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== '' && s !== 'null'),
    ),
  ];
  if (names.length === 0 || (names.length > 1 && names[0] !== 'none' && names.includes('none'))) names = ['otlp'];
  return names.length === 1 && names[0] === 'otlp' && otlpProtocol(env) === 'http/protobuf';
}

/** Whether a resource attribute list (`OTEL_RESOURCE_ATTRIBUTES`) names the service. */
const NAMES_SERVICE = /(?:^|,)\s*service\.name\s*=/;

async function loadTracing(log: Logger, env: NodeJS.ProcessEnv, key: string): Promise<Tracing> {
  const [api, sdkNode, sdkTrace] = await Promise.all([
    import('@opentelemetry/api'),
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/sdk-trace'),
  ]);
  const staged = new StagedIds(new sdkTrace.RandomIdGenerator());
  // The exporter the SDK would make from the environment, with our encoder when it is OTLP
  // over http/protobuf alone; any other choice is the SDK's own (docs/decisions/0033).
  const parts = protobufExporterChosen(env) ? await protobufParts() : undefined;
  // Made with the server's env as process.env: the exporter reads its settings from it.
  const { sdk, processor } = withEnv(env, () => {
    const made = parts !== undefined ? protobufSpanProcessor(parts) : undefined;
    return { sdk: startSdk(api, sdkNode, staged, env, made), processor: made };
  });
  log.info({ protocol: otlpProtocol(env).trim() }, 'traces exported over OTLP');
  // This SDK's own tracer (its provider is not the global one: startSdk).
  const tracer = sdk.provider.getTracer('svc-serving');
  const batch = new SpanBatch((err) => log.warn({ errName: (err as Error)?.name }, 'request span not made'));
  return {
    // Our processor is the tracer's only one when there is one (the request span is then written as it is made).
    ...tracingParts(api, tracer, staged, sdkNode.core, processor),
    later: (task) => batch.add(task),
    async flush() {
      batch.run();
      await sdk.provider.forceFlush?.();
    },
    async release() {
      batch.run();
      const s = shared.get(key);
      if (s === undefined || --s.users > 0) return;
      shared.delete(key);
      // The last spans go out, but a collector that does not answer cannot hold the stop.
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, SHUTDOWN_WAIT_MS);
        timer.unref();
      });
      await Promise.race([sdk.sdk.shutdown().catch(() => undefined), late]);
      clearTimeout(timer);
    },
  };
}

type SdkNode = typeof import('@opentelemetry/sdk-node');
type Provider = ReturnType<Api['trace']['getTracerProvider']> & { forceFlush?: () => Promise<void> };

/**
 * A started SDK and its own tracer provider. The SDK registers its provider globally; it is
 * taken back out of the global at once, so that servers with other settings can start theirs.
 */
function startSdk(
  api: Api,
  sdkNode: SdkNode,
  staged: StagedIds,
  env: NodeJS.ProcessEnv,
  processor: ReturnType<typeof protobufSpanProcessor> | undefined,
): { sdk: InstanceType<SdkNode['NodeSDK']>; provider: Provider } {
  const named = Boolean(env['OTEL_SERVICE_NAME']?.trim()) || NAMES_SERVICE.test(env['OTEL_RESOURCE_ATTRIBUTES'] ?? '');
  const sdk = new sdkNode.NodeSDK({
    // No metrics or logs over OTLP (Prometheus serves the metrics): traces only.
    metricReaders: [],
    logRecordProcessors: [],
    instrumentations: [],
    // Contexts are passed explicitly: no async context tracking, no global propagator.
    // null: register none (the SDK's reading; its type says only undefined).
    contextManager: null as unknown as undefined,
    textMapPropagator: null,
    idGenerator: staged,
    ...(processor !== undefined ? { spanProcessors: [processor] } : {}),
    // The process detector would export the command line; the environment and host are enough
    // unless the operator names detectors (OTEL_NODE_RESOURCE_DETECTORS).
    ...(env['OTEL_NODE_RESOURCE_DETECTORS']
      ? {}
      : { resourceDetectors: [sdkNode.resources.envDetector, sdkNode.resources.hostDetector] }),
    ...(named ? {} : { serviceName: 'svc-serving' }),
  });
  sdk.start();
  const proxy = api.trace.getTracerProvider() as Provider & { getDelegate?: () => Provider };
  const provider = proxy.getDelegate?.() ?? proxy;
  api.trace.disable();
  return { sdk, provider };
}

/**
 * A Tracing's span making over an SDK tracer whose provider draws its ids from `staged`
 * (tests make them over a provider of their own).
 */
export function tracingParts(
  api: Api,
  tracer: Tracer,
  staged: StagedIds,
  core: Parameters<typeof sdkPipeline>[1],
  direct?: Parameters<typeof sdkPipeline>[2],
): Pick<Tracing, 'api' | 'tracer' | 'ids' | 'startSpanWithIds' | 'pipeline'> {
  return {
    api,
    tracer,
    ids: randomSpanIds(),
    startSpanWithIds(name, options, parent, ids) {
      staged.traceId = ids.traceId;
      staged.spanId = ids.spanId;
      try {
        return tracer.startSpan(name, options, parent);
      } finally {
        staged.traceId = staged.spanId = undefined;
      }
    },
    pipeline: sdkPipeline(tracer, core, direct),
  };
}

/**
 * The context of a caller's W3C `traceparent` (HTTP headers), or the root context: the parent
 * of a span a server makes for a caller's read.
 */
export function parentContext(api: Api, traceparent: string | string[] | undefined): Context {
  const p = parseTraceparent(traceparent);
  if (p === undefined) return api.ROOT_CONTEXT;
  return api.trace.setSpanContext(api.ROOT_CONTEXT, {
    traceId: p.traceId,
    spanId: p.parentId,
    traceFlags: p.flags,
    isRemote: true,
  });
}
