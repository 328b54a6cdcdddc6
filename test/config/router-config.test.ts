import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { loadRouterConfig } from '../../src/config/router-config.js';
import { ConfigError } from '../../src/errors.js';
import { startRouter } from '../../src/router/router.js';
import { runCli } from '../cli/run-cli.js';

const dir = mkdtempSync(join(tmpdir(), 'svc-router-cfg-'));
let n = 0;

/** A router configuration file: `server` and `model` lines added to a valid one. */
function file(server: string[] = [], model: string[] = []): string {
  const path = join(dir, `r${++n}.toml`);
  writeFileSync(
    path,
    [
      '[server]',
      'host_id = "node-a"',
      'listen = "127.0.0.1:0"',
      'api_keys_env = "CFG_KEYS"',
      ...server,
      '',
      '[[models]]',
      'alias = "m1"',
      ...(model.some((l) => l.startsWith('upstream =') || l.startsWith('upstreams =') || l === '# no upstream')
        ? []
        : ['upstream = "http://127.0.0.1:9/v1"']),
      ...model,
      '',
    ].join('\n'),
  );
  return path;
}

describe('router configuration: values that could never work are refused at start (exit 2), naming the member', () => {
  it('a TOML float where an integer is required is refused, even 2.0; an integer past 2^53 is out of range, not "not TOML"', () => {
    for (const [server, model, member] of [
      [[], ['max_concurrency = 2.0'], '/models/0/max_concurrency'],
      [[], ['max_output_tokens = 2.0'], '/models/0/max_output_tokens'],
      [[], ['queue_timeout_ms = 2.0'], '/models/0/queue_timeout_ms'],
      [['buffer_size = 1e3'], [], '/server/buffer_size'],
      [['buffer_size = 9223372036854775807'], [], '/server/buffer_size'],
    ] as const) {
      assert.throws(
        () => loadRouterConfig(file([...server], [...model])),
        (e: unknown) => e instanceof ConfigError && e.message.includes(member),
        `${server} ${model}`,
      );
    }
    // The same values as integers are fine.
    assert.equal(loadRouterConfig(file(['buffer_size = 1000'], ['max_concurrency = 2'])).bufferSize, 1000);
  });

  it('a nats_url that could never be reached (port out of range or empty, no host, spaces, credentials, a path) is refused, not "unreachable"', () => {
    for (const url of [
      'nats://127.0.0.1:99999',
      'nats://127.0.0.1:0',
      'nats://127.0.0.1:',
      'nats://%%%',
      'nats://a b',
      'nats://u:p@h:4222',
      'nats://h:4222/x',
      'http://h:4222',
      'nats://',
    ]) {
      assert.throws(() => loadRouterConfig(file([`nats_url = "${url}"`])), /invalid member \/server\/nats_url/, url);
    }
    for (const url of [
      'nats://127.0.0.1:4222',
      'nats://nats',
      'tls://nats.example.com:4443',
      'nats://[::1]:4222',
      'nats://nats_1:65535',
    ]) {
      assert.equal(loadRouterConfig(file([`nats_url = "${url}"`])).nats?.url, url);
    }
  });

  it('an upstream with no host or port 0, or a readiness path that cannot go on the wire as it is, is refused', () => {
    for (const upstream of ['http:///v1', 'http://127.0.0.1:0/v1', 'http:/x/v1']) {
      assert.throws(
        () => loadRouterConfig(file([], [`upstream = "${upstream}"`])),
        /upstream of "m1" is not a URL|must be a plain origin|invalid member \/models\/0\/upstream/,
        upstream,
      );
    }
    for (const path of ['/\\u0000x', '/health#f', '/h\\u00e9alth', '/a b', 'health']) {
      assert.throws(
        () => loadRouterConfig(file([], [`readiness_path = "${path}"`])),
        /invalid member \/models\/0\/readiness_path/,
        path,
      );
    }
    assert.equal(
      loadRouterConfig(file([], ['readiness_path = "/health?ready=1"'])).models[0]!.readinessPath,
      '/health?ready=1',
    );
  });

  it('upstreams lists replicas in order; max_attempts defaults to 2; a file without them hashes as before replicas', () => {
    const c = loadRouterConfig(
      file([], ['upstreams = ["http://10.0.0.5:8001/v1/", "https://h6.example:8443/openai/v1"]', 'max_attempts = 3']),
    );
    assert.deepEqual(c.models[0]!.replicas, [
      { base: 'http://10.0.0.5:8001/v1', origin: 'http://10.0.0.5:8001', pathPrefix: '/v1' },
      { base: 'https://h6.example:8443/openai/v1', origin: 'https://h6.example:8443', pathPrefix: '/openai/v1' },
    ]);
    assert.equal(c.models[0]!.maxAttempts, 3);
    const single = loadRouterConfig(file());
    assert.equal(single.models[0]!.replicas.length, 1);
    assert.equal(single.models[0]!.maxAttempts, 2);
    // The hash is over the file's `[[models]]` as written (plus schema defaults): no max_attempts member added.
    const again = loadRouterConfig(file([], ['max_attempts = 2']));
    assert.notEqual(single.routingConfigHash, again.routingConfigHash);
  });

  it('upstream and upstreams: exactly one; a bad replica URL names the entry, the alias and the key, never the URL', () => {
    const secretish = 'http://user:canary-pass@10.0.0.5:8001/v1';
    for (const [lines, want] of [
      [
        ['upstream = "http://127.0.0.1:9/v1"', 'upstreams = ["http://127.0.0.1:9/v1"]'],
        /\/models\/0 \(alias "m1"\) must set exactly one of upstream and upstreams \(it sets both\)/,
      ],
      [
        ['# no upstream'],
        /\/models\/0 \(alias "m1"\) must set exactly one of upstream and upstreams \(it sets neither\)/,
      ],
      [[`upstreams = ["http://127.0.0.1:9/v1", "${secretish}"]`], /invalid member \/models\/0\/upstreams\/1$/],
      [
        ['upstreams = ["http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1?x=1"]'],
        /upstreams\/1 of \/models\/0 \(alias "m1"\) must be a plain origin and path/,
      ],
      [
        ['upstreams = ["http://127.0.0.1:9/v1", "http://127.0.0.1:0/v1"]'],
        /upstreams\/1 of \/models\/0 \(alias "m1"\) is not a URL/,
      ],
      [
        ['upstreams = ["http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1/"]'],
        /upstreams\/1 of \/models\/0 \(alias "m1"\) repeats an earlier replica/,
      ],
      [['upstreams = []'], /invalid member \/models\/0\/upstreams/],
      [['max_attempts = 0'], /invalid member \/models\/0\/max_attempts/],
      [['max_attempts = 11'], /invalid member \/models\/0\/max_attempts/],
    ] as const) {
      assert.throws(
        () => loadRouterConfig(file([], [...lines])),
        (e: unknown) =>
          e instanceof ConfigError &&
          want.test(e.message) &&
          !e.message.includes('127.0.0.1') &&
          !e.message.includes('canary'),
        lines.join(' '),
      );
    }
  });

  it('a second router naming the same decision log through a symbolic link is refused: one log, one lock', async () => {
    const env = { CFG_KEYS: 'good-key-0123456789abcdef' };
    const logIn = (dir: string, side: 'a' | 'b') =>
      file([`decision_log_path = "${join(dir, side, 'decisions.jsonl')}"`]);
    // `b/decisions.jsonl` links to `a/decisions.jsonl` (made first, or left for the router to make).
    for (const [targetExists, firstSide, secondSide] of [
      [true, 'a', 'b'],
      [false, 'b', 'a'],
    ] as const) {
      const d = mkdtempSync(join(tmpdir(), 'svc-router-link-'));
      mkdirSync(join(d, 'a'));
      mkdirSync(join(d, 'b'));
      if (targetExists) writeFileSync(join(d, 'a', 'decisions.jsonl'), '');
      symlinkSync(join(d, 'a', 'decisions.jsonl'), join(d, 'b', 'decisions.jsonl'));
      const first = await startRouter(loadRouterConfig(logIn(d, firstSide)), {
        logger: pino({ level: 'silent' }),
        env,
      });
      try {
        // Another process (a lock is one process's): `router serve` as an operator runs it.
        const r = await runCli(['router', 'serve', '--config', logIn(d, secondSide)], env, { timeoutMs: 20_000 });
        assert.equal(r.code, 2, r.stderr);
        assert.match(r.stderr, /decision_log_path is in use by another running router process/);
      } finally {
        await first.close();
      }
    }
  });

  it('data-plane and upstream keys no header can carry stop the start, naming the variable, never the key', async () => {
    const start = (env: Record<string, string>, model: string[] = []) =>
      startRouter(loadRouterConfig(file([], model)), { logger: pino({ level: 'silent' }), env });
    for (const keys of [
      'CANARY-KEY é-long-enough',
      'CANARY KEY-with-a-space',
      `CANARY-${'a'.repeat(5000)}`,
      'good-key-0123456789abcdef,CANARY\u0001x',
    ]) {
      const err = await start({ CFG_KEYS: keys }).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(err instanceof ConfigError, JSON.stringify(keys.slice(0, 30)));
      assert.match(err.message, /CFG_KEYS holds a key that is not 1-4096 printable ASCII/);
      assert.doesNotMatch(err.message, /CANARY/);
    }
    for (const up of ['CANARY-UP\r\nX-Evil: 1', 'CANARY\u0001', 'CANARY☃']) {
      const err = await start({ CFG_KEYS: 'good-key-0123456789abcdef', CFG_UP: up }, [
        'upstream_api_key_env = "CFG_UP"',
      ]).then(
        () => undefined,
        (e: unknown) => e,
      );
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /CFG_UP \(upstream key of "m1"\) is not 1-4096 printable ASCII/);
      assert.doesNotMatch(err.message, /CANARY/);
    }
  });
});
