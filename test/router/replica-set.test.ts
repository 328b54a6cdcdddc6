import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ModelRoute } from '../../src/config/router-config.js';
import { Admission } from '../../src/router/admission.js';
import { ReplicaSet } from '../../src/router/replica-set.js';

function route(bases: readonly string[]): ModelRoute {
  return {
    alias: 'm',
    replicas: bases.map((b) => {
      const u = new URL(b);
      return { base: b, origin: u.origin, pathPrefix: u.pathname };
    }),
    maxAttempts: 2,
    upstreamModel: 'm',
    upstreamApiKeyEnv: undefined,
    maxOutputTokens: 16,
    maxConcurrency: 4,
    maxQueue: 4,
    queueTimeoutMs: 1000,
    upstreamTimeoutMs: 1000,
    readinessPath: '/health',
  };
}

describe('replica choice: least outstanding among ready replicas, ties in turn, never one already tried', () => {
  let server: Server;
  let origin: string;
  let healthy = true;
  before(async () => {
    server = createServer((req, res) => {
      res.statusCode = req.url === '/health' && healthy ? 200 : 503;
      res.end();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((r) => server.close(() => r())));

  it('ties go round robin; the least loaded replica wins; tried and unready replicas are skipped', async () => {
    // Replica 2 never answers (port 9): not ready.
    const set = new ReplicaSet(route([`${origin}/a`, `${origin}/b`, 'http://127.0.0.1:9/c']), 60_000);
    assert.equal(await set.ready(), true);
    // ready() answers at the first ready replica; the others' probes finish in the background.
    assert.deepEqual(await Promise.all(set.replicas.map((r) => r.readiness.check())), [true, true, false]);
    const seq = Array.from({ length: 4 }, () => set.pick(0, true)!.index);
    assert.deepEqual(seq, [0, 1, 0, 1], 'ties in turn, the unready replica never');
    set.replicas[0]!.outstanding = 3;
    set.replicas[1]!.outstanding = 1;
    assert.equal(set.pick(0, true)!.index, 1, 'fewest outstanding');
    assert.equal(set.pick(0b10, false)!.index, 0, 'replica 1 tried already');
    assert.equal(set.pick(0b11, false), undefined, 'no ready replica left for a failover');
    assert.equal(set.pick(0b11, true)!.index, 2, 'a first attempt goes out even to an unready one');
    await set.close();
  });

  it('ready while one replica is; a replica marked down is skipped until its probe passes again', async () => {
    const set = new ReplicaSet(route([`${origin}/a`, 'http://127.0.0.1:9/b']), 60_000);
    assert.equal(await set.ready(), true);
    set.replicas[0]!.readiness.markDown();
    assert.equal(set.pick(0, false), undefined);
    healthy = false;
    assert.equal(await set.ready(), false, 'no replica ready');
    healthy = true;
    // Failures are cached for a quarter of the interval: a fresh set probes at once.
    const fresh = new ReplicaSet(route([`${origin}/a`, 'http://127.0.0.1:9/b']), 60_000);
    assert.equal(await fresh.ready(), true);
    assert.equal(fresh.pick(0, false)!.index, 0);
    await set.close();
    await fresh.close();
  });
});

describe('admission kept across a reload: new limits apply to the requests in flight and waiting', () => {
  it('a larger concurrency admits waiters at once; a smaller one admits nobody until enough finish', async () => {
    const adm = new Admission(1, 10, 10_000);
    assert.ok(adm.tryAcquire());
    let admitted = 0;
    const waiters = [adm.acquire(), adm.acquire(), adm.acquire()].map((p) => p.then(() => admitted++));
    adm.reconfigure(3, 10, 10_000);
    await Promise.resolve();
    await Promise.resolve();
    assert.equal(adm.active, 3);
    assert.equal(adm.queued, 1);
    adm.reconfigure(1, 10, 10_000);
    adm.release();
    adm.release();
    assert.equal(adm.queued, 1, 'over the new limit: slots given up, not handed on');
    adm.release();
    await Promise.all(waiters);
    assert.equal(admitted, 3);
    assert.equal(adm.active, 1);
  });
});
