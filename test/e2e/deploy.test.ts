import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AuthorizationPolicy } from '../../src/auth/policy.js';
import { ConfigError } from '../../src/errors.js';
import { loadFleetConfig } from '../../src/config/fleet-config.js';
import { loadNodeConfig } from '../../src/config/node-config.js';
import { loadRouterConfig } from '../../src/config/router-config.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const SECRETS = { NODE_A_NATS_PASSWORD: 'a', NODE_B_NATS_PASSWORD: 'b', FLEET_NATS_PASSWORD: 'f', SVC_READER_TOKEN: 'r', SVC_ROUTER_KEYS: 'k' };

describe('deployment files stay valid', () => {
  it('docker-compose.yml validates (docker-compose config), and refuses to start without its secrets', () => {
    const ok = spawnSync('docker-compose', ['-f', join(ROOT, 'docker-compose.yml'), 'config', '-q'], { env: { PATH: process.env['PATH'], ...SECRETS }, encoding: 'utf8' });
    assert.equal(ok.error, undefined, 'docker-compose is installed (.ci/run installs it)');
    assert.equal(ok.status, 0, ok.stderr);
    const missing = spawnSync('docker-compose', ['-f', join(ROOT, 'docker-compose.yml'), 'config', '-q'], { env: { PATH: process.env['PATH'] }, encoding: 'utf8' });
    assert.notEqual(missing.status, 0);
  });

  it('deploy/nats.conf is a valid nats-server configuration', () => {
    const r = spawnSync('nats-server', ['-t', '-c', join(ROOT, 'deploy/nats.conf')], { env: { PATH: `${process.env['PATH']}:/usr/sbin`, ...SECRETS }, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr + r.stdout);
  });

  it('every deploy and example configuration loads', () => {
    for (const h of ['node-a', 'node-b']) {
      assert.equal(loadRouterConfig(join(ROOT, `deploy/${h}/router.toml`)).hostId, h);
      assert.equal(loadNodeConfig(join(ROOT, `deploy/${h}/node.toml`)).hostId, h);
    }
    assert.deepEqual(loadFleetConfig(join(ROOT, 'deploy/fleet.toml')).nodes.map((n) => n.hostId), ['node-a', 'node-b']);
    assert.equal(AuthorizationPolicy.load(join(ROOT, 'deploy/policy.toml'), SECRETS).size, 1);
    assert.equal(loadRouterConfig(join(ROOT, 'examples/router.toml')).models[0]!.alias, 'qwen3-8b');
    assert.equal(loadNodeConfig(join(ROOT, 'examples/node.toml')).hostId, 'node-a');
  });

  it('a fleet configuration without nodes is refused: it could only answer "complete, nothing running"', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'svc-fleet-')), 'fleet.toml');
    writeFileSync(file, '[fleet]\nlisten = "127.0.0.1:0"\nnats_url = "nats://127.0.0.1:4222"\nauthorization_policy = "policy.toml"\n');
    assert.throws(() => loadFleetConfig(file), (err: unknown) => err instanceof ConfigError && /no \[\[nodes\]\]/.test(err.message));
  });
});
