import { makeDirs } from '../config/safe-files.js';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { JobService } from '../jobs/job-service.js';
import type { Command } from '../jobs/commands.js';
import type { Logger } from 'pino';
import type { LocalCredentials } from '../config/local-home.js';
import { routerConfigFrom, type RouterConfig } from '../config/router-config.js';
import type { Bus } from '../streams/bus.js';
import { InProcessBus } from '../streams/in-process-bus.js';
import { connectNatsBus } from '../streams/nats-bus.js';
import { startController } from '../controller/controller.js';
import { startDashboard } from '../dashboard/dashboard.js';
import { startEngineSim } from '../engine-sim/engine-sim.js';
import { startRouter } from '../router/router.js';

export interface LocalNodeOptions {
  readonly hostId: string;
  readonly bindHost: string;
  readonly routerPort: number;
  readonly controllerPort: number;
  /** NATS servers (one, or a cluster's seed list); undefined: the in-process bus. */
  readonly natsUrl: readonly string[] | undefined;
  readonly demoTraffic: boolean;
  readonly creds: LocalCredentials;
  readonly logger: Logger;
  /** Dashboard port (default 8200; 0 picks a free one). */
  readonly dashboardPort?: number;
}

export interface LocalNode {
  readonly routerUrl: string;
  readonly controllerUrl: string;
  readonly engineUrl: string;
  readonly dashboardUrl: string;
  close(): Promise<void>;
}

const ALIAS = 'sim-chat';

/** The router of `up`: one alias on the local engine sim, its decision log under the home folder. */
function localRouterConfig(o: LocalNodeOptions, engineUrl: string): RouterConfig {
  return routerConfigFrom(
    {
      server: {
        host_id: o.hostId,
        listen: `${o.bindHost}:${o.routerPort}`,
        api_keys_env: 'SVC_LOCAL_ROUTER_KEYS',
        authorization_policy: o.creds.policyFile,
        decision_log_path: join(o.creds.home, 'state', 'decisions.jsonl'),
        decision_log_max_bytes: 16 * 1024 * 1024,
        decision_log_max_files: 5,
        buffer_size: 10_000,
        readiness_ttl_ms: 2_000,
        metrics_require_auth: false,
        stale_after_seconds: 30,
        max_body_bytes: 32 * 1024 * 1024,
      },
      models: [
        {
          alias: ALIAS,
          upstream: `${engineUrl}/v1`,
          upstream_model: 'sim-model',
          max_output_tokens: 256,
          max_concurrency: 8,
          queue_timeout_ms: 30_000,
          upstream_timeout_ms: 120_000,
          readiness_path: '/health',
        },
      ],
    },
    o.creds.home,
  );
}

/**
 * The whole node in one process: engine sim, router, controller and dashboard on one bus (in-process
 * by default, NATS with `natsUrl`), with the generated local credentials.
 */
export async function startLocalNode(o: LocalNodeOptions): Promise<LocalNode> {
  const bus: Bus = o.natsUrl
    ? await connectNatsBus({ servers: [...o.natsUrl], name: `svc-serving up ${o.hostId}`, logger: o.logger })
    : new InProcessBus();
  const closers: (() => Promise<void>)[] = [() => bus.close()];
  const closeAll = async (): Promise<void> => {
    for (const c of closers.reverse()) await c().catch(() => undefined);
  };
  try {
    const engine = await startEngineSim({
      host: '127.0.0.1',
      port: 0,
      logger: o.logger.child({ component: 'engine-sim' }),
      ttftMs: 150,
      tokenDelayMs: 40,
      tokens: 48,
      model: 'sim-model',
      maxModelLen: 8192,
    });
    closers.push(() => engine.close());
    const env = { ...process.env, SVC_LOCAL_ROUTER_KEYS: o.creds.routerKey };
    const routerCfg = localRouterConfig(o, engine.url);
    const router = await startRouter(routerCfg, { logger: o.logger, env, bus });
    closers.push(() => router.close());
    const controller = await startController(
      {
        hostId: o.hostId,
        listen: { host: o.bindHost, port: o.controllerPort },
        nats: undefined,
        policyPath: o.creds.policyFile,
        staleAfterMs: 30_000,
        stateDir: join(o.creds.home, 'state'),
        router: { url: router.url, keyEnv: 'SVC_LOCAL_ROUTER_KEYS' },
        // The demo's media jobs read their generated clips from here (media files come from a media directory only).
        ...(o.demoTraffic ? { mediaDir: demoMediaDir(o.creds.home) } : {}),
      },
      { logger: o.logger, env, bus },
    );
    closers.push(() => controller.close());
    // The dashboard, on loopback without --auth-env (telemetry open to this machine only),
    // reading the local controller as this host with the local policy: the user pastes the
    // reader token from its file into the Workloads tab.
    const dashboard = await startDashboard(
      {
        host: o.bindHost,
        port: o.dashboardPort ?? 8200,
        workloadControllerUrl: controller.url,
        workloadExpectedNode: o.hostId,
        workloadAuthorizationPolicy: o.creds.policyFile,
        routerMetricsUrl: `${router.url}/metrics`,
        // The Requests view reads this node's router with its own data-plane key, in-process.
        routerUrl: router.url,
        routerCredential: o.creds.routerKey,
      },
      { logger: o.logger, env },
    );
    try {
      if (o.demoTraffic) {
        closers.push(startDemoTraffic(router.url, o.creds.routerKey, o.logger));
        closers.push(startDemoJobs(controller.jobs, o.creds.home, o.logger));
      }
    } finally {
      // Closed first: nothing reads the node (a dashboard scrape of the router's metrics)
      // while the demo's last requests finish and the rest stops.
      closers.push(() => dashboard.close());
    }
    return {
      routerUrl: router.url,
      controllerUrl: controller.url,
      engineUrl: engine.url,
      dashboardUrl: dashboard.url,
      close: closeAll,
    };
  } catch (err) {
    await closeAll();
    throw err;
  }
}

/** The demo's media directory (`<home>/demo`), made if missing. */
function demoMediaDir(home: string): string {
  const dir = join(home, 'demo');
  makeDirs(dir, 0o700);
  return dir;
}

/** A gentle stream of requests (about one every two seconds) so the inventory shows live work. */
function startDemoTraffic(routerUrl: string, key: string, logger: Logger): () => Promise<void> {
  let stopped = false;
  const inFlight = new Set<Promise<unknown>>();
  const one = async (): Promise<void> => {
    const tokens = 16 + Math.floor(Math.random() * 64);
    const res = await fetch(`${routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-svc-session-id': 'demo' },
      body: JSON.stringify({
        model: ALIAS,
        stream: true,
        max_tokens: 200,
        messages: [{ role: 'user', content: `demo sim:tokens=${tokens}` }],
      }),
    });
    await res.arrayBuffer();
  };
  const timer = setInterval(() => {
    if (stopped) return;
    const p = one().catch((err: unknown) => logger.debug({ err }, 'demo request failed'));
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  }, 2_000);
  return async () => {
    stopped = true;
    clearInterval(timer);
    await Promise.allSettled([...inFlight]);
  };
}

/**
 * Demo jobs through the controller's own lifecycle side (plan, then apply with its token):
 * a small benchmark now and every 90 s, a media job of three generated clips every 120 s.
 */
function startDemoJobs(jobs: JobService, home: string, logger: Logger): () => Promise<void> {
  const dir = demoMediaDir(home);
  // Paths relative to the media directory, as every media job names its files.
  const files = [0, 1, 2].map((i) => {
    const name = `clip-${i}.wav`;
    writeFileSync(join(dir, name), Buffer.alloc(4096 + i * 1024, i + 1));
    return name;
  });
  const run = (command: Command): void => {
    try {
      jobs.apply(jobs.plan(command).confirmation_token);
    } catch (err) {
      logger.warn({ err }, 'demo job not started');
    }
  };
  const bench = (): void =>
    run({
      name: 'benchmark.start',
      params: { alias: ALIAS, requests: 30, concurrency: 2, prompt_tokens: 64, max_tokens: 24 },
    });
  const media = (): void => run({ name: 'media.submit', params: { alias: ALIAS, files } });
  bench();
  const t1 = setInterval(bench, 90_000);
  const t2 = setInterval(media, 120_000);
  const t3 = setTimeout(media, 5_000);
  return async () => {
    clearInterval(t1);
    clearInterval(t2);
    clearTimeout(t3);
  };
}
