import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AuthorizationPolicy } from '../../src/auth/policy.js';
import { loadFleetConfig } from '../../src/config/fleet-config.js';
import { loadNodeConfig } from '../../src/config/node-config.js';
import { loadRouterConfig } from '../../src/config/router-config.js';

/**
 * deploy/systemd: the units verify with Debian's systemd-analyze (systemd need not run), with
 * ExecStart pointed at a stand-in executable (verify refuses a missing program and ignores
 * PATH); the configurations they start load, and their policies find the credential where
 * LoadCredential= puts it.
 */
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const DIR = join(ROOT, 'deploy/systemd');
const UNITS = { router: 'router.toml', controller: 'node.toml', fleet: 'fleet.toml', dashboard: undefined } as const;
const PROGRAM = '/usr/local/bin/svc-serving';

function unit(name: string): string {
  return readFileSync(join(DIR, `svc-serving-${name}.service`), 'utf8');
}

/** Copies the named units into a temporary directory with ExecStart on a stand-in; returns their paths. */
function standIns(units: Record<string, string>): string[] {
  const dir = mkdtempSync(join(tmpdir(), 'svc-units-'));
  const program = join(dir, 'svc-serving');
  writeFileSync(program, '#!/bin/sh\nexit 0\n');
  chmodSync(program, 0o755);
  return Object.entries(units).map(([name, text]) => {
    const path = join(dir, name);
    writeFileSync(path, text.replaceAll(PROGRAM, program));
    return path;
  });
}

function verify(paths: string[]): { status: number | null; output: string } {
  const r = spawnSync('systemd-analyze', ['verify', ...paths], { encoding: 'utf8' });
  assert.equal(r.error, undefined, 'systemd-analyze is installed (.ci/run installs systemd)');
  return { status: r.status, output: (r.stdout + r.stderr).trim() };
}

describe('systemd units', () => {
  it('all four pass systemd-analyze verify without a single warning (and a broken one does not)', () => {
    const texts = Object.fromEntries(Object.keys(UNITS).map((n) => [`svc-serving-${n}.service`, unit(n)]));
    assert.deepEqual(verify(standIns(texts)), { status: 0, output: '' });
    const broken = verify(
      standIns({ 'broken.service': unit('router').replace('ProtectSystem=strict', 'ProtectSystem=maybe') }),
    );
    assert.match(broken.output, /protect system value/i);
  });

  it('each is sandboxed: DynamicUser, StateDirectory, ProtectSystem=strict, NoNewPrivileges, LoadCredential, Restart=on-failure', () => {
    for (const name of Object.keys(UNITS)) {
      const text = unit(name);
      for (const line of [
        'DynamicUser=yes',
        `StateDirectory=svc-serving-${name}`,
        'ProtectSystem=strict',
        'NoNewPrivileges=yes',
        'Restart=on-failure',
        'LoadCredential=reader.token:/etc/svc-serving/credentials/reader.token',
        `ExecStart=${PROGRAM} `,
      ])
        assert.ok(
          text.split('\n').some((l) => l.startsWith(line)),
          `${name}: ${line}`,
        );
      const [path] = standIns({ [`svc-serving-${name}.service`]: text });
      const sec = spawnSync('systemd-analyze', ['security', '--offline=yes', path!], { encoding: 'utf8' });
      const level = /Overall exposure level for \S+: ([\d.]+)/.exec(sec.stdout + sec.stderr);
      assert.ok(level, sec.stdout + sec.stderr);
      assert.ok(Number(level[1]) <= 3.5, `${name}: exposure ${level[1]} (systemd-analyze security) is at most 3.5`);
    }
    // Every server takes SIGHUP: it re-reads its TLS pair (and the router its models), or notes it.
    for (const name of ['router', 'controller', 'fleet', 'dashboard'])
      assert.match(unit(name), /^ExecReload=\/bin\/kill -HUP \$MAINPID$/m, name);
  });

  it('the configurations they start load, keep state in the StateDirectory, and their policies read the credential LoadCredential hands over', () => {
    const router = loadRouterConfig(join(DIR, 'router.toml'));
    assert.equal(router.models[0]!.replicas[0]!.base, 'http://127.0.0.1:8000/v1');
    assert.equal(router.decisionLog?.path, '/var/lib/svc-serving-router/decisions.jsonl');
    assert.equal(loadNodeConfig(join(DIR, 'node.toml')).stateDir, '/var/lib/svc-serving-controller');
    assert.deepEqual(
      loadFleetConfig(join(DIR, 'fleet.toml')).nodes.map((n) => n.hostId),
      ['node-a'],
    );
    for (const [name, config] of Object.entries(UNITS)) {
      const text = unit(name);
      if (config) assert.ok(text.includes(`--config /etc/svc-serving/${config}`), name);
      const policyFile = name === 'controller' ? 'node-policy.toml' : `${name}-policy.toml`;
      if (name === 'dashboard')
        assert.ok(text.includes(`--workload-authorization-policy /etc/svc-serving/${policyFile}`));
      else assert.match(readFileSync(join(DIR, config!), 'utf8'), new RegExp(`authorization_policy = "${policyFile}"`));
      // Where systemd puts the credential for this unit: $CREDENTIALS_DIRECTORY/reader.token.
      const credentials = `/run/credentials/svc-serving-${name}.service`;
      const policy = readFileSync(join(DIR, policyFile), 'utf8');
      assert.ok(policy.includes(`credential_file = "${credentials}/reader.token"`), policyFile);
      const fake = mkdtempSync(join(tmpdir(), 'svc-creds-'));
      mkdirSync(join(fake, 'p'));
      writeFileSync(join(fake, 'reader.token'), 'reader-token-from-systemd-0123\n', { mode: 0o400 });
      writeFileSync(join(fake, 'p', 'policy.toml'), policy.replace(credentials, fake));
      assert.equal(AuthorizationPolicy.load(join(fake, 'p', 'policy.toml'), {}).size, 1, policyFile);
    }
  });
});
