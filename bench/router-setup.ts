/**
 * The engine sim and `router serve` as the router benchmarks run them: each its own process,
 * loopback only, the router configured as operators run it.
 */
import { writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnNode, type Proc } from './router-procs.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
/** The built CLI the benchmarks start. */
export const CLI = join(root, 'dist', 'cli', 'main.js');
/** The alias (and engine model name) every benchmark request uses. */
export const MODEL = 'sim-model';
const KEYS_ENV = 'SVC_BENCH_ROUTER_KEYS';
let configs = 0;

/** `engine sim` answering at once: 16 tokens, no time to first token, no inter-token delay. */
export function startSim(): Promise<Proc> {
  return spawnNode({
    name: 'engine sim',
    args: [
      CLI,
      'engine',
      'sim',
      '--listen',
      '127.0.0.1:0',
      '--ttft-ms',
      '0',
      '--token-delay-ms',
      '0',
      '--tokens',
      '16',
      '--model',
      MODEL,
    ],
    listenLine: true,
  });
}

export interface RouterSetup {
  /** Keep the decision log on (in `dir`), as operators run it. */
  readonly decisionLog: boolean;
  /** `[server] buffer_size`; undefined keeps the default. */
  readonly bufferSize: number | undefined;
  /** The built CLI to run (another checkout's `dist/cli/main.js`, for an A/B run); this one's by default. */
  readonly cli?: string;
  /** More engine origins: the alias gets `upstreams = [sim, ...these]` instead of `upstream`. */
  readonly moreReplicas?: readonly string[];
  /** More environment for the router process (e.g. `OTEL_*` to export traces). */
  readonly env?: Readonly<Record<string, string>>;
}

/**
 * `router serve` in front of the sim: decision log on (in `dir`) unless told otherwise,
 * default buffer size, admission out of the way (max_concurrency 256). `key` is its
 * data-plane key (given through the environment, as in production).
 */
export function startRouter(
  simUrl: string,
  dir: string,
  key: string,
  o: RouterSetup,
  nodeArgs: string[] = [],
): Promise<Proc> {
  const n = ++configs;
  const toml = join(dir, `router-${n}.toml`);
  writeFileSync(
    toml,
    [
      '[server]',
      'host_id = "bench"',
      'listen = "127.0.0.1:0"',
      `api_keys_env = "${KEYS_ENV}"`,
      ...(o.decisionLog
        ? [
            `decision_log_path = ${JSON.stringify(join(dir, n === 1 ? 'decisions' : `decisions-${n}`, 'decisions.jsonl'))}`,
          ]
        : []),
      ...(o.bufferSize !== undefined ? [`buffer_size = ${o.bufferSize}`] : []),
      '',
      '[[models]]',
      `alias = "${MODEL}"`,
      o.moreReplicas?.length
        ? `upstreams = ${JSON.stringify([simUrl, ...o.moreReplicas].map((u) => `${u}/v1`))}`
        : `upstream = ${JSON.stringify(`${simUrl}/v1`)}`,
      'max_concurrency = 256',
      '',
    ].join('\n'),
  );
  return spawnNode({
    name: 'router',
    args: [...nodeArgs, o.cli ?? CLI, 'router', 'serve', '--config', toml],
    env: { ...process.env, ...o.env, [KEYS_ENV]: key },
    listenLine: true,
  });
}
