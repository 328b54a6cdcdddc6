import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { once } from 'node:events';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type AddressInfo } from 'node:net';
import { config, firstValueFrom, lastValueFrom, take, takeWhile, timeout, toArray, type Observable } from 'rxjs';
import { pino } from 'pino';
import { LOG_OPTIONS } from '../../src/logger.js';
import {
  BusClosedError,
  BusNoRespondersError,
  BusTimeoutError,
  ConfigError,
  ErrorCode,
  InvalidInputError,
  SvcError,
} from '../../src/errors.js';
import type { Bus, BusMsg } from '../../src/streams/bus.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { connectNatsBus, type NatsBus, type NatsBusState } from '../../src/streams/nats-bus.js';
import { endpoints } from '../../src/streams/nats-endpoints.js';
import { isValidPattern, isValidSubject, subjectMatches } from '../../src/streams/subject-match.js';
import { freePort } from '../support/free-port.js';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';

const enc = new TextEncoder();
const dec = new TextDecoder();
const bytes = (s: string): Uint8Array => enc.encode(s);
const text = (b: Uint8Array): string => dec.decode(b);
const T = { timeout: 20_000 };

/** Subscribes now; resolves with the first `n` messages or rejects after `ms`. */
function collect(obs: Observable<BusMsg>, n: number, ms = 5_000): Promise<BusMsg[]> {
  return firstValueFrom(obs.pipe(take(n), toArray(), timeout(ms)));
}
/** Subscribes now; resolves with every message before the one whose payload is `end`. */
function until(obs: Observable<BusMsg>, end: string, ms = 5_000): Promise<string[]> {
  return firstValueFrom(
    obs.pipe(
      takeWhile((m) => text(m.data) !== end),
      toArray(),
      timeout(ms),
    ),
  ).then((ms2) => ms2.map((m) => `${m.subject}=${text(m.data)}`));
}
/** Retries `attempt` every 100 ms until it returns true; fails after `ms`. */
async function eventually(attempt: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await attempt())) {
    if (Date.now() > deadline) assert.fail(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

interface Impl {
  setup(): Promise<void>;
  teardown(): Promise<void>;
  make(): Promise<Bus>;
}

function inProcess(): Impl {
  return { setup: async () => {}, teardown: async () => {}, make: async () => new InProcessBus() };
}
function nats(): Impl {
  let server: NatsServerHandle | undefined;
  return {
    setup: async () => {
      server = await startNatsServer();
    },
    teardown: async () => server?.stop(),
    make: () => connectNatsBus({ servers: server!.url, name: 'bus-test' }),
  };
}

const IMPLS: Array<[string, () => Impl]> = [
  ['in-process', inProcess],
  ['nats', nats],
];

for (const [name, factory] of IMPLS) {
  describe(`bus conformance: ${name}`, () => {
    const impl = factory();
    const open: Bus[] = [];
    const connect = async (): Promise<Bus> => {
      const bus = await impl.make();
      open.push(bus);
      return bus;
    };
    before(() => impl.setup());
    after(() => impl.teardown());
    afterEach(async () => {
      await Promise.all(open.splice(0).map((b) => b.close()));
    });

    it('delivers a publish to subscribers of that exact subject only', T, async () => {
      const bus = await connect();
      const got = collect(bus.subscribe('svc.v1.a.obs.x'), 1);
      bus.publish('svc.v1.a.obs.y', bytes('other'));
      bus.publish('svc.v1.a.obs.x', bytes('hello'));
      const [msg] = await got;
      assert.equal(msg?.subject, 'svc.v1.a.obs.x');
      assert.equal(text(msg!.data), 'hello');
    });

    it('matches `*` to one token and `>` to one or more trailing tokens', T, async () => {
      const bus = await connect();
      const star = until(bus.subscribe('svc.v1.*.workloads'), 'end');
      const rest = until(bus.subscribe('svc.v1.a.>'), 'end');
      for (const s of ['svc.v1.a.workloads', 'svc.v1.a.b.workloads', 'svc.v1.workloads', 'svc.v1.b.workloads']) {
        bus.publish(s, bytes('1'));
      }
      for (const s of ['svc.v1.a', 'svc.v1.a.obs', 'svc.v1.b.obs', 'svc.v1.a.obs.x.y']) bus.publish(s, bytes('2'));
      bus.publish('svc.v1.z.workloads', bytes('end'));
      bus.publish('svc.v1.a.end', bytes('end'));
      assert.deepEqual(await star, ['svc.v1.a.workloads=1', 'svc.v1.b.workloads=1']);
      assert.deepEqual(await rest, [
        'svc.v1.a.workloads=1',
        'svc.v1.a.b.workloads=1',
        'svc.v1.a.obs=2',
        'svc.v1.a.obs.x.y=2',
      ]);
    });

    it('stops delivery after unsubscribe', T, async () => {
      const bus = await connect();
      const seen: string[] = [];
      const sub = bus.subscribe('svc.v1.a.obs.u').subscribe((m) => seen.push(text(m.data)));
      const sentinel = collect(bus.subscribe('svc.v1.a.obs.u'), 2);
      bus.publish('svc.v1.a.obs.u', bytes('one'));
      await eventually(() => seen.length === 1, 5_000);
      sub.unsubscribe();
      bus.publish('svc.v1.a.obs.u', bytes('two'));
      // The sentinel seeing `two` proves it was delivered while the first was gone.
      assert.deepEqual(
        (await sentinel).map((m) => text(m.data)),
        ['one', 'two'],
      );
      assert.deepEqual(seen, ['one']);
    });

    it('keeps one global order when a subscriber publishes from its handler', T, async () => {
      const bus = await connect();
      bus.subscribe('svc.v1.a.obs.1').subscribe(() => bus.publish('svc.v1.a.obs.2', bytes('nested')));
      const seen = collect(bus.subscribe('svc.v1.a.obs.*'), 3);
      bus.publish('svc.v1.a.obs.1', bytes('first'));
      bus.publish('svc.v1.a.obs.3', bytes('second'));
      // Delivery is asynchronous in both buses: the nested publish queues behind `second`.
      assert.deepEqual(
        (await seen).map((m) => text(m.data)),
        ['first', 'second', 'nested'],
      );
    });

    it('isolates a subscriber that throws from the other subscribers', T, async () => {
      const bus = await connect();
      const reported: unknown[] = [];
      const previous = config.onUnhandledError;
      config.onUnhandledError = (err) => reported.push(err);
      try {
        bus.subscribe('svc.v1.a.obs.t').subscribe(() => {
          throw new Error('subscriber bug');
        });
        const healthy = collect(bus.subscribe('svc.v1.a.obs.t'), 2);
        bus.publish('svc.v1.a.obs.t', bytes('1'));
        bus.publish('svc.v1.a.obs.t', bytes('2'));
        assert.deepEqual(
          (await healthy).map((m) => text(m.data)),
          ['1', '2'],
        );
        await eventually(() => reported.length === 2, 5_000);
      } finally {
        config.onUnhandledError = previous;
      }
    });

    it('answers a request through serve(), with the subject, sync and async', T, async () => {
      const bus = await connect();
      bus.serve('svc.v1.a.workloads', (data, subject) => bytes(`${subject}:${text(data)}`));
      bus.serve('svc.v1.a.requests.*', async (data, subject) => bytes(`async ${subject}:${text(data)}`));
      const reply = await bus.request('svc.v1.a.workloads', bytes('q'), { timeoutMs: 2_000 });
      assert.equal(text(reply), 'svc.v1.a.workloads:q');
      const reply2 = await bus.request('svc.v1.a.requests.r1', bytes('q2'), { timeoutMs: 2_000 });
      assert.equal(text(reply2), 'async svc.v1.a.requests.r1:q2');
    });

    it("hands a request's headers to its handler, names matched in any case; none without headers", T, async () => {
      const bus = await connect();
      bus.serve('svc.v1.a.workloads', (_data, _subject, headers) =>
        bytes(
          JSON.stringify([
            headers?.get('traceparent') ?? null,
            headers?.get('TraceState') ?? null,
            headers?.get('absent') ?? null,
          ]),
        ),
      );
      const tp = `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`;
      const reply = await bus.request('svc.v1.a.workloads', bytes('q'), {
        timeoutMs: 2_000,
        headers: { traceparent: tp, tracestate: 'k=v' },
      });
      assert.deepEqual(JSON.parse(text(reply)), [tp, 'k=v', null]);
      const bare = await bus.request('svc.v1.a.workloads', bytes('q'), { timeoutMs: 2_000 });
      assert.deepEqual(JSON.parse(text(bare)), [null, null, null]);
    });

    it('lets exactly one of several responders answer a request', T, async () => {
      const bus = await connect();
      let calls = 0;
      for (const tag of ['x', 'y']) {
        bus.serve('svc.v1.a.workloads', () => {
          calls++;
          return bytes(tag);
        });
      }
      bus.serve('svc.v1.a.probe', () => bytes('pong'));
      assert.match(text(await bus.request('svc.v1.a.workloads', bytes(''), { timeoutMs: 2_000 })), /^[xy]$/);
      // A second round trip gives a stray duplicate delivery time to show up.
      await bus.request('svc.v1.a.probe', bytes(''), { timeoutMs: 2_000 });
      assert.equal(calls, 1);
    });

    it('stops answering after service.stop(): the next request finds no responders', T, async () => {
      const bus = await connect();
      const service = bus.serve('svc.v1.a.workloads', () => bytes('up'));
      assert.equal(text(await bus.request('svc.v1.a.workloads', bytes(''), { timeoutMs: 2_000 })), 'up');
      service.stop();
      service.stop(); // idempotent
      await assert.rejects(bus.request('svc.v1.a.workloads', bytes(''), { timeoutMs: 2_000 }), BusNoRespondersError);
    });

    it('rejects a request nobody serves with BusNoRespondersError, without waiting for the timeout', T, async () => {
      const bus = await connect();
      const started = Date.now();
      await assert.rejects(
        bus.request('svc.v1.nobody.workloads', bytes('q'), { timeoutMs: 5_000 }),
        BusNoRespondersError,
      );
      assert.ok(Date.now() - started < 2_000, 'no-responders must not wait for the timeout');
    });

    it('rejects with BusTimeoutError when the handler is slower than timeoutMs', T, async () => {
      const bus = await connect();
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      bus.serve('svc.v1.a.slow', async () => {
        await gate;
        return bytes('late');
      });
      try {
        await assert.rejects(bus.request('svc.v1.a.slow', bytes('q'), { timeoutMs: 150 }), BusTimeoutError);
      } finally {
        release();
      }
    });

    it('keeps serving after a handler throws or rejects (that request gets no reply)', T, async () => {
      const bus = await connect();
      let calls = 0;
      bus.serve('svc.v1.a.flaky', async (data) => {
        calls++;
        if (calls === 1) throw new Error(`sync bug ${text(data)}`);
        if (calls === 2) return Promise.reject(new Error('async bug'));
        return bytes('ok');
      });
      await assert.rejects(bus.request('svc.v1.a.flaky', bytes('1'), { timeoutMs: 300 }), BusTimeoutError);
      await assert.rejects(bus.request('svc.v1.a.flaky', bytes('2'), { timeoutMs: 300 }), BusTimeoutError);
      assert.equal(text(await bus.request('svc.v1.a.flaky', bytes('3'), { timeoutMs: 2_000 })), 'ok');
    });

    it('refuses everything with BusClosedError after close() and completes subscriptions', T, async () => {
      const bus = await connect();
      const completed = lastValueFrom(bus.subscribe('svc.v1.a.obs.c').pipe(toArray(), timeout(5_000)));
      await bus.flush();
      await bus.close();
      await bus.close(); // idempotent
      assert.deepEqual(await completed, []);
      assert.throws(() => bus.publish('svc.v1.a.obs.c', bytes('x')), BusClosedError);
      await assert.rejects(bus.request('svc.v1.a.workloads', bytes('x'), { timeoutMs: 500 }), BusClosedError);
      await assert.rejects(bus.flush(), BusClosedError);
      assert.throws(() => bus.serve('svc.v1.a.workloads', () => bytes('')), BusClosedError);
      await assert.rejects(firstValueFrom(bus.subscribe('svc.v1.a.obs.c')), BusClosedError);
    });

    it('delivers 1,000 messages on one subject in publish order', T, async () => {
      const bus = await connect();
      const got = collect(bus.subscribe('svc.v1.a.obs.seq'), 1_000, 10_000);
      for (let i = 0; i < 1_000; i++) bus.publish('svc.v1.a.obs.seq', bytes(String(i)));
      await bus.flush();
      const seqs = (await got).map((m) => Number(text(m.data)));
      assert.deepEqual(
        seqs,
        Array.from({ length: 1_000 }, (_, i) => i),
      );
    });

    it('refuses malformed subjects with InvalidInputError', T, async () => {
      const bus = await connect();
      for (const bad of ['', 'a..b', '.a', 'a.', 'a b', 'a.*', 'a.>', 'a*b']) {
        assert.throws(() => bus.publish(bad, bytes('x')), InvalidInputError, `publish ${JSON.stringify(bad)}`);
      }
      for (const bad of ['', 'a.>.b', 'a..*', 'a\tb']) {
        assert.throws(() => bus.subscribe(bad), InvalidInputError, `subscribe ${JSON.stringify(bad)}`);
      }
      await assert.rejects(bus.request('a.*', bytes('x'), { timeoutMs: 100 }), InvalidInputError);
    });
  });
}

describe('nats bus only', () => {
  let server: NatsServerHandle;
  const open: NatsBus[] = [];
  const connect = async (): Promise<NatsBus> => {
    const bus = await connectNatsBus({ servers: server.url, name: 'bus-test' });
    open.push(bus);
    return bus;
  };
  before(async () => {
    server = await startNatsServer();
  });
  after(() => server.stop());
  afterEach(async () => {
    await Promise.all(open.splice(0).map((b) => b.close()));
  });

  it('sees messages and answers requests across two connections', T, async () => {
    const a = await connect();
    const b = await connect();
    const got = collect(a.subscribe('svc.v1.a.obs.cross'), 1);
    a.serve('svc.v1.a.workloads', (data) => bytes(`a:${text(data)}`));
    await a.flush(); // interest must reach the server before the other connection publishes
    b.publish('svc.v1.a.obs.cross', bytes('from b'));
    assert.equal(text((await got)[0]!.data), 'from b');
    assert.equal(text(await b.request('svc.v1.a.workloads', bytes('q'), { timeoutMs: 2_000 })), 'a:q');
  });

  it('reconnects after a server restart; earlier subscriptions and services keep working', T, async () => {
    const sub = await connect();
    const pub = await connect();
    const states: NatsBusState[] = [];
    sub.state$.subscribe((s) => states.push(s));
    const received: string[] = [];
    sub.subscribe('svc.v1.a.obs.restart').subscribe((m) => received.push(text(m.data)));
    sub.serve('svc.v1.a.workloads', () => bytes('still here'));
    await sub.flush();

    await server.restart();
    await eventually(() => {
      pub.publish('svc.v1.a.obs.restart', bytes('after'));
      return received.includes('after');
    });
    await eventually(async () => {
      try {
        return text(await pub.request('svc.v1.a.workloads', bytes(''), { timeoutMs: 500 })) === 'still here';
      } catch {
        return false;
      }
    });
    assert.ok(states.includes('disconnected'), `states seen: ${states.join(',')}`);
    assert.equal(states.at(-1), 'connected');
  });

  it('removes the server-side interest when a subscription is unsubscribed', T, async () => {
    const bus = await connect();
    const sub = bus.subscribe('svc.v1.a.obs.gone').subscribe();
    await bus.flush();
    // A plain subscriber is interest too: a request then waits instead of failing fast.
    await assert.rejects(bus.request('svc.v1.a.obs.gone', bytes(''), { timeoutMs: 200 }), BusTimeoutError);
    sub.unsubscribe();
    await assert.rejects(bus.request('svc.v1.a.obs.gone', bytes(''), { timeoutMs: 2_000 }), BusNoRespondersError);
  });

  it('keeps reconnecting while the server stays down longer than ten attempts', T, async (t) => {
    let own = await startNatsServer();
    t.after(() => own.stop());
    const bus = await connectNatsBus({ servers: own.url });
    open.push(bus);
    const states: NatsBusState[] = [];
    bus.state$.subscribe((s) => states.push(s));
    const received: string[] = [];
    bus.subscribe('svc.v1.a.obs.down').subscribe((m) => received.push(text(m.data)));
    await bus.flush();
    const port = own.port;
    await own.stop();
    await eventually(() => states.includes('disconnected'), 5_000);
    // Deliberate: 10 attempts at 250 ms (+ up to 100 ms jitter) end within 3.5 s, so a client
    // that gives up after the default ten would be closed by now.
    await new Promise((r) => setTimeout(r, 3_500));
    assert.ok(!states.includes('closed'), `states seen: ${states.join(',')}`);
    own = await startNatsServer({ port });
    await eventually(() => {
      bus.publish('svc.v1.a.obs.down', bytes('back'));
      return received.includes('back');
    });
  });

  it('closes promptly while the server is gone', T, async (t) => {
    const own = await startNatsServer();
    t.after(() => own.stop());
    const bus = await connectNatsBus({ servers: own.url });
    const states: NatsBusState[] = [];
    bus.state$.subscribe((s) => states.push(s));
    const completed = lastValueFrom(bus.subscribe('svc.v1.a.obs.x').pipe(toArray()));
    await own.stop();
    await eventually(() => states.includes('disconnected'), 5_000);
    const started = Date.now();
    await bus.close();
    assert.ok(Date.now() - started < 3_000, 'close() must not wait for a reconnect');
    assert.deepEqual(await completed, []);
    assert.equal(states.at(-1), 'closed');
  });

  it('fails fast with SVC_ERR_UNAVAILABLE when no server listens at start', T, async () => {
    const port = await freePort();
    const started = Date.now();
    await assert.rejects(connectNatsBus({ servers: `nats://127.0.0.1:${port}` }), (err: unknown) => {
      assert.ok(err instanceof SvcError);
      assert.equal(err.code, ErrorCode.UNAVAILABLE);
      assert.equal(err.message, `NATS server unreachable at nats://127.0.0.1:${port}`, 'names where it tried');
      return true;
    });
    assert.ok(Date.now() - started < 3_000);
  });

  it('endpoints(): scheme, host and port only, whatever a URL carries before its host', () => {
    const cases: [string, string][] = [
      ['nats://admin:4222#secret-canary@host:4222', 'nats://host:4222'],
      ['nats://AbC/dEf==canary@host', 'nats://host'],
      ['s3cr3t-canary/x@host:4222', 'nats://host:4222'],
      ['ws://tok\\en-canary@host', 'ws://host'],
      ['tls://u:p@ss-canary@nats.internal:4443/path?token=canary', 'tls://nats.internal:4443'],
      ['127.0.0.1:4222', 'nats://127.0.0.1:4222'],
      ['nats://', '(a server address that is not a URL)'],
      ['canary@', '(a server address that is not a URL)'],
    ];
    for (const [input, shown] of cases) {
      assert.equal(endpoints(input), shown, input);
      assert.ok(!endpoints(input).includes('canary'), input);
    }
    assert.equal(endpoints(['a:1', 'nats://b:2']), 'nats://a:1, nats://b:2');
  });

  it('names the server it could not reach without any credential a URL carries', T, async () => {
    const port = await freePort();
    await assert.rejects(
      connectNatsBus({
        servers: [`nats://svc:url-canary-9d1@127.0.0.1:${port}/path?token=q-canary`, `127.0.0.1:${port}`],
      }),
      (err: unknown) => {
        assert.ok(err instanceof SvcError);
        assert.equal(err.message, `NATS server unreachable at nats://127.0.0.1:${port}, nats://127.0.0.1:${port}`);
        assert.ok(!/canary/.test(err.message));
        return true;
      },
    );
  });
});

describe('nats bus with server configuration', () => {
  const PASSWORD = 'canary-pass-7f3a';
  let server: NatsServerHandle;
  before(async () => {
    server = await startNatsServer({
      configText: `max_payload: 4096\nauthorization {\n  user: svc\n  password: "${PASSWORD}"\n}\n`,
    });
  });
  after(() => server.stop());

  it('reports the server max payload and refuses larger messages', T, async (t) => {
    const bus = await connectNatsBus({ servers: server.url, user: 'svc', pass: PASSWORD });
    t.after(() => bus.close());
    assert.equal(bus.maxPayload, 4096);
    assert.throws(() => bus.publish('svc.v1.a.obs.big', new Uint8Array(4097)), InvalidInputError);
  });

  it('tls:// requires TLS: a server that does not offer it is refused before the password is sent', T, async (t) => {
    // The real server (no TLS configured), then a bare listener that records every byte.
    const port = Number(new URL(server.url).port);
    await assert.rejects(
      connectNatsBus({ servers: `tls://127.0.0.1:${port}`, user: 'svc', pass: PASSWORD }),
      (err: unknown) => {
        assert.ok(err instanceof SvcError);
        assert.match(err.message, /^NATS server at tls:\/\/127\.0\.0\.1:\d+ does not offer TLS/);
        assert.ok(!err.message.includes(PASSWORD));
        return true;
      },
    );
    let received = '';
    const plain = createServer((sock) => {
      sock.on('data', (d: Buffer) => (received += d.toString('latin1')));
      sock.on('error', () => undefined);
      sock.write('INFO {"server_id":"fake","version":"2.10.0","proto":1,"max_payload":1048576}\r\n');
    });
    plain.listen(0, '127.0.0.1');
    await once(plain, 'listening');
    t.after(() => plain.close());
    const fakePort = (plain.address() as AddressInfo).port;
    await assert.rejects(
      connectNatsBus({ servers: `tls://127.0.0.1:${fakePort}`, user: 'svc', pass: PASSWORD }),
      SvcError,
    );
    assert.ok(!received.includes(PASSWORD), 'no password in plain text');
    assert.doesNotMatch(received, /CONNECT/);
  });

  it(
    'tls:// against a TLS server: an untrusted certificate is refused (named as such), a trusted one (NODE_EXTRA_CA_CERTS) connects',
    T,
    async (t) => {
      const dir = mkdtempSync(join(tmpdir(), 'svc-nats-tls-'));
      t.after(() => rmSync(dir, { recursive: true, force: true }));
      const key = join(dir, 'key.pem');
      const cert = join(dir, 'cert.pem');
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'rsa:2048',
          '-nodes',
          '-keyout',
          key,
          '-out',
          cert,
          '-days',
          '1',
          '-subj',
          '/CN=127.0.0.1',
          '-addext',
          'subjectAltName=IP:127.0.0.1,DNS:localhost',
        ],
        { stdio: 'ignore' },
      );
      const secure = await startNatsServer({
        configText: `tls {\n  cert_file: "${cert}"\n  key_file: "${key}"\n}\nauthorization {\n  user: svc\n  password: "${PASSWORD}"\n}\n`,
      });
      t.after(() => secure.stop());
      const url = `tls://127.0.0.1:${secure.port}`;
      await assert.rejects(connectNatsBus({ servers: url, user: 'svc', pass: PASSWORD }), (err: unknown) => {
        assert.ok(err instanceof SvcError);
        assert.match(err.message, /does not offer TLS, or its certificate is not trusted/);
        return true;
      });
      // Trusted by the process (as an operator adds a private CA): it connects over TLS.
      const script = `import { connectNatsBus } from ${JSON.stringify(new URL('../../src/streams/nats-bus.js', import.meta.url).href)};
      const bus = await connectNatsBus({ servers: ${JSON.stringify(url)}, user: 'svc', pass: process.env.P });
      await bus.flush(); await bus.close(); console.log('connected');`;
      const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
        env: { ...process.env, NODE_EXTRA_CA_CERTS: cert, P: PASSWORD },
        encoding: 'utf8',
        timeout: 20_000,
      });
      assert.equal(out.trim(), 'connected');
    },
  );

  it('rejects wrong credentials with ConfigError that does not echo them', T, async () => {
    await assert.rejects(connectNatsBus({ servers: server.url, user: 'svc', pass: 'wrong-canary' }), (err: unknown) => {
      assert.ok(err instanceof ConfigError);
      assert.ok(!err.message.includes('wrong-canary'));
      return true;
    });
  });

  it('never logs payloads or credentials, even when a handler fails on them', T, async (t) => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString('utf8'));
        done();
      },
    });
    const logger = pino({ ...LOG_OPTIONS, level: 'trace' }, sink);
    const bus = await connectNatsBus({ servers: server.url, user: 'svc', pass: PASSWORD, logger });
    t.after(() => bus.close());
    bus.serve('svc.v1.a.workloads', (data) => {
      JSON.parse(text(data)); // quotes the payload in its message
      return bytes('never');
    });
    await assert.rejects(
      bus.request('svc.v1.a.workloads', bytes('payload-canary{'), { timeoutMs: 300 }),
      BusTimeoutError,
    );
    await eventually(() => lines.some((l) => l.includes('bus handler failed')), 5_000);
    const all = lines.join('');
    assert.ok(!all.includes('payload-canary'), 'payload leaked into logs');
    assert.ok(!all.includes(PASSWORD), 'password leaked into logs');
  });
});

describe('subject-match', () => {
  it('validates publish subjects and subscription patterns', () => {
    for (const ok of ['a', 'svc.v1.node-a.obs.vllm_1', 'A.b-c.d_e']) assert.ok(isValidSubject(ok), ok);
    for (const bad of ['', '.', 'a.', '.a', 'a..b', 'a b', 'a\nb', 'a.*', 'a.>', '*', 'a*', 'a>b']) {
      assert.ok(!isValidSubject(bad), JSON.stringify(bad));
    }
    for (const ok of ['*', '>', 'a.*', 'a.>', '*.b.>', 'a.*.*']) assert.ok(isValidPattern(ok), ok);
    for (const bad of ['', 'a.>.b', '>.a', 'a.**', 'a.b>', 'a..>', ' a'])
      assert.ok(!isValidPattern(bad), JSON.stringify(bad));
  });

  it('matches `*` to exactly one token and `>` to one or more trailing tokens', () => {
    const cases: Array<[string, string, boolean]> = [
      ['a.b.c', 'a.b.c', true],
      ['a.b.c', 'a.b.cd', false],
      ['a.b.c', 'a.b', false],
      ['a.b', 'a.b.c', false],
      ['a.*.c', 'a.xyz.c', true],
      ['a.*.c', 'a.c', false],
      ['a.*', 'a.b.c', false],
      ['*', 'a', true],
      ['*', 'a.b', false],
      ['a.>', 'a', false],
      ['a.>', 'a.b', true],
      ['a.>', 'a.b.c.d', true],
      ['>', 'a.b', true],
      ['*.b.>', 'x.b.y', true],
      ['*.b.>', 'x.c.y', false],
      ['ab.c', 'a.c', false],
      ['a.b', 'ab.c', false],
    ];
    for (const [pattern, subject, want] of cases) {
      assert.equal(subjectMatches(pattern, subject), want, `${pattern} ~ ${subject}`);
    }
  });
});
