import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { writeTestPolicy } from '../support/policy.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { startRouterHarness, type RouterHarness } from '../support/router-harness.js';
import { freePort } from '../support/free-port.js';
import { PROMETHEUS } from '../support/promtool.js';
import { existsSync } from 'node:fs';

const DASHBOARD = fileURLToPath(new URL('../../../deploy/grafana/dashboards/svc-serving.json', import.meta.url));
const noPrometheus = existsSync(PROMETHEUS) ? false : `${PROMETHEUS} is absent (install the Debian prometheus package)`;

interface Panel {
  readonly title: string;
  readonly type: string;
  readonly targets?: readonly { readonly expr: string }[];
}

/** Every panel's expressions, as Prometheus gets them (Grafana's `$__rate_interval` made a literal range). */
function panelQueries(): { title: string; expr: string }[] {
  const dash = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { panels: Panel[] };
  return dash.panels
    .filter((p) => p.type !== 'row')
    .flatMap((p) =>
      (p.targets ?? []).map((t) => ({ title: p.title, expr: t.expr.replaceAll('$__rate_interval', '1m') })),
    );
}

describe('the Grafana dashboard against a real Prometheus scraping a router, a controller and a fleet', {
  skip: noPrometheus,
}, () => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-prom-'));
  const policy = writeTestPolicy(dir);
  let nats: NatsServerHandle;
  let h: RouterHarness;
  let controller: RunningProcess;
  let fleet: RunningProcess;
  let prometheus: ChildProcess | undefined;
  let promUrl: string;

  before(async () => {
    nats = await startNatsServer();
    h = await startRouterHarness({
      models: [{ alias: 'chat' }, { alias: 'single', max_concurrency: 1, max_queue: 4 }],
      sim: { tokens: 6, tokenDelayMs: 5 },
      // On NATS too: the router then reports the NATS pair like the others.
      server: { nats_url: nats.url },
    });
    writeFileSync(
      join(dir, 'node.toml'),
      [
        '[node]',
        'host_id = "node-a"',
        'listen = "127.0.0.1:0"',
        `nats_url = "${nats.url}"`,
        'authorization_policy = "policy.toml"',
        'state_dir = "state-a"',
      ].join('\n'),
    );
    controller = await spawnNode(CLI, ['controller', 'serve', '--config', join(dir, 'node.toml')], { env: policy.env });
    writeFileSync(
      join(dir, 'fleet.toml'),
      [
        '[fleet]',
        'listen = "127.0.0.1:0"',
        `nats_url = "${nats.url}"`,
        'authorization_policy = "policy.toml"',
        'node_timeout_ms = 500',
        '',
        '[[nodes]]',
        'host_id = "node-a"',
        '',
        '[[nodes]]',
        'host_id = "node-z"',
      ].join('\n'),
    );
    fleet = await spawnNode(CLI, ['fleet', 'serve', '--config', join(dir, 'fleet.toml')], { env: policy.env });
    const target = (url: string) => `'${new URL(url).host}'`;
    writeFileSync(
      join(dir, 'prometheus.yml'),
      [
        'global:',
        '  scrape_interval: 1s',
        '  evaluation_interval: 1s',
        'scrape_configs:',
        `  - job_name: router\n    static_configs:\n      - targets: [${target(h.routerUrl)}]`,
        `  - job_name: controller\n    static_configs:\n      - targets: [${target(controller.url)}]`,
        `  - job_name: fleet\n    static_configs:\n      - targets: [${target(fleet.url)}]`,
        '',
      ].join('\n'),
    );
    const port = await freePort();
    promUrl = `http://127.0.0.1:${port}`;
    prometheus = spawn(
      PROMETHEUS,
      [
        `--config.file=${join(dir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${join(dir, 'tsdb')}`,
        `--web.listen-address=127.0.0.1:${port}`,
      ],
      { stdio: 'ignore' },
    );
    await eventually(
      async () => ((await fetch(`${promUrl}/-/ready`).catch(() => undefined))?.status === 200 ? true : undefined),
      20_000,
      200,
    );
  });
  after(async () => {
    prometheus?.kill('SIGTERM');
    await Promise.all([controller?.stop(), fleet?.stop(), h?.stop()]);
    await nats?.stop();
  });

  const query = async (expr: string): Promise<{ status: string; data?: { result: unknown[] }; error?: string }> => {
    const res = await fetch(`${promUrl}/api/v1/query?query=${encodeURIComponent(expr)}`);
    return (await res.json()) as { status: string; data?: { result: unknown[] }; error?: string };
  };

  it('every panel expression parses and returns at least one series after some traffic', async () => {
    const chat = (content: string, extra: Record<string, unknown> = {}, model = 'chat') =>
      fetch(`${h.routerUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model, messages: [{ role: 'user', content }], ...extra }),
      }).then((r) => r.text());
    const traffic = async (): Promise<void> => {
      await Promise.all([
        chat('plain'),
        chat('streamed', { stream: true, stream_options: { include_usage: true } }),
        chat('sim:status=503'),
        chat('queued sim:ttft_ms=200', { stream: true }, 'single'),
        chat('queued sim:ttft_ms=200', { stream: true }, 'single'),
        fetch(`${h.routerUrl}/v1/chat/completions`, { method: 'POST', body: '{}' }).then((r) => r.text()),
        fetch(`${fleet.url}/tools/call`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${policy.tokens.reader}` },
          body: JSON.stringify({ name: 'fleet_workloads', arguments: {} }),
        }).then((r) => r.text()),
      ]);
    };
    // Every target is up, then traffic over several scrapes (a rate needs two samples of a series).
    await eventually(
      async () =>
        ((await query('sum(up)')).data?.result as { value: [number, string] }[])?.[0]?.value[1] === '3' || undefined,
      20_000,
      250,
    );
    for (let i = 0; i < 4; i++) {
      await traffic();
      await new Promise((r) => setTimeout(r, 700));
    }
    const routerText = await (await fetch(`${h.routerUrl}/metrics`)).text();
    assert.match(routerText, /^svc_nats_connected 1$/m);
    const queries = panelQueries();
    assert.ok(queries.length >= 20, `${queries.length} expressions`);
    // Each expression parses (Prometheus answers `success`, not a bad_data error).
    for (const q of queries) {
      const r = await query(q.expr);
      assert.equal(r.status, 'success', `${q.title}: ${q.expr}: ${r.error}`);
    }
    const empty: string[] = [];
    await eventually(
      async () => {
        empty.length = 0;
        for (const q of queries)
          if (((await query(q.expr)).data?.result.length ?? 0) === 0) empty.push(`${q.title}: ${q.expr}`);
        return empty.length === 0 || undefined;
      },
      15_000,
      1000,
    ).catch(() => assert.fail(`panels with no series:\n${empty.join('\n')}`));
  });
});
