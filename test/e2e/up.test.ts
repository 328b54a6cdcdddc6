import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { checkNodeResult, type NodeResult } from '../../src/schema/envelopes.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { runCli } from '../cli/run-cli.js';

describe('svc-serving up: the whole node in one process', () => {
  const home = mkdtempSync(join(tmpdir(), 'svc-up-'));
  let node: RunningProcess;
  let routerUrl = '';
  let controllerUrl = '';

  before(async () => {
    node = await spawnNode(
      CLI,
      ['up', '--demo-traffic', '--router-port', '0', '--controller-port', '0', '--dashboard-port', '0'],
      { env: { SVC_SERVING_HOME: home } },
    );
    await eventually(() => /controller +(http:\/\/\S+)/.test(node.output()), 10_000);
    routerUrl = /router +(http:\/\/\S+)/.exec(node.output())![1]!;
    controllerUrl = /controller +(http:\/\/\S+)/.exec(node.output())![1]!;
  });
  /** node_workloads for one owner, read with the reader token from its file. */
  const readOwner = async (owner: string): Promise<NodeResult> => {
    const token = readFileSync(join(home, 'reader.token'), 'utf8').trim();
    const res = await fetch(`${controllerUrl}/tools/call`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'node_workloads', arguments: { owner } }),
    });
    return (await res.json()) as NodeResult;
  };
  after(async () => {
    assert.equal(await node.stop(), 0, 'exits 0 on SIGTERM');
    const out = node.output();
    for (const f of ['reader.token', 'router.key']) {
      assert.ok(!out.includes(readFileSync(join(home, f), 'utf8').trim()), `${f} never printed or logged`);
    }
  });

  it("a refused WebSocket upgrade (a Host that is not the dashboard's) does not hold the stop: exit 0 on SIGTERM (checked after)", async () => {
    const dashboard = new URL(/dashboard +(http:\/\/\S+)/.exec(node.output())![1]!);
    const sock = connect(Number(dashboard.port), '127.0.0.1');
    sock.on('error', () => undefined);
    await once(sock, 'connect');
    sock.write(
      `GET /ws HTTP/1.1\r\nHost: evil.example:${dashboard.port}\r\nOrigin: http://evil.example:${dashboard.port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
        'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n',
    );
    const [answer] = (await once(sock, 'data')) as [Buffer];
    assert.match(answer.toString('latin1'), /^HTTP\/1\.1 403 /);
    // The client end stays open, as curl's or a hostile page's may: the stop must not wait on it.
    // `/ws` takes no query string (no credential in a URL): the fixed 400, not an upgrade.
    const q = connect(Number(dashboard.port), '127.0.0.1');
    q.on('error', () => undefined);
    await once(q, 'connect');
    q.write(
      `GET /ws?token=x HTTP/1.1\r\nHost: 127.0.0.1:${dashboard.port}\r\nOrigin: http://127.0.0.1:${dashboard.port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
        'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n',
    );
    const [refused] = (await once(q, 'data')) as [Buffer];
    assert.match(refused.toString('latin1'), /^HTTP\/1\.1 400 /);
    q.destroy();
  });

  it('keeps generated credentials 0600 under SVC_SERVING_HOME and prints only their paths', () => {
    for (const f of ['reader.token', 'router.key', 'policy.toml'])
      assert.equal(statSync(join(home, f)).mode & 0o777, 0o600, f);
    assert.equal(statSync(home).mode & 0o777, 0o700);
    assert.match(node.output(), new RegExp(join(home, 'reader.token')));
  });

  it('shows the demo traffic as router records, read with the token from the file', async () => {
    const result = await eventually(
      async () => {
        const body = await readOwner('router');
        return body.sources[0]!.records.length > 0 ? body : undefined;
      },
      10_000,
      200,
    );
    assert.ok(checkNodeResult.Check(result));
    assert.equal(result.sources[0]!.status, 'complete');
  });

  it('--demo-traffic also keeps a benchmark job going, shown with progress', async () => {
    const rec = await eventually(
      async () => {
        const body = await readOwner('benchmark');
        return body.sources
          .find((s) => s.owner === 'benchmark')!
          .records.find((r) => r.progress && r.progress.completed > 0);
      },
      15_000,
      200,
    );
    assert.equal(rec.progress?.unit, 'requests');
    assert.equal(rec.progress?.total, 30);
  });

  it('--demo-traffic runs a media job too (5 s after start), with its clips in the demo media directory', async () => {
    const media = await eventually(
      async () => {
        const body = await readOwner('media');
        return body.sources.find((s) => s.owner === 'media')!.records.find((r) => r.state === 'terminal');
      },
      20_000,
      250,
    );
    assert.equal(media.outcome, 'success', JSON.stringify(media));
    assert.equal(media.progress?.total, 3);
    assert.doesNotMatch(node.output(), /demo job not started/);
  });

  it('a second up on the same home is refused (exit 1) naming the home, not a configuration the user never wrote', async () => {
    const r = await runCli(['up', '--router-port', '0', '--controller-port', '0', '--dashboard-port', '0'], {
      SVC_SERVING_HOME: home,
    });
    assert.equal(r.code, 1, r.stderr);
    assert.equal(
      r.stderr.trim(),
      `svc-serving up: cannot start: ${home} is in use by another running svc-serving up (stop it first, or set SVC_SERVING_HOME to another directory)`,
    );
  });

  it('relays a chat completion with the generated data-plane key', async () => {
    const key = readFileSync(join(home, 'router.key'), 'utf8').trim();
    const res = await fetch(`${routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-chat',
        messages: [{ role: 'user', content: 'hi sim:tokens=2 sim:ttft_ms=0' }],
      }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('x-svc-request-id') ?? '', /^req_[0-9a-f]{32}$/);
  });
});

describe('svc-serving up on a busy port', () => {
  it('exits 1 naming the address that is in use, once', async () => {
    const busy = createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r));
    const port = (busy.address() as AddressInfo).port;
    try {
      const home = mkdtempSync(join(tmpdir(), 'svc-up-busy-'));
      const r = await runCli(['up', '--router-port', '0', '--controller-port', String(port), '--dashboard-port', '0'], {
        SVC_SERVING_HOME: home,
      });
      assert.equal(r.code, 1);
      assert.equal(r.stderr.trim(), `svc-serving up: cannot listen: 127.0.0.1:${port} is in use`);
    } finally {
      busy.close();
    }
  });
});

describe('svc-serving up with a home it cannot use, or one made by its owner', () => {
  it('a home that is a file: exit 1 naming it, not a listen address', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'svc-up-file-')), 'home');
    writeFileSync(file, 'not a directory');
    const r = await runCli(['up', '--router-port', '0', '--controller-port', '0', '--dashboard-port', '0'], {
      SVC_SERVING_HOME: join(file, 'sub'),
    });
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr.trim(), /^svc-serving up: cannot use .*home(\/sub)? \(E[A-Z]+\)$/);
    assert.doesNotMatch(r.stderr, /listen/);
  });

  it('a home where no folder can be made (/proc/...): exit 1 naming it, never a start that spins for good', async () => {
    const r = await runCli(
      ['up', '--router-port', '0', '--controller-port', '0', '--dashboard-port', '0'],
      { SVC_SERVING_HOME: '/proc/svc-no-such-home' },
      { timeoutMs: 15_000 },
    );
    assert.equal(r.code, 1, r.stderr);
    assert.equal(r.stderr.trim(), 'svc-serving up: cannot use /proc/svc-no-such-home (ENOENT)');
  });

  it('a credential path that is a directory or a FIFO, or an empty credential file: exit 1 naming the file, never a hang or "see the log"', async () => {
    const cases: [string, (path: string) => void, RegExp][] = [
      ['reader.token', (p) => mkdirSync(p), /^svc-serving up: cannot use .*\/reader\.token \(not a regular file\)$/],
      [
        'reader.token',
        (p) => execFileSync('mkfifo', [p]),
        /^svc-serving up: cannot use .*\/reader\.token \(not a regular file\)$/,
      ],
      [
        'router.key',
        (p) => writeFileSync(p, '\n'),
        /^svc-serving up: cannot start: .*\/router\.key holds no usable credential .*remove it and a new one is made$/,
      ],
    ];
    for (const [name, make, expected] of cases) {
      const home = mkdtempSync(join(tmpdir(), 'svc-up-cred-'));
      make(join(home, name));
      const r = await runCli(
        ['up', '--router-port', '0', '--controller-port', '0', '--dashboard-port', '0'],
        { SVC_SERVING_HOME: home },
        { timeoutMs: 15_000 },
      );
      assert.equal(r.code, 1, r.stderr);
      assert.match(r.stderr.trim(), expected);
    }
  });

  it('an existing home keeps its own mode (the credential files in it are 0600)', async () => {
    const home = mkdtempSync(join(tmpdir(), 'svc-up-mode-'));
    chmodSync(home, 0o750);
    const node = await spawnNode(CLI, ['up', '--router-port', '0', '--controller-port', '0', '--dashboard-port', '0'], {
      env: { SVC_SERVING_HOME: home },
      waitForListening: false,
    });
    try {
      await eventually(() => /controller +(http:\/\/\S+)/.test(node.output()), 10_000);
      assert.equal(statSync(home).mode & 0o777, 0o750);
      assert.equal(statSync(join(home, 'reader.token')).mode & 0o777, 0o600);
    } finally {
      assert.equal(await node.stop(), 0);
    }
  });
});

describe('svc-serving up with a relative SVC_SERVING_HOME', () => {
  it('takes it from the working directory and serves (the policy is found, the key works)', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'svc-up-rel-'));
    const node = await spawnNode(CLI, ['up', '--router-port', '0', '--controller-port', '0', '--dashboard-port', '0'], {
      env: { SVC_SERVING_HOME: 'rel/home' },
      cwd,
      waitForListening: false,
    });
    try {
      await eventually(() => /controller +(http:\/\/\S+)/.test(node.output()), 10_000);
      const routerUrl = /router +(http:\/\/\S+)/.exec(node.output())![1]!;
      const key = readFileSync(join(cwd, 'rel', 'home', 'router.key'), 'utf8').trim();
      const res = await fetch(`${routerUrl}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
      assert.equal(res.status, 200);
      const token = readFileSync(join(cwd, 'rel', 'home', 'reader.token'), 'utf8').trim();
      const wl = await fetch(`${routerUrl}/v1/workloads`, { headers: { authorization: `Bearer ${token}` } });
      assert.equal(wl.status, 200, 'the router found the policy under the relative home');
    } finally {
      assert.equal(await node.stop(), 0);
    }
  });
});
