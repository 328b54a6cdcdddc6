import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { AuthorizationPolicy } from '../../src/auth/policy.js';
import { checkNodeResult } from '../../src/schema/envelopes.js';
import { observationSubject } from '../../src/schema/subjects.js';
import { buildControllerApp } from '../../src/controller/controller.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { NodeView } from '../../src/streams/node-view.js';
import { CONTROLLER_OWNERS } from '../../src/streams/query-node.js';
import { batch, enc, rec } from '../support/records.js';
import { writeTestPolicy } from '../support/policy.js';

const H = 'node-a';

describe('controller POST /tools/call', () => {
  const p = writeTestPolicy();
  const bus = new InProcessBus();
  const now = Date.now();
  const view = new NodeView({ host: H, bus, staleAfterMs: 30_000, owners: CONTROLLER_OWNERS });
  let app: FastifyInstance;
  const reader = { authorization: `Bearer ${p.tokens.reader}`, 'content-type': 'application/json' };
  const call = (body: unknown, headers: Record<string, string> = reader) =>
    app.inject({
      method: 'POST',
      url: '/tools/call',
      headers,
      payload: typeof body === 'string' ? body : JSON.stringify(body),
    });

  before(async () => {
    view.start();
    bus.publish(
      observationSubject(H, 'media'),
      enc(batch(H, 'media', { at: now, upserts: [rec(H, 'media', 'j1', { at: now })] })),
    );
    app = await buildControllerApp({
      logger: pino({ level: 'silent' }),
      policy: AuthorizationPolicy.load(p.path, p.env),
      view,
    });
  });
  after(async () => {
    await app.close();
    view.stop();
    await bus.close();
  });

  it('returns a NodeResult with six sources in contract order', async () => {
    const res = await call({ name: 'node_workloads', arguments: {} });
    assert.equal(res.statusCode, 200);
    const body = res.json();
    assert.ok(checkNodeResult.Check(body));
    assert.deepEqual(
      body.sources.map((s: { owner: string }) => s.owner),
      ['router', 'controller', 'benchmark', 'media', 'recipe', 'manifest'],
    );
    assert.equal(body.sources[3]!.records.length, 1);
    assert.equal(body.status, 'partial', 'owners without actors are unavailable, so the node is partial');
    assert.equal(body.sources[0]!.status, 'unavailable');
    assert.equal(body.truncation.omitted, null);
  });

  it('accepts a call without arguments and applies filters', async () => {
    assert.equal((await call({ name: 'node_workloads' })).statusCode, 200);
    const res = await call({ name: 'node_workloads', arguments: { owner: 'media', limit: 1 } });
    assert.equal(res.json().status, 'complete');
  });

  it('401 without or with an unknown credential, 403 without the grant', async () => {
    const body = { name: 'node_workloads' };
    assert.equal((await call(body, { 'content-type': 'application/json' })).statusCode, 401);
    assert.equal((await call(body, { ...reader, authorization: 'Bearer nope-nope-nope' })).statusCode, 401);
    for (const t of [p.tokens.lifecycle, p.tokens.bootstrap, p.tokens.media]) {
      const res = await call(body, { ...reader, authorization: `Bearer ${t}` });
      assert.equal(res.statusCode, 403);
      assert.equal(res.headers['content-type'], 'application/problem+json; charset=utf-8');
    }
  });

  it('a credential or content type named twice is the fixed 400, even when one copy is valid', async () => {
    const body = { name: 'node_workloads' };
    const cases: Record<string, string | string[]>[] = [
      { ...reader, authorization: [reader.authorization, reader.authorization] },
      { ...reader, authorization: [reader.authorization, 'Bearer nope-nope-nope'] },
      { ...reader, 'content-type': ['application/json', 'text/plain'] },
    ];
    for (const headers of cases) {
      const res = await app.inject({ method: 'POST', url: '/tools/call', headers, payload: JSON.stringify(body) });
      assert.equal(res.statusCode, 400);
      assert.deepEqual(res.json(), {
        type: 'urn:svc-serving:problem:invalid-input',
        title: 'Invalid input',
        status: 400,
        code: 'invalid_input',
      });
    }
    // One copy of each is the normal answer.
    assert.equal((await call(body)).statusCode, 200);
  });

  it('a query string on /tools/call is refused, not ignored (filters travel in the body)', async () => {
    const res = await app.inject({
      method: 'POST',
      url: '/tools/call?owner=router',
      headers: reader,
      payload: JSON.stringify({ name: 'node_workloads' }),
    });
    assert.equal(res.statusCode, 400);
    assert.deepEqual(res.json(), {
      type: 'urn:svc-serving:problem:invalid-input',
      title: 'Invalid input',
      status: 400,
      code: 'invalid_input',
    });
  });

  it('authenticates before reading the body', async () => {
    const res = await call('{not json', { 'content-type': 'application/json' });
    assert.equal(res.statusCode, 401);
  });

  const bad: [string, unknown][] = [
    ['malformed JSON', '{"name": '],
    ['extra body member', { name: 'node_workloads', arguments: {}, id: 7 }],
    ['unknown tool', { name: 'node_workload' }],
    ['null arguments', { name: 'node_workloads', arguments: null }],
    ['null filter', { name: 'node_workloads', arguments: { owner: null } }],
    ['unknown filter', { name: 'node_workloads', arguments: { ownr: 'media' } }],
    ['string limit', { name: 'node_workloads', arguments: { limit: '5' } }],
    ['out of range', { name: 'node_workloads', arguments: { limit: 1001 } }],
    ['wrong case', { name: 'node_workloads', arguments: { owner: 'Media' } }],
    ['array body', [1]],
    ['repeated filter', '{"name":"node_workloads","arguments":{"limit":5,"limit":6}}'],
    [
      'repeated filter, spelled with an escape',
      '{"name":"node_workloads","arguments":{"owner":"media","\\u006fwner":"router"}}',
    ],
    ['repeated member', '{"name":"node_workloads","name":"node_workloads","arguments":{}}'],
  ];
  for (const [name, body] of bad) {
    it(`400 problem+json for ${name}, echoing nothing`, async () => {
      const res = await call(body);
      assert.equal(res.statusCode, 400);
      // A wrong filter names itself (a fixed name, never the value sent); other faults name nothing.
      const { invalid_params: named, ...problem } = res.json() as { invalid_params?: { name: string }[] };
      if (named !== undefined)
        assert.ok(
          named.every((n) => /^(?:owner|kind|state|host|active_only|recent_seconds|limit|arguments)$/.test(n.name)),
        );
      assert.deepEqual(problem, {
        type: 'urn:svc-serving:problem:invalid-input',
        title: 'Invalid input',
        status: 400,
        code: 'invalid_input',
      });
    });
  }

  it('fixed problems for wrong content type, oversized body, unknown route and fleet tool', async () => {
    const ct = await app.inject({
      method: 'POST',
      url: '/tools/call',
      headers: { ...reader, 'content-type': 'text/plain' },
      payload: 'x',
    });
    assert.equal(ct.statusCode, 415);
    const big = await call({ name: 'node_workloads', arguments: { host: 'a'.repeat(100_000) } });
    assert.equal(big.statusCode, 413);
    const nf = await app.inject({ method: 'GET', url: '/nowhere?secret=CANARY', headers: reader });
    assert.equal(nf.statusCode, 404);
    assert.doesNotMatch(nf.body, /CANARY/);
    assert.equal((await call({ name: 'fleet_workloads' })).statusCode, 404);
  });

  it('reading twice changes nothing (observation only)', async () => {
    const a = (await call({ name: 'node_workloads' })).json();
    const b = (await call({ name: 'node_workloads' })).json();
    assert.deepEqual(a.sources, b.sources);
  });
});
