import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from 'node:tls';
import OpenAI from 'openai';
import { Agent, fetch as undiciFetch } from 'undici';
import { runCli } from '../cli/run-cli.js';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { makePki, type TestPki } from '../support/tls-certs.js';

const KEY = 'tls-test-key-1';
const READER = 'tls-reader-token-1';

/** The serial number of the certificate `url`'s server presents (hex, as node:tls gives it). */
function servedSerial(url: string, ca: string): Promise<string> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect({ host: u.hostname, port: Number(u.port), ca, servername: 'localhost' }, () => {
      const serial = s.getPeerCertificate().serialNumber;
      s.end();
      resolve(serial);
    });
    s.once('error', reject);
  });
}

function curl(args: string[]): string {
  return execFileSync('curl', ['-sS', '--max-time', '10', ...args], { encoding: 'utf8' });
}

describe('TLS on every listener: HTTPS with a private CA, SIGHUP reload, refused certificates (built CLI, real processes)', () => {
  let pki: TestPki;
  let ca: string;
  let engine: RunningProcess;
  let router: RunningProcess;
  const env = { KEYS: KEY, READER_TOKEN: READER };

  before(async () => {
    pki = makePki();
    ca = readFileSync(pki.caFile, 'utf8');
    const good = pki.issue('server', { san: 'DNS:localhost,IP:127.0.0.1', serial: 0x1001 });
    copyFileSync(good.certFile, join(pki.dir, 'live.pem'));
    copyFileSync(good.keyFile, join(pki.dir, 'live.key'));
    writeFileSync(
      join(pki.dir, 'policy.toml'),
      '[[clients]]\nid = "reader"\ngrants = ["workloads:read", "requests:read"]\ncredential_env = "READER_TOKEN"\n',
    );
    engine = await spawnNode(CLI, ['engine', 'sim', '--listen', '127.0.0.1:0', '--model', 'sim-model']);
    writeFileSync(
      join(pki.dir, 'router.toml'),
      [
        '[server]',
        'host_id = "node-a"',
        'listen = "127.0.0.1:0"',
        'api_keys_env = "KEYS"',
        'authorization_policy = "policy.toml"',
        'tls_cert_file = "live.pem"',
        'tls_key_file = "live.key"',
        '[[models]]',
        'alias = "chat"',
        `upstream = "${engine.url}/v1"`,
        'upstream_model = "sim-model"',
        '',
      ].join('\n'),
    );
    router = await spawnNode(CLI, ['router', 'serve', '--config', join(pki.dir, 'router.toml')], { env });
  });

  after(async () => {
    await router?.stop();
    await engine?.stop();
  });

  it('the router speaks HTTPS: its listening URL, curl --cacert, the openai SDK, router workloads and diagnose with --ca-file', async () => {
    assert.match(router.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(JSON.parse(curl(['--cacert', pki.caFile, `${router.url}/health`])).status !== undefined, true);
    const agent = new Agent({ connect: { ca } });
    const client = new OpenAI({
      apiKey: KEY,
      baseURL: `${router.url}/v1`,
      fetch: ((url: string, init: object) => undiciFetch(url, { ...init, dispatcher: agent })) as never,
    });
    const { data, response } = await client.chat.completions
      .create({ model: 'chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 })
      .withResponse();
    assert.ok(data.choices[0]!.message.content);
    const id = response.headers.get('x-svc-request-id');
    assert.ok(id);
    await agent.close();

    const base = ['--router-url', router.url, '--auth-env', 'READER_TOKEN'];
    const w = await runCli(
      ['router', 'workloads', ...base, '--expected-node', 'node-a', '--ca-file', pki.caFile, '--json'],
      env,
    );
    assert.equal(w.code, 0, w.stderr);
    assert.equal(JSON.parse(w.stdout).expected_host, 'node-a');
    // SVC_CA_FILE does the same as --ca-file.
    const d = await runCli(['router', 'diagnose', id, ...base, '--json'], { ...env, SVC_CA_FILE: pki.caFile });
    assert.equal(d.code, 0, d.stderr);
    assert.equal(JSON.parse(d.stdout).request.request_id, id);
    // Without the CA: refused, exit 4, a message that says why and names no URL.
    const no = await runCli(['router', 'workloads', ...base, '--expected-node', 'node-a'], env);
    assert.equal(no.code, 4);
    assert.equal(
      no.stderr,
      "svc-serving: error: the server's TLS certificate is not signed by a trusted CA (trust a private CA with --ca-file or SVC_CA_FILE)\n",
    );
    // A CA file that is no CA file: invalid usage.
    const bad = await runCli(
      ['router', 'workloads', ...base, '--expected-node', 'node-a', '--ca-file', join(pki.dir, 'policy.toml')],
      env,
    );
    assert.equal(bad.code, 2);
    assert.match(
      bad.stderr,
      /^svc-serving: error: --ca-file \(or SVC_CA_FILE\) names a file that is not readable or holds no PEM certificate \(see svc-serving router workloads --help\)\n$/,
    );
    // The origin rules still hold with a CA: plain HTTP to a public name is refused.
    const plain = await runCli(
      [
        'router',
        'workloads',
        '--router-url',
        'http://example.com',
        '--auth-env',
        'READER_TOKEN',
        '--expected-node',
        'node-a',
        '--ca-file',
        pki.caFile,
      ],
      env,
    );
    assert.equal(plain.code, 2);
  });

  it('SIGHUP serves a new certificate; a broken one leaves the one in use, with one log line each and no key material', async () => {
    assert.equal(await servedSerial(router.url, ca), '1001');
    const next = pki.issue('next', { san: 'DNS:localhost,IP:127.0.0.1', serial: 0x2002 });
    copyFileSync(next.certFile, join(pki.dir, 'live.pem'));
    copyFileSync(next.keyFile, join(pki.dir, 'live.key'));
    router.proc.kill('SIGHUP');
    await eventually(async () => (await servedSerial(router.url, ca)) === '2002');
    // The log line is written beside the swap, and reaches the process's output a moment later.
    await eventually(() => /"msg":"tls certificate reloaded"/.test(router.output()));
    writeFileSync(join(pki.dir, 'live.key'), 'not a key\n');
    router.proc.kill('SIGHUP');
    await eventually(() => router.output().includes('tls reload failed'));
    assert.match(
      router.output(),
      /"reason":"router configuration: tls_key_file holds no PEM private key","msg":"tls reload failed: keeping the certificate in use"/,
    );
    assert.equal(await servedSerial(router.url, ca), '2002');
    // Still serving requests, the process alive.
    assert.equal(router.proc.exitCode, null);
    assert.ok(!router.output().includes('PRIVATE KEY'));
    copyFileSync(next.keyFile, join(pki.dir, 'live.key'));
  });

  it('an expired certificate and one for another name are refused by the CLI: exit 4, a clear message, no URL', async () => {
    for (const [name, opts, message] of [
      [
        'expired',
        { san: 'DNS:localhost,IP:127.0.0.1', serial: 0x3003, days: -1 },
        "the server's TLS certificate has expired or is not valid yet",
      ],
      [
        'othername',
        { san: 'DNS:other.example', serial: 0x4004 },
        "the server's TLS certificate does not name the host of the URL",
      ],
    ] as const) {
      const c = pki.issue(name, opts);
      const cfg = join(pki.dir, `${name}.toml`);
      writeFileSync(
        cfg,
        readFileSync(join(pki.dir, 'router.toml'), 'utf8')
          .replace('"live.pem"', `"${name}.pem"`)
          .replace('"live.key"', `"${name}.key"`),
      );
      const r = await spawnNode(CLI, ['router', 'serve', '--config', cfg], { env });
      try {
        const res = await runCli(
          [
            'router',
            'workloads',
            '--router-url',
            r.url,
            '--auth-env',
            'READER_TOKEN',
            '--expected-node',
            'node-a',
            '--ca-file',
            pki.caFile,
          ],
          env,
        );
        assert.equal(res.code, 4, res.stderr);
        assert.equal(res.stderr, `svc-serving: error: ${message}\n`);
        assert.ok(!res.stderr.includes('127.0.0.1'));
      } finally {
        await r.stop();
      }
      void c;
    }
  });

  it('a half pair or a key of another certificate is a configuration error at start (exit 2) naming the member', async () => {
    const other = pki.issue('other', { san: 'DNS:localhost', serial: 0x5005 });
    for (const [lines, message] of [
      [
        ['tls_cert_file = "live.pem"'],
        'router configuration: tls_key_file is missing (tls_cert_file and tls_key_file go together)',
      ],
      [
        ['tls_key_file = "live.key"'],
        'router configuration: tls_cert_file is missing (tls_cert_file and tls_key_file go together)',
      ],
      [
        ['tls_cert_file = "live.pem"', `tls_key_file = "${other.keyFile}"`],
        'router configuration: tls_cert_file and tls_key_file are not a valid PEM certificate and its private key',
      ],
      [
        ['tls_cert_file = "absent.pem"', 'tls_key_file = "live.key"'],
        'router configuration: tls_cert_file does not exist',
      ],
    ] as const) {
      const cfg = join(pki.dir, 'half.toml');
      writeFileSync(
        cfg,
        [
          '[server]',
          'host_id = "node-a"',
          'listen = "127.0.0.1:0"',
          'api_keys_env = "KEYS"',
          ...lines,
          '[[models]]',
          'alias = "m"',
          'upstream = "http://127.0.0.1:9/v1"',
          '',
        ].join('\n'),
      );
      const r = await runCli(['router', 'serve', '--config', cfg], env);
      assert.equal(r.code, 2, r.stderr);
      assert.match(
        r.stderr,
        new RegExp(`svc-serving router: invalid configuration: ${message.replace(/[()]/g, '\\$&')}\n$`),
      );
      assert.ok(!r.stderr.includes(pki.dir));
    }
  });

  it('the node controller, the fleet and the dashboard speak HTTPS too (curl, fleet workloads with --ca-file)', async () => {
    let nats: NatsServerHandle | undefined;
    const procs: RunningProcess[] = [];
    try {
      nats = await startNatsServer();
      writeFileSync(
        join(pki.dir, 'node.toml'),
        `[node]\nhost_id = "node-a"\nlisten = "127.0.0.1:0"\nauthorization_policy = "policy.toml"\nstate_dir = "node-state"\nnats_url = "${nats.url}"\ntls_cert_file = "live.pem"\ntls_key_file = "live.key"\n`,
      );
      writeFileSync(
        join(pki.dir, 'fleet.toml'),
        `[fleet]\nlisten = "127.0.0.1:0"\nauthorization_policy = "policy.toml"\nnats_url = "${nats.url}"\ntls_cert_file = "live.pem"\ntls_key_file = "live.key"\n[[nodes]]\nhost_id = "node-a"\n`,
      );
      const node = await spawnNode(CLI, ['controller', 'serve', '--config', join(pki.dir, 'node.toml')], {
        env,
        cwd: pki.dir,
      });
      procs.push(node);
      const fleet = await spawnNode(CLI, ['fleet', 'serve', '--config', join(pki.dir, 'fleet.toml')], { env });
      procs.push(fleet);
      const dash = await spawnNode(
        CLI,
        [
          'dashboard',
          'serve',
          '--port',
          '0',
          '--tls-cert-file',
          join(pki.dir, 'live.pem'),
          '--tls-key-file',
          join(pki.dir, 'live.key'),
        ],
        { env },
      );
      procs.push(dash);
      for (const p of [node, fleet, dash]) assert.match(p.url, /^https:\/\/127\.0\.0\.1:\d+$/);
      const answer = JSON.parse(
        curl([
          '--cacert',
          pki.caFile,
          '-H',
          `authorization: Bearer ${READER}`,
          '-H',
          'content-type: application/json',
          '-d',
          '{"name":"node_workloads","arguments":{}}',
          `${node.url}/tools/call`,
        ]),
      );
      assert.match(JSON.stringify(answer), /"expected_host":"node-a"/);
      const fw = await runCli(
        [
          'fleet',
          'workloads',
          '--controller-url',
          fleet.url,
          '--auth-env',
          'READER_TOKEN',
          '--expected-node',
          'node-a',
          '--ca-file',
          pki.caFile,
          '--json',
        ],
        env,
      );
      assert.equal(fw.code, 0, fw.stderr);
      assert.ok(JSON.parse(fw.stdout).nodes.some((n: { expected_host: string }) => n.expected_host === 'node-a'));
      assert.match(curl(['--cacert', pki.caFile, `${dash.url}/`]), /<html/i);
      // A plain HTTP request to an HTTPS listener gets no answer of ours.
      assert.throws(() => curl([`${fleet.url.replace('https:', 'http:')}/metrics`]));
    } finally {
      for (const p of procs) await p.stop();
      await nats?.stop();
    }
  });

  it('config check checks the TLS pair a file names', async () => {
    const cfg = join(pki.dir, 'check.toml');
    writeFileSync(
      cfg,
      `[fleet]\nauthorization_policy = "policy.toml"\nnats_url = "nats://127.0.0.1:4222"\ntls_cert_file = "live.pem"\ntls_key_file = "policy.toml"\n[[nodes]]\nhost_id = "n"\n`,
    );
    const r = await runCli(['config', 'check', cfg], env);
    assert.equal(r.code, 2);
    assert.equal(r.stdout, `${cfg}:5: fleet.tls_key_file: tls_key_file holds no PEM private key\n`);
  });
});
