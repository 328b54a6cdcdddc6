import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadFleetConfig } from '../../src/config/fleet-config.js';
import { parseNatsServers } from '../../src/config/nats-url.js';
import { loadNodeConfig } from '../../src/config/node-config.js';
import { ConfigError } from '../../src/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'svc-nats-url-'));
let n = 0;
const nodeFile = (natsUrl: string): string => {
  const path = join(dir, `n${++n}.toml`);
  writeFileSync(
    path,
    ['[node]', 'host_id = "node-a"', `nats_url = "${natsUrl}"`, 'authorization_policy = "policy.toml"', ''].join('\n'),
  );
  return path;
};

describe("nats_url: one server, or a cluster's servers separated by commas", () => {
  it('a seed list of a cluster loads as its servers, in the order written, spaces around commas allowed', () => {
    const cfg = loadNodeConfig(nodeFile('nats://nats-1:4222, nats://nats-2:4222,nats://nats-3'));
    assert.deepEqual(cfg.nats?.servers, ['nats://nats-1:4222', 'nats://nats-2:4222', 'nats://nats-3']);
    assert.deepEqual(loadNodeConfig(nodeFile('tls://a.example:4443,tls://b.example:4443')).nats?.servers, [
      'tls://a.example:4443',
      'tls://b.example:4443',
    ]);
    assert.deepEqual(loadNodeConfig(nodeFile('nats://127.0.0.1:4222')).nats?.servers, ['nats://127.0.0.1:4222']);
    const fleet = join(dir, 'fleet.toml');
    writeFileSync(
      fleet,
      '[fleet]\nnats_url = "nats://h1:4222,nats://h2:4222"\nauthorization_policy = "policy.toml"\n\n[[nodes]]\nhost_id = "node-a"\n',
    );
    assert.deepEqual(loadFleetConfig(fleet).nats?.servers, ['nats://h1:4222', 'nats://h2:4222']);
  });

  it('each server is held to the one-server grammar: one bad entry refuses the whole value, naming the member only', () => {
    for (const v of [
      'nats://h1:4222,',
      ',nats://h1:4222',
      'nats://h1:4222,,nats://h2:4222',
      'nats://h1:4222,nats://u:secret-canary@h2:4222',
      'nats://h1:4222,nats://h2:99999',
      'nats://h1:4222;nats://h2:4222',
      'nats://h1:4222,http://h2:4222',
      'nats://h1:4222 nats://h2:4222',
    ]) {
      assert.throws(
        () => loadNodeConfig(nodeFile(v)),
        (err: unknown) =>
          err instanceof ConfigError &&
          /invalid member \/node\/nats_url/.test(err.message) &&
          !err.message.includes('secret-canary'),
        v,
      );
    }
    // The message says what the member must look like (a `nats://user:pass@host` URL is the usual NATS habit).
    for (const load of [
      () => loadNodeConfig(nodeFile('nats://u:secret-canary@h1:4222')),
      () => {
        const fleet = join(dir, `f${++n}.toml`);
        writeFileSync(
          fleet,
          '[fleet]\nnats_url = "h1:4222"\nauthorization_policy = "policy.toml"\n\n[[nodes]]\nhost_id = "node-a"\n',
        );
        return loadFleetConfig(fleet);
      },
    ]) {
      assert.throws(
        load,
        (err: unknown) =>
          err instanceof ConfigError &&
          /invalid member \/(node|fleet)\/nats_url \(nats:\/\/HOST\[:PORT\] or tls:\/\/HOST\[:PORT\], or up to 16 of them separated by commas; no credentials, path or query \(the password goes in nats_password_env\)\)$/.test(
            err.message,
          ) &&
          !err.message.includes('secret-canary') &&
          !err.message.includes('h1'),
      );
    }
    // An unknown member named like an object's prototype member gets no hint at all.
    const proto = join(dir, `p${++n}.toml`);
    writeFileSync(proto, '[node]\nhost_id = "node-a"\nconstructor = "x"\nauthorization_policy = "policy.toml"\n');
    assert.throws(
      () => loadNodeConfig(proto),
      (err: unknown) =>
        err instanceof ConfigError && /^node configuration: invalid member \/node\/constructor$/.test(err.message),
    );
    const seventeen = Array.from({ length: 17 }, (_, i) => `nats://h${i}:4222`).join(',');
    assert.throws(() => loadNodeConfig(nodeFile(seventeen)), /invalid member \/node\/nats_url/);
  });

  it('a server listed twice, or tls:// mixed with nats://, is refused with what is wrong and no URL', () => {
    assert.throws(
      () => loadNodeConfig(nodeFile('nats://h1:4222,nats://H1:4222')),
      (err: unknown) =>
        err instanceof ConfigError && /lists the same server twice/.test(err.message) && !/h1/i.test(err.message),
    );
    assert.throws(
      () => loadNodeConfig(nodeFile('tls://h1:4443,nats://h2:4222')),
      (err: unknown) =>
        err instanceof ConfigError && /mixes tls:\/\/ and nats:\/\//.test(err.message) && !err.message.includes('h2'),
    );
    assert.throws(
      () => parseNatsServers('nats://h1:4222,nats://h1:4222', '--nats-url'),
      /--nats-url lists the same server twice/,
    );
  });
});
