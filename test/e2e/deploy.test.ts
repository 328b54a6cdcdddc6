import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AuthorizationPolicy } from '../../src/auth/policy.js';
import { ConfigError } from '../../src/errors.js';
import { loadFleetConfig } from '../../src/config/fleet-config.js';
import { loadNodeConfig } from '../../src/config/node-config.js';
import { loadRouterConfig } from '../../src/config/router-config.js';
import { CLI, spawnNode, type RunningProcess } from '../support/processes.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const SECRETS = {
  NODE_A_NATS_PASSWORD: 'a',
  NODE_B_NATS_PASSWORD: 'b',
  FLEET_NATS_PASSWORD: 'f',
  SVC_READER_TOKEN: 'r',
  SVC_ROUTER_KEYS: 'k',
  SVC_DASHBOARD_TOKEN: 'd',
  GRAFANA_ADMIN_PASSWORD: 'g',
};

describe('deployment files stay valid', () => {
  it('docker-compose.yml validates (docker-compose config), and refuses to start without its secrets', () => {
    const ok = spawnSync('docker-compose', ['-f', join(ROOT, 'docker-compose.yml'), 'config', '-q'], {
      env: { PATH: process.env['PATH'], ...SECRETS },
      encoding: 'utf8',
    });
    assert.equal(ok.error, undefined, 'docker-compose is installed (.ci/run installs it)');
    assert.equal(ok.status, 0, ok.stderr);
    const missing = spawnSync('docker-compose', ['-f', join(ROOT, 'docker-compose.yml'), 'config', '-q'], {
      env: { PATH: process.env['PATH'] },
      encoding: 'utf8',
    });
    assert.notEqual(missing.status, 0);
  });

  it('deploy/nats.conf is a valid nats-server configuration', () => {
    const r = spawnSync('nats-server', ['-t', '-c', join(ROOT, 'deploy/nats.conf')], {
      env: { PATH: `${process.env['PATH']}:/usr/sbin`, ...SECRETS },
      encoding: 'utf8',
    });
    assert.equal(r.status, 0, r.stderr + r.stdout);
  });

  it('deploy/nats-cluster and deploy/nats-leaf are valid nats-server configurations, and hold no password', () => {
    const env = {
      ...SECRETS,
      NATS_ROUTE_PASSWORD: 'r',
      NATS_ROUTE_1: 'nats-route://route:r@nats-1:6222',
      NATS_ROUTE_2: 'nats-route://route:r@nats-2:6222',
      NATS_ROUTE_3: 'nats-route://route:r@nats-3:6222',
      SITE_EAST_LEAF_PASSWORD: 's',
      NODE_C_NATS_PASSWORD: 'c',
      NODE_D_NATS_PASSWORD: 'd',
      HUB_LEAF_URL: 'nats-leaf://site-east:s@hub:7422',
    };
    for (const f of [
      'nats-cluster/nats-1.conf',
      'nats-cluster/nats-2.conf',
      'nats-cluster/nats-3.conf',
      'nats-leaf/hub.conf',
      'nats-leaf/site-east.conf',
    ]) {
      const r = spawnSync('nats-server', ['-t', '-c', join(ROOT, 'deploy', f)], {
        env: { PATH: `${process.env['PATH']}:/usr/sbin`, ...env },
        encoding: 'utf8',
      });
      assert.equal(r.status, 0, f + r.stderr + r.stdout);
    }
    for (const f of [
      'nats-cluster/users.conf',
      'nats-cluster/nats-1.conf',
      'nats-leaf/hub.conf',
      'nats-leaf/site-east.conf',
    ]) {
      const text = readFileSync(join(ROOT, 'deploy', f), 'utf8')
        .split('\n')
        .filter((l) => !/^\s*#/.test(l))
        .join('\n');
      // Every password is a `$VAR`, never a literal, and no URL carries credentials.
      assert.doesNotMatch(text, /password:\s*[^$\s]/, f);
      assert.doesNotMatch(text, /:\/\/[^\s/@"]+@/, f);
    }
  });

  it('every deploy and example configuration loads', () => {
    for (const h of ['node-a', 'node-b']) {
      assert.equal(loadRouterConfig(join(ROOT, `deploy/${h}/router.toml`)).hostId, h);
      assert.equal(loadNodeConfig(join(ROOT, `deploy/${h}/node.toml`)).hostId, h);
    }
    assert.deepEqual(
      loadFleetConfig(join(ROOT, 'deploy/fleet.toml')).nodes.map((n) => n.hostId),
      ['node-a', 'node-b'],
    );
    assert.equal(AuthorizationPolicy.load(join(ROOT, 'deploy/policy.toml'), SECRETS).size, 1);
    assert.equal(loadRouterConfig(join(ROOT, 'examples/router.toml')).models[0]!.alias, 'qwen3-8b');
    assert.equal(loadNodeConfig(join(ROOT, 'examples/node.toml')).hostId, 'node-a');
    assert.equal(
      AuthorizationPolicy.load(join(ROOT, 'examples/node-policy.toml'), { SVC_READER_TOKEN: 'r', SVC_ADMIN_TOKEN: 'a' })
        .size,
      2,
    );
  });

  it('the examples run together as the README says: bench run through examples/node.toml to examples/router.toml', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-examples-'));
    for (const f of ['router.toml', 'node.toml', 'policy.toml', 'node-policy.toml'])
      copyFileSync(join(ROOT, 'examples', f), join(dir, f));
    const env = {
      SVC_READER_TOKEN: 'example-reader-token-0123',
      SVC_ADMIN_TOKEN: 'example-admin-token-0123',
      SVC_ROUTER_KEYS: 'example-router-key-0123',
    };
    const procs: RunningProcess[] = [];
    try {
      const sim = await spawnNode(CLI, [
        'engine',
        'sim',
        '--listen',
        '127.0.0.1:0',
        '--model',
        'sim-model',
        '--ttft-ms',
        '0',
        '--token-delay-ms',
        '0',
      ]);
      procs.push(sim);
      // Only the addresses change (free ports for the test); everything else is the example's.
      const edit = (f: string, from: string, to: string): void => {
        const text = readFileSync(join(dir, f), 'utf8');
        assert.ok(text.includes(from), `${f} has ${from}`);
        writeFileSync(join(dir, f), text.replace(from, to));
      };
      edit('router.toml', 'http://127.0.0.1:8001/v1', `${sim.url}/v1`);
      edit('router.toml', '127.0.0.1:8000', '127.0.0.1:0');
      const router = await spawnNode(CLI, ['router', 'serve', '--config', join(dir, 'router.toml')], { env });
      procs.push(router);
      edit('node.toml', 'http://127.0.0.1:8000', router.url);
      edit('node.toml', '127.0.0.1:8100', '127.0.0.1:0');
      const controller = await spawnNode(CLI, ['controller', 'serve', '--config', join(dir, 'node.toml')], { env });
      procs.push(controller);
      const run = spawnSync(
        process.execPath,
        [
          CLI,
          'bench',
          'run',
          '--controller-url',
          controller.url,
          '--auth-env',
          'SVC_ADMIN_TOKEN',
          '--alias',
          'qwen3-8b',
          '--requests',
          '4',
          '--yes',
        ],
        {
          env: { PATH: process.env['PATH'] ?? '', ...env },
          encoding: 'utf8',
          timeout: 60_000,
        },
      );
      assert.equal(run.status, 0, run.stderr);
      assert.match(run.stdout, /4 of 4 requests .* 4 succeeded/);
    } finally {
      for (const p of procs.reverse()) await p.stop();
    }
  });

  it('a fleet configuration without nodes is refused: it could only answer "complete, nothing running"', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'svc-fleet-')), 'fleet.toml');
    writeFileSync(
      file,
      '[fleet]\nlisten = "127.0.0.1:0"\nnats_url = "nats://127.0.0.1:4222"\nauthorization_policy = "policy.toml"\n',
    );
    assert.throws(
      () => loadFleetConfig(file),
      (err: unknown) => err instanceof ConfigError && /no \[\[nodes\]\]/.test(err.message),
    );
  });
});
