import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadRouterConfig } from '../../src/config/router-config.js';

/**
 * docker-compose.yml as a new user runs it from a fresh clone: `cp .env.example .env && docker
 * compose up`. No container engine runs here; Debian's docker-compose 1.29 validates and
 * resolves the file offline (`config`), and its own PyYAML turns the result into JSON.
 */
const ROOT = fileURLToPath(new URL('../../../', import.meta.url)).replace(/\/$/, '');
const COMPOSE = join(ROOT, 'docker-compose.yml');
const ENV_EXAMPLE = join(ROOT, '.env.example');

interface Service {
  build?: { context: string; dockerfile: string };
  image?: string;
  command?: string[];
  profiles?: string[];
  volumes?: string[];
  healthcheck?: { test: string[] };
  depends_on?: Record<string, { condition: string }>;
  environment?: Record<string, string>;
  networks?: Record<string, { aliases?: string[]; ipv4_address?: string } | null>;
  network_mode?: string;
  deploy?: { resources?: { reservations?: { devices?: { capabilities: string[]; count?: number }[] } } };
}

function resolved(profiles: string): { status: number | null; stderr: string; services: Record<string, Service> } {
  const r = spawnSync('docker-compose', ['--env-file', ENV_EXAMPLE, '-f', COMPOSE, 'config'], {
    env: { PATH: process.env['PATH'], COMPOSE_PROFILES: profiles },
    encoding: 'utf8',
  });
  assert.equal(r.error, undefined, 'docker-compose is installed (.ci/run installs it)');
  if (r.status !== 0) return { status: r.status, stderr: r.stderr, services: {} };
  const json = spawnSync(
    'python3',
    ['-c', 'import sys, yaml, json; json.dump(yaml.safe_load(sys.stdin), sys.stdout)'],
    {
      input: r.stdout,
      encoding: 'utf8',
    },
  );
  assert.equal(json.status, 0, json.stderr);
  return {
    status: 0,
    stderr: r.stderr,
    services: (JSON.parse(json.stdout) as { services: Record<string, Service> }).services,
  };
}

const SVC_SERVICES = [
  'node-a-engine',
  'node-a-router',
  'node-a-controller',
  'node-b-engine',
  'node-b-router',
  'node-b-controller',
  'fleet',
  'dashboard',
];

describe('docker-compose.yml from a fresh clone', () => {
  const { services } = resolved('sim');

  it('validates with .env.example under every profile and pair of profiles', () => {
    for (const p of ['', 'sim', 'gpu', 'observability', 'sim,observability', 'gpu,observability']) {
      const r = resolved(p);
      assert.equal(r.status, 0, `COMPOSE_PROFILES=${p}: ${r.stderr}`);
    }
    assert.doesNotMatch(readFileSync(COMPOSE, 'utf8'), /^version:/m, 'no obsolete version key');
  });

  it('every variable the file reads is in .env.example, and .env.example names only those', () => {
    const used = new Set([...readFileSync(COMPOSE, 'utf8').matchAll(/\$\{([A-Z0-9_]+)/g)].map((m) => m[1]!));
    const example = readFileSync(ENV_EXAMPLE, 'utf8');
    const defined = new Set([...example.matchAll(/^([A-Z0-9_]+)=/gm)].map((m) => m[1]!));
    for (const v of used) assert.ok(defined.has(v), `.env.example sets ${v}`);
    for (const v of defined) assert.ok(used.has(v) || v === 'COMPOSE_PROFILES', `${v} is read by docker-compose.yml`);
  });

  it('svc-serving services are built from the Dockerfile, mount no code (config read-only from deploy/), and are health-checked', () => {
    for (const name of SVC_SERVICES) {
      const s = services[name];
      assert.ok(s, `${name} exists`);
      assert.deepEqual(s.build, { context: ROOT, dockerfile: 'Dockerfile' }, name);
      assert.ok(s.healthcheck?.test.includes('node'), `${name} has a healthcheck`);
      assert.match(s.environment?.['SVC_HEALTHCHECK_URL'] ?? '', /^http:\/\/127\.0\.0\.1:\d+\/health/, name);
      for (const v of s.volumes ?? []) {
        const [src, , mode] = v.split(':');
        if (!src!.startsWith('/')) continue; // a named volume
        assert.ok(src!.startsWith(`${ROOT}/deploy`), `${name} mounts only deploy/ from the checkout: ${v}`);
        assert.equal(mode, 'ro', `${name} mounts ${src} read-only`);
      }
    }
    // Each configuration a service is started with is a file under deploy/ (mounted at /etc/svc-serving).
    for (const [name, s] of Object.entries(services))
      for (const arg of s.command ?? [])
        if (arg.startsWith('/etc/svc-serving/'))
          assert.ok(existsSync(join(ROOT, 'deploy', arg.slice('/etc/svc-serving/'.length))), `${name}: ${arg}`);
  });

  it('every dependency waits for a healthy service, and every service that is depended on has a healthcheck', () => {
    for (const [name, s] of Object.entries(services))
      for (const [dep, how] of Object.entries(s.depends_on ?? {})) {
        assert.equal(how.condition, 'service_healthy', `${name} -> ${dep}`);
        assert.ok(services[dep]?.healthcheck, `${dep} has a healthcheck`);
      }
    assert.ok(services['nats']?.healthcheck);
  });

  it('profiles: sim or gpu (vLLM on a reserved GPU, by the same name and model) for node-a, observability for Prometheus and Grafana', () => {
    assert.deepEqual(services['node-a-engine']!.profiles, ['sim']);
    const vllm = services['node-a-vllm']!;
    assert.deepEqual(vllm.profiles, ['gpu']);
    assert.match(vllm.image!, /^vllm\/vllm-openai:/);
    assert.deepEqual(vllm.deploy?.resources?.reservations?.devices?.[0]?.capabilities, ['gpu']);
    assert.deepEqual(vllm.networks?.['svc']?.aliases, ['node-a-engine']);
    // node-a's router works unchanged with either engine: same host name, port and model name.
    const model = loadRouterConfig(join(ROOT, 'deploy/node-a/router.toml')).models[0]!;
    assert.equal(model.replicas[0]!.base, 'http://node-a-engine:8001/v1');
    const sim = services['node-a-engine']!.command!;
    assert.equal(sim[sim.indexOf('--model') + 1], model.upstreamModel);
    assert.equal(sim[sim.indexOf('--listen') + 1], '0.0.0.0:8001');
    assert.equal(vllm.command![vllm.command!.indexOf('--served-model-name') + 1], model.upstreamModel);
    assert.equal(vllm.command![vllm.command!.indexOf('--port') + 1], '8001');
    for (const name of ['prometheus', 'grafana']) assert.deepEqual(services[name]!.profiles, ['observability']);
    for (const name of SVC_SERVICES.filter((n) => n !== 'node-a-engine'))
      assert.equal(services[name]!.profiles, undefined, `${name} runs in every profile`);
    // Grafana's provisioned datasource (127.0.0.1:9090) is right only inside Prometheus's network namespace.
    assert.equal(services['grafana']!.network_mode, 'service:prometheus');
  });

  it("the dashboard reads node-a's controller at its fixed private address", () => {
    const cmd = services['dashboard']!.command!;
    const url = new URL(cmd[cmd.indexOf('--workload-controller-url') + 1]!);
    assert.equal(url.hostname, services['node-a-controller']!.networks?.['svc']?.ipv4_address);
    assert.equal(cmd[cmd.indexOf('--workload-expected-node') + 1], 'node-a');
    assert.ok(cmd.includes('--auth-env'), 'off loopback the dashboard needs --auth-env');
  });

  it('deploy/prometheus.yml is valid and scrapes every router, controller and the fleet on their ports', () => {
    const check = spawnSync('promtool', ['check', 'config', join(ROOT, 'deploy/prometheus.yml')], { encoding: 'utf8' });
    assert.equal(check.status, 0, check.stdout + check.stderr);
    const text = readFileSync(join(ROOT, 'deploy/prometheus.yml'), 'utf8');
    for (const target of [
      'node-a-router:8000',
      'node-b-router:8000',
      'node-a-controller:8100',
      'node-b-controller:8100',
      'fleet:8300',
    ]) {
      assert.ok(text.includes(`"${target}"`), target);
      assert.ok(services[target.split(':')[0]!], `${target} is a compose service`);
    }
  });
});
