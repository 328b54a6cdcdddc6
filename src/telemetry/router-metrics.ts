import { request } from 'undici';

/**
 * Router figures for the telemetry tab, read from the router's Prometheus `/metrics` (by the
 * `alias` label; base units converted to the milliseconds shown). These are display figures of
 * the router's current buffer, not workload records: eviction and restart reduce them, and they never create or change a record.
 */
export interface RouterModelFigures {
  readonly model: string;
  readonly requests_total: number | null;
  readonly active: number | null;
  readonly buffered: number | null;
  readonly ttfc_p50_ms: number | null;
  readonly ttfc_p95_ms: number | null;
  readonly latency_p50_ms: number | null;
  readonly latency_p95_ms: number | null;
}

export type RouterFigures =
  | { readonly status: 'ok'; readonly read_at: string; readonly models: RouterModelFigures[] }
  | { readonly status: 'unavailable'; readonly read_at: string };

/** The figures we show, and the factor from the exposition's base unit (seconds) to the figure's. */
const WANTED: Readonly<Record<string, readonly [keyof Omit<RouterModelFigures, 'model'>, number]>> = {
  svc_router_requests_total: ['requests_total', 1],
  svc_router_in_flight: ['active', 1],
  svc_router_buffer_records: ['buffered', 1],
  svc_router_buffer_time_to_first_content_seconds_p50: ['ttfc_p50_ms', 1000],
  svc_router_buffer_time_to_first_content_seconds_p95: ['ttfc_p95_ms', 1000],
  svc_router_buffer_latency_seconds_p50: ['latency_p50_ms', 1000],
  svc_router_buffer_latency_seconds_p95: ['latency_p95_ms', 1000],
};
/** Figures summed over their other labels (a counter split by route, outcome and status class). */
const SUMMED: ReadonlySet<string> = new Set(['requests_total']);
const LINE_RE = /^([a-z0-9_]+)\{([^\n]{0,1024})\} (\S+)$/;
const ALIAS_RE = /(?:^|,)alias="((?:[^"\\]|\\.){1,128})"/;
const MAX_MODELS = 64;
const MAX_BYTES = 1024 * 1024;
/** Longest one scrape may take, body included. */
export const SCRAPE_DEADLINE_MS = 2_500;

/** Parses the figures we show out of Prometheus text. Never throws; unknown lines are ignored. */
export function parseRouterMetrics(text: string): RouterModelFigures[] {
  const byModel = new Map<string, Record<string, number | null | string>>();
  for (const line of text.split('\n')) {
    const m = LINE_RE.exec(line);
    if (!m) continue;
    const wanted = WANTED[m[1]!];
    if (!wanted) continue;
    const a = ALIAS_RE.exec(m[2]!);
    if (!a) continue;
    const [key, factor] = wanted;
    const model = a[1]!.replace(/\\(.)/g, '$1').replace(/[^\x20-\x7e]/g, '');
    let row = byModel.get(model);
    if (!row) {
      if (byModel.size >= MAX_MODELS) continue;
      byModel.set(model, (row = { model }));
    }
    const raw = Number(m[3]);
    // prom-client writes NaN for a quantile with no samples: unknown, not zero.
    // Rounded to the microsecond: 0.1512 s reads 151.2 ms, not 151.20000000000002.
    const v = Number.isFinite(raw) ? (factor === 1 ? raw : Math.round(raw * factor * 1000) / 1000) : null;
    if (SUMMED.has(key)) {
      const before = row[key] as number | null | undefined;
      row[key] = v === null || before === null ? null : (before ?? 0) + v;
    } else row[key] = v;
  }
  return [...byModel.values()].map((r) => ({
    model: r['model'] as string,
    requests_total: (r['requests_total'] as number | undefined) ?? null,
    active: (r['active'] as number | undefined) ?? null,
    buffered: (r['buffered'] as number | undefined) ?? null,
    ttfc_p50_ms: (r['ttfc_p50_ms'] as number | undefined) ?? null,
    ttfc_p95_ms: (r['ttfc_p95_ms'] as number | undefined) ?? null,
    latency_p50_ms: (r['latency_p50_ms'] as number | undefined) ?? null,
    latency_p95_ms: (r['latency_p95_ms'] as number | undefined) ?? null,
  }));
}

/**
 * One bounded scrape; any failure is `unavailable` with no error text kept. `onText` is given
 * the whole exposition of a scrape that succeeded (the router panel's rates read it).
 */
export async function scrapeRouterMetrics(
  metricsUrl: string,
  now: () => string,
  onText?: (text: string) => void,
): Promise<RouterFigures> {
  try {
    // A whole-scrape deadline: a router that drips its body must not hold the telemetry frames.
    const res = await request(metricsUrl, {
      method: 'GET',
      headersTimeout: 3_000,
      bodyTimeout: 3_000,
      signal: AbortSignal.timeout(SCRAPE_DEADLINE_MS),
    });
    if (res.statusCode !== 200) {
      res.body.on('error', () => undefined).destroy();
      return { status: 'unavailable', read_at: now() };
    }
    let size = 0;
    const chunks: Buffer[] = [];
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > MAX_BYTES) {
        res.body.on('error', () => undefined).destroy();
        return { status: 'unavailable', read_at: now() };
      }
      chunks.push(chunk);
    }
    const text = Buffer.concat(chunks).toString('utf8');
    onText?.(text);
    return { status: 'ok', read_at: now(), models: parseRouterMetrics(text) };
  } catch {
    return { status: 'unavailable', read_at: now() };
  }
}
