import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { startRouterHarness, type RouterHarness } from '../support/router-harness.js';

/** An `engine sim` process on a free loopback port. */
function sim(tokens = 4, tokenDelayMs = 2): Promise<RunningProcess> {
  return spawnNode(CLI, [
    'engine',
    'sim',
    '--listen',
    '127.0.0.1:0',
    '--ttft-ms',
    '5',
    '--token-delay-ms',
    String(tokenDelayMs),
    '--tokens',
    String(tokens),
    '--model',
    'sim-model',
  ]);
}

/** Makes a sim answer every inference request with `status` (0: normal service again). */
async function failWith(s: RunningProcess, status: number): Promise<void> {
  const res = await fetch(`${s.url}/sim/health`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ok: true, fail_status: status }),
  });
  assert.equal(res.status, 200);
}

const body = (stream: boolean, prompt = 'hello'): string =>
  JSON.stringify({ model: 'chat', stream, messages: [{ role: 'user', content: prompt }] });

/** One chat request through the router; the whole body as text. */
async function chat(
  h: RouterHarness,
  stream: boolean,
  prompt?: string,
): Promise<{ status: number; id: string; text: string }> {
  const res = await fetch(`${h.routerUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
    body: body(stream, prompt),
  });
  let text = '';
  try {
    text = await res.text();
  } catch {
    // the stream was cut: what arrived before is what counts (read below through `text`)
  }
  return { status: res.status, id: res.headers.get('x-svc-request-id') ?? '', text };
}

async function recordOf(h: RouterHarness, id: string): Promise<Record<string, unknown>> {
  return eventually(async () => {
    const r = await h.lookup(id);
    return r.status === 200 ? (r.body.request as Record<string, unknown>) : undefined;
  });
}

/** Runs `n` requests `concurrency` at a time. */
async function load<T>(n: number, concurrency: number, one: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        const i = next++;
        out[i] = await one(i);
      }
    }),
  );
  return out;
}

describe('router replicas: least outstanding choice and failover before any byte reached the client (engine sims as real processes)', () => {
  let a: RunningProcess;
  let b: RunningProcess;
  let h: RouterHarness;
  before(async () => {
    a = await sim();
    b = await sim();
    h = await startRouterHarness({
      models: [{ alias: 'chat', upstreams: [`${a.url}/v1`, `${b.url}/v1`], upstream_model: 'sim-model' }],
    });
  });
  after(async () => {
    await h.stop();
    await a.stop();
    await b.stop();
  });

  it('two healthy replicas share concurrent load within 10% of even; each record names its replica and one attempt', async () => {
    const results = await load(200, 8, () => chat(h, false));
    const perReplica = [0, 0];
    for (const r of results) {
      assert.equal(r.status, 200);
      const rec = await recordOf(h, r.id);
      assert.equal(rec['attempts'], 1);
      perReplica[rec['upstream_replica'] as number]!++;
    }
    for (const n of perReplica) assert.ok(n >= 90 && n <= 110, `spread ${perReplica.join('/')}`);
  });

  it('a replica answering 503 is failed over: every client gets its answer, records say which replica answered and how many attempts', async () => {
    await failWith(a, 503);
    try {
      const results = await load(20, 4, () => chat(h, false));
      let failedOver = 0;
      for (const r of results) {
        assert.equal(r.status, 200, 'no client sees the 503');
        const rec = await recordOf(h, r.id);
        assert.equal(rec['upstream_replica'], 1, 'the replica that answered');
        assert.equal(rec['outcome'], 'success');
        if (rec['attempts'] === 2) failedOver++;
        else assert.equal(rec['attempts'], 1);
      }
      assert.ok(failedOver >= 1, 'some requests went to the failing replica first');
      // Nothing of the engine's error text reached a client.
      for (const r of results) assert.doesNotMatch(r.text, /UPSTREAM-SECRET-DETAIL/);
    } finally {
      await failWith(a, 0);
    }
  });

  it('one replica killed mid-run: no request fails that had not yet sent a byte; later requests go to the live replica', async () => {
    const c = await sim(30, 10);
    const d = await sim(30, 10);
    const h2 = await startRouterHarness({
      models: [{ alias: 'chat', upstreams: [`${c.url}/v1`, `${d.url}/v1`], upstream_model: 'sim-model' }],
    });
    try {
      const killer = new Promise<void>((resolve) =>
        setTimeout(() => {
          c.proc.kill('SIGKILL');
          resolve();
        }, 700),
      );
      const results = await load(60, 6, () => chat(h2, true));
      await killer;
      let cut = 0;
      for (const r of results) {
        // A 502 would be a request that failed before any byte: never.
        assert.equal(r.status, 200, r.text.slice(0, 200));
        if (!r.text.includes('data: [DONE]')) {
          // Cut mid-stream: it had its first content before the router's error event.
          cut++;
          assert.match(r.text, /"content":"tok /);
          assert.match(r.text, /event: error/);
        }
      }
      assert.ok(cut <= 6, `at most the streams in flight on the killed replica were cut (${cut})`);
      let failedOver = 0;
      for (const r of results) if ((await recordOf(h2, r.id))['attempts'] === 2) failedOver++;
      assert.ok(cut + failedOver >= 1, 'the kill landed while requests were running');
      const after = await chat(h2, true);
      assert.equal(after.status, 200);
      assert.equal((await recordOf(h2, after.id))['upstream_replica'], 1);
    } finally {
      await h2.stop();
      await c.stop();
      await d.stop();
    }
  });

  it('max_attempts = 1 turns failover off: the 503 is the client 502, one attempt recorded', async () => {
    const e = await sim();
    await failWith(e, 503);
    const h3 = await startRouterHarness({
      models: [
        // The second replica never answers (port 9): the first is the one chosen.
        {
          alias: 'chat',
          upstreams: [`${e.url}/v1`, 'http://127.0.0.1:9/v1'],
          upstream_model: 'sim-model',
          max_attempts: 1,
        },
      ],
    });
    try {
      const r = await chat(h3, false);
      assert.equal(r.status, 502);
      const rec = await recordOf(h3, r.id);
      assert.equal(rec['attempts'], 1);
      assert.equal(rec['upstream_replica'], 0);
    } finally {
      await h3.stop();
      await e.stop();
    }
  });
});

describe('router /healthz and /readyz: no credential, failing checks named, a dead engine seen within the readiness interval without traffic', () => {
  it('readyz names the alias with no ready replica; a killed engine shows within readiness_ttl_ms; healthz stays 200', async () => {
    const live = await sim();
    const h = await startRouterHarness({
      server: { readiness_ttl_ms: 300 },
      models: [
        { alias: 'chat', upstream: `${live.url}/v1`, upstream_model: 'sim-model' },
        // Port 9 (discard): nothing answers there.
        { alias: 'dead', upstream: 'http://127.0.0.1:9/v1' },
      ],
    });
    try {
      const healthz = await h.get('/healthz', null);
      assert.equal(healthz.status, 200);
      assert.match(healthz.headers.get('content-type') ?? '', /^application\/json/);
      assert.deepEqual(await healthz.json(), { status: 'ok' });
      const first = await h.get('/readyz', null);
      assert.equal(first.status, 503);
      assert.match(first.headers.get('content-type') ?? '', /^application\/json/);
      assert.deepEqual(await first.json(), { status: 'unready', failing: ['alias:dead'] });
      // The live engine dies; no inference request is sent.
      live.proc.kill('SIGKILL');
      const t0 = Date.now();
      await eventually(
        async () => {
          const r = await h.get('/readyz', null);
          const b = (await r.json()) as { failing?: string[] };
          return r.status === 503 && b.failing?.includes('alias:chat');
        },
        3000,
        50,
      );
      assert.ok(Date.now() - t0 < 3000);
      assert.equal((await h.get('/healthz', null)).status, 200);
      // A query string is refused, as on every route that takes none: a problem naming `query`.
      for (const path of ['/readyz?verbose=1', '/healthz?x=1']) {
        const refused = await h.get(path, null);
        assert.equal(refused.status, 400);
        assert.match(refused.headers.get('content-type') ?? '', /^application\/problem\+json/);
        const problem = (await refused.json()) as { code: string; invalid_params?: { name: string }[] };
        assert.equal(problem.code, 'invalid_input');
        assert.deepEqual(
          problem.invalid_params?.map((p) => p.name),
          ['query'],
          path,
        );
      }
    } finally {
      await h.stop();
      await live.stop();
    }
  });
});

describe('router reload on SIGHUP: [[models]] re-read without dropping requests in flight; a bad file keeps the running configuration', () => {
  let h: RouterHarness;
  before(async () => {
    h = await startRouterHarness({ models: [{ alias: 'chat' }], sim: { tokens: 4, tokenDelayMs: 2 } });
  });
  after(() => h.stop());

  const status = async (): Promise<{ routing_config_hash: string; models: string[] }> =>
    (await h.get('/v1/router/status')).json() as Promise<{ routing_config_hash: string; models: string[] }>;

  it('a stream in flight finishes on the configuration it began with; new requests use the new alias set and hash', async () => {
    const before = await status();
    // About 1.5 s of stream, so the reload lands in its middle.
    const inFlight = chat(h, true, 'sim:tokens=60 sim:token_delay_ms=25');
    await new Promise((r) => setTimeout(r, 300));
    h.writeModels([{ alias: 'chat2' }, { alias: 'chat', max_concurrency: 4 }]);
    h.router.proc.kill('SIGHUP');
    const now = await eventually(async () => {
      const s = await status();
      return s.routing_config_hash !== before.routing_config_hash ? s : undefined;
    });
    assert.deepEqual(now.models, ['chat2', 'chat']);
    const old = await inFlight;
    assert.equal(old.status, 200);
    assert.match(old.text, /data: \[DONE\]/);
    const oldRec = await recordOf(h, old.id);
    assert.equal(oldRec['outcome'], 'success');
    assert.equal(oldRec['routing_config_hash'], before.routing_config_hash);
    const res = await fetch(`${h.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'chat2', messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(res.status, 200);
    const newRec = await recordOf(h, res.headers.get('x-svc-request-id')!);
    assert.equal(newRec['routing_config_hash'], now.routing_config_hash);
    assert.equal(newRec['model'], 'chat2');
    assert.match(h.routerOutput(), /"msg":"configuration reloaded"/);
  });

  it('a file that fails validation leaves the running configuration, logs one line without a URL, and is counted', async () => {
    const before = await status();
    const linesBefore = h
      .routerOutput()
      .split('\n')
      .filter((l) => l.includes('reload rejected')).length;
    // Both `upstream` and `upstreams`: refused.
    h.writeModels([{ alias: 'broken', upstream: 'http://127.0.0.1:9/v1', upstreams: ['http://127.0.0.1:9/v1'] }]);
    h.router.proc.kill('SIGHUP');
    const lines = await eventually(() => {
      const l = h
        .routerOutput()
        .split('\n')
        .filter((x) => x.includes('reload rejected'));
      return l.length > linesBefore ? l : undefined;
    });
    assert.equal(lines.length, linesBefore + 1, 'one line');
    const line = lines.at(-1)!;
    assert.doesNotMatch(line, /http:\/\//);
    assert.match(line, /\/models\/0 \(alias \\"broken\\"\) must set exactly one of upstream and upstreams/);
    assert.deepEqual(await status(), before);
    assert.equal((await chat(h, false)).status, 200, 'the running aliases still serve');
    const metrics = await (await h.get('/metrics', null)).text();
    assert.match(metrics, /svc_router_config_reloads_total\{result="rejected"\} 1/);
    assert.match(metrics, /svc_router_config_reloads_total\{result="applied"\} 1/);
  });
});
