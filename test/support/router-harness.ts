import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import OpenAI from 'openai';
import { writeTestPolicy } from './policy.js';
import { CLI, eventually, spawnNode, type RunningProcess } from './processes.js';

/** One `[[models]]` entry; `upstream` defaults to the harness's engine sim (`<sim>/v1`). */
export interface ModelSpec {
  readonly alias: string;
  readonly upstream?: string;
  /** Replicas instead of `upstream` (the harness's engine sim is then not added). */
  readonly upstreams?: readonly string[];
  readonly max_attempts?: number;
  readonly upstream_model?: string;
  readonly upstream_api_key_env?: string;
  readonly max_output_tokens?: number;
  readonly max_concurrency?: number;
  readonly max_queue?: number;
  readonly queue_timeout_ms?: number;
  readonly upstream_timeout_ms?: number;
  readonly readiness_path?: string;
}

export interface SimSpec {
  readonly ttftMs?: number;
  readonly tokenDelayMs?: number;
  readonly tokens?: number;
  readonly model?: string;
  readonly maxModelLen?: number;
}

export interface RouterHarnessOptions {
  readonly models: readonly ModelSpec[];
  /** Extra `[server]` keys (e.g. `max_body_bytes`). */
  readonly server?: Readonly<Record<string, string | number | boolean>>;
  /** Write terminal records to `state/decisions.jsonl` (default true). */
  readonly decisionLog?: boolean;
  /** The `engine sim` process every model without its own upstream points at. */
  readonly sim?: SimSpec;
  /** Extra environment for the router process (e.g. SVC_LOG_LEVEL). */
  readonly routerEnv?: Readonly<Record<string, string>>;
}

export interface RouterHarness {
  readonly dir: string;
  readonly configPath: string;
  /** The decision log (current file), or undefined without one. */
  readonly logPath: string | undefined;
  /** A data-plane key (`[server] api_keys_env`). */
  readonly key: string;
  /** A `workloads:read` client token from the authorization policy. */
  readonly readerToken: string;
  /** The engine sim's origin and the model name it serves. */
  readonly simUrl: string;
  readonly simModel: string;
  readonly sim: RunningProcess;
  /** The router's origin (changes when the router is restarted). */
  readonly routerUrl: string;
  readonly router: RunningProcess;
  /** The environment router processes of this harness get (keys, policy credentials). */
  readonly routerEnv: Readonly<Record<string, string>>;
  /** Everything every router process of this harness wrote so far. */
  routerOutput(): string;
  /** An OpenAI SDK client on the router (no retries); `fetch` may be wrapped to observe responses. */
  client(opts?: { fetch?: typeof fetch }): OpenAI;
  /** `GET /v1/requests/{id}` with the data-plane key (or the given token). */
  lookup(id: string, token?: string): Promise<{ status: number; body: any }>;
  /** `GET path` with the data-plane key (or the given token, or none with null). */
  get(path: string, token?: string | null): Promise<Response>;
  /** Parsed lines of the current decision log file (torn or foreign lines as undefined). */
  decisions(): Array<Record<string, unknown> | undefined>;
  /** The decision log and its rotated files, oldest first. */
  logFiles(): string[];
  /** Resolves once the router holds no request in flight. */
  idle(timeoutMs?: number): Promise<void>;
  /** Stops the router process (SIGTERM by default); returns its exit code. */
  stopRouter(signal?: NodeJS.Signals): Promise<number | null>;
  /** Starts a router process again on the same configuration file. */
  startRouter(): Promise<void>;
  /** Rewrites the configuration file's `[[models]]` (its `[server]` kept), e.g. before a SIGHUP. */
  writeModels(models: readonly ModelSpec[]): void;
  /** Stops everything and removes the temporary folder. */
  stop(): Promise<void>;
}

type TomlValue = string | number | boolean | readonly string[];
const toml = (v: TomlValue): string =>
  typeof v === 'string' ? JSON.stringify(v) : Array.isArray(v) ? JSON.stringify(v) : String(v);

/** The `[[models]]` lines of a model list; `simUrl`/`simModel` fill in an entry without its own upstream. */
export function modelLines(models: readonly ModelSpec[], simUrl: string, simModel: string): string[] {
  const lines: string[] = [];
  for (const m of models) {
    const own = m.upstream !== undefined || m.upstreams !== undefined;
    const entry: Record<string, TomlValue> = {
      ...m,
      ...(own ? {} : { upstream: `${simUrl}/v1` }),
      ...(!own && m.upstream_model === undefined && m.alias !== simModel ? { upstream_model: simModel } : {}),
    };
    lines.push('[[models]]', ...Object.entries(entry).map(([k, v]) => `${k} = ${toml(v)}`), '');
  }
  return lines;
}

/**
 * Starts `engine sim` and `router serve` as real processes through the built CLI (both on
 * 127.0.0.1:0), with a router configuration, an authorization policy and a decision log in a
 * fresh temporary folder. Thrown when: either process does not start listening.
 */
export async function startRouterHarness(opts: RouterHarnessOptions): Promise<RouterHarness> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-router-'));
  const policy = writeTestPolicy(dir);
  const key = `dp-${randomBytes(16).toString('hex')}`;
  const simModel = opts.sim?.model ?? 'sim-model';
  const s = opts.sim ?? {};
  const sim = await spawnNode(CLI, [
    'engine',
    'sim',
    '--listen',
    '127.0.0.1:0',
    '--ttft-ms',
    String(s.ttftMs ?? 5),
    '--token-delay-ms',
    String(s.tokenDelayMs ?? 2),
    '--tokens',
    String(s.tokens ?? 4),
    '--model',
    simModel,
    '--max-model-len',
    String(s.maxModelLen ?? 8192),
  ]);
  const withLog = opts.decisionLog ?? true;
  const logPath = withLog ? join(dir, 'state', 'decisions.jsonl') : undefined;
  const server: Record<string, string | number | boolean> = {
    host_id: 'node-a',
    listen: '127.0.0.1:0',
    api_keys_env: 'SVC_TEST_ROUTER_KEYS',
    authorization_policy: 'policy.toml',
    readiness_ttl_ms: 60_000,
    ...(withLog ? { decision_log_path: 'state/decisions.jsonl' } : {}),
    ...opts.server,
  };
  const lines = [
    '[server]',
    ...Object.entries(server).map(([k, v]) => `${k} = ${toml(v)}`),
    '',
    ...modelLines(opts.models, sim.url, simModel),
  ];
  const configPath = join(dir, 'router.toml');
  writeFileSync(configPath, lines.join('\n'));
  const serverLines = lines.slice(0, lines.indexOf('[[models]]'));
  const env = {
    ...policy.env,
    SVC_TEST_ROUTER_KEYS: `other-${randomBytes(8).toString('hex')},${key}`,
    ...opts.routerEnv,
  };
  const outputs: RunningProcess[] = [];
  let router: RunningProcess;
  const startRouter = async (): Promise<void> => {
    router = await spawnNode(CLI, ['router', 'serve', '--config', configPath], { env });
    outputs.push(router);
  };
  try {
    await startRouter();
  } catch (err) {
    await sim.stop();
    throw err;
  }
  const auth = (token: string | null | undefined): Record<string, string> =>
    token === null ? {} : { authorization: `Bearer ${token ?? key}` };
  const h: RouterHarness = {
    dir,
    configPath,
    logPath,
    key,
    readerToken: policy.tokens.reader,
    simUrl: sim.url,
    simModel,
    sim,
    get routerUrl() {
      return router.url;
    },
    get router() {
      return router;
    },
    routerOutput: () => outputs.map((p) => p.output()).join(''),
    routerEnv: env,
    client: (o = {}) =>
      new OpenAI({
        baseURL: `${router.url}/v1`,
        apiKey: key,
        maxRetries: 0,
        timeout: 20_000,
        ...(o.fetch ? { fetch: o.fetch } : {}),
      }),
    async lookup(id, token) {
      const res = await fetch(`${router.url}/v1/requests/${encodeURIComponent(id)}`, { headers: auth(token) });
      const text = await res.text();
      return { status: res.status, body: text.length > 0 ? JSON.parse(text) : undefined };
    },
    get: (path, token) => fetch(`${router.url}${path}`, { headers: auth(token) }),
    logFiles() {
      if (!logPath) return [];
      const base = basename(logPath);
      const rank = (f: string): number => (f === base ? 0 : Number(f.slice(base.length + 1)));
      return readdirSync(dirname(logPath))
        .filter((f) => f === base || new RegExp(`^${base.replace(/\./g, '\\.')}\\.[0-9]+$`).test(f))
        .sort((a, b) => rank(b) - rank(a))
        .map((f) => join(dirname(logPath), f));
    },
    decisions() {
      if (!logPath || !existsSync(logPath)) return [];
      return readFileSync(logPath, 'utf8')
        .split('\n')
        .filter((l) => l.length > 0)
        .map((l) => {
          try {
            return JSON.parse(l) as Record<string, unknown>;
          } catch {
            return undefined;
          }
        });
    },
    async idle(timeoutMs = 5000) {
      await eventually(
        async () => {
          const res = await h.get('/v1/requests?active=1');
          const body = (await res.json()) as { requests: unknown[] };
          return res.status === 200 && body.requests.length === 0;
        },
        timeoutMs,
        20,
      );
    },
    stopRouter: (signal) => router.stop(signal),
    writeModels(models) {
      writeFileSync(configPath, [...serverLines, ...modelLines(models, sim.url, simModel)].join('\n'));
    },
    startRouter,
    async stop() {
      await router.stop();
      await sim.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return h;
}
