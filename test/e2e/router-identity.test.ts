import { ErrorCode, openAiError, problemFor } from '../../src/errors.js';
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { checkNodeResult, type NodeResult } from '../../src/schema/envelopes.js';
import type { TerminalRecord } from '../../src/schema/terminal-record.js';
import { eventually } from '../support/processes.js';
import { UPSTREAM_KEY, raw, useRouterE2E, user } from '../support/router-e2e.js';
import type { RecordingUpstream } from '../support/recording-upstream.js';
import type { RouterHarness } from '../support/router-harness.js';

describe('router end to end: one record per request, identifiers, headers, active and session views', () => {
  const e = useRouterE2E();
  const { post, chat, record, gidOf, assertProblem, readEvents } = e;
  let h: RouterHarness;
  let rec: RecordingUpstream;
  before(() => {
    ({ h, rec } = e);
  });

  it('exactly one terminal record per request with an id, a refusal before routing included: the decision log gains one line per response id', async () => {
    await h.idle();
    const before = h.decisions().length;
    const ids: string[] = [];
    const take = async (p: Promise<Response>): Promise<void> => {
      const res = await p;
      ids.push(gidOf(res));
      await res.text();
    };
    await Promise.all([
      take(chat('plain')),
      take(chat('stream', { stream: true })),
      take(chat('sim:reject=context')),
      take(chat('sim:status=503')),
      take(chat('sim:fail_after=1', { stream: true })),
      take(chat('legacy', {}, { 'x-request-id': `legacy-${randomBytes(4).toString('hex')}` })),
      take(chat('sim:tokens=2', {}, {}, 'recorded')),
    ]);
    const slow = chat('sim:ttft_ms=400', {}, {}, 'single');
    await eventually(
      async () =>
        (
          (await (await h.get('/v1/requests?active=1')).json()) as { requests: { model: string; phase: string }[] }
        ).requests.some((x) => x.model === 'single' && x.phase === 'dispatched'),
      2000,
      10,
    );
    await take(chat('refused', {}, {}, 'single'));
    await take(slow);
    const ac = new AbortController();
    const streaming = await post(
      '/v1/chat/completions',
      { model: 'chat', messages: user('sim:tokens=50 sim:token_delay_ms=30'), stream: true },
      {},
      ac.signal,
    );
    ids.push(gidOf(streaming));
    await readEvents(streaming, 2);
    ac.abort();
    // Refused before routing: an identifier and its one terminal record too (CONTRACT.md, revision 2).
    const unrouted = await chat('x', {}, {}, 'no-such-alias');
    const unroutedId = gidOf(unrouted);
    ids.push(unroutedId);
    await unrouted.text();
    await h.idle();
    // Finished records reach the file in grouped writes within the log's flush delay.
    await eventually(() => h.decisions().length - before >= ids.length, 2000, 10);
    await new Promise((r) => setTimeout(r, 100));
    const added = h.decisions().slice(before);
    assert.equal(added.length, ids.length);
    const logged = added.map((d) => d?.['gateway_request_id']);
    assert.deepEqual([...logged].sort(), [...ids].sort());
    assert.equal(new Set(logged).size, ids.length);
    for (const id of ids) await record(id);
    const refused = await record(unroutedId);
    assert.deepEqual(
      [refused.model, refused.outcome, refused.refusal, refused.status_code],
      [null, 'rejected', 'unknown_model', 404],
    );
  });

  it('identifiers: X-Svc-Request-Id on every authenticated inference answer, legacy and reserved caller ids, forwarding', async () => {
    const answers = [
      await chat('ok'),
      await chat('x', {}, {}, 'no-such-alias'),
      await chat('sim:status=502'),
      await post('/v1/chat/completions', '{not json'),
      await post('/v1/chat/completions', 'x', { 'content-type': 'text/plain' }),
    ];
    const ids = answers.map((r) => gidOf(r));
    assert.equal(new Set(ids).size, ids.length, 'unique');
    // Without a legacy id, X-Request-Id (what OpenAI SDKs show as the request id) is the generated one, errors included.
    assert.deepEqual(
      answers.map((r) => r.headers.get('x-request-id')),
      ids,
    );
    assert.deepEqual(
      answers.map((r) => r.status),
      [200, 404, 502, 400, 415],
    );
    await Promise.all(answers.map((r) => r.text()));

    // A valid legacy X-Request-Id is kept; the newest record answers for it.
    const legacy = `trace-${randomBytes(6).toString('hex')}`;
    const l1 = await chat('one', { max_tokens: 3 }, { 'x-request-id': legacy });
    const l2 = await chat('two', { max_tokens: 5 }, { 'x-request-id': legacy });
    const [g1, g2] = [gidOf(l1), gidOf(l2)];
    await Promise.all([l1.text(), l2.text()]);
    assert.equal((await record(g1)).request_id, legacy);
    assert.equal((await record(g1)).output_limit?.requested, 3);
    const newest = await record(legacy);
    assert.equal(newest.request_id, legacy);
    assert.equal(newest.output_limit?.requested, 5);
    assert.notEqual(g1, g2);

    // The reserved shape is never kept from a caller, and lookup never falls back to it.
    const reserved = `req_${randomBytes(16).toString('hex')}`;
    const rr = await chat('reserved', {}, { 'x-request-id': reserved });
    const rid = gidOf(rr);
    await rr.text();
    assert.notEqual(rid, reserved);
    assert.equal((await record(rid)).request_id, rid);
    const miss = await h.lookup(reserved);
    assert.equal(miss.status, 404);
    assert.equal(miss.body.type, 'urn:svc-serving:problem:not-found');
    assert.equal((await h.lookup(`req_${'0'.repeat(32)}`)).status, 404);
    // Invalid legacy ids fall back to the generated one.
    for (const bad of ['has space', 'x'.repeat(129)]) {
      const res = await chat('bad legacy', {}, { 'x-request-id': bad });
      const id = gidOf(res);
      await res.text();
      assert.equal((await record(id)).request_id, id);
    }

    // What reaches the engine: the generated id as x-request-id; no client credential,
    // lineage, session or arbitrary header. The engine's own response headers stay behind.
    const n = rec.requests.length;
    const res = await chat(
      'forwarding',
      {},
      {
        'x-request-id': legacy,
        'x-svc-session-id': 'sess-fwd',
        'x-session-affinity': 'aff-fwd',
        'x-svc-workbench-run-id': 'run-7',
        'x-svc-task-id': 'task-9',
        'x-arbitrary': 'arbitrary-value',
      },
      'recorded',
    );
    const id = gidOf(res);
    assert.equal(res.status, 200);
    // X-Request-Id is the record's request id (the caller's valid legacy id), never the engine's.
    assert.equal(res.headers.get('x-request-id'), legacy);
    assert.equal(res.headers.get('x-engine-detail'), null);
    await res.text();
    assert.equal(rec.requests.length, n + 1);
    const seen = rec.requests[n]!;
    assert.equal(seen.path, '/v1/chat/completions');
    assert.equal(seen.headers['x-request-id'], id);
    for (const hname of [
      'authorization',
      'x-svc-session-id',
      'x-session-affinity',
      'x-svc-workbench-run-id',
      'x-svc-task-id',
      'x-arbitrary',
      'x-svc-request-id',
    ]) {
      assert.equal(seen.headers[hname], undefined, `${hname} forwarded`);
    }
    const allowed = new Set(['host', 'connection', 'content-type', 'content-length', 'x-request-id']);
    for (const hname of Object.keys(seen.headers)) assert.ok(allowed.has(hname), `unexpected upstream header ${hname}`);
    assert.doesNotMatch(
      seen.rawHeaders.join('\n'),
      new RegExp(`${h.key}|run-7|task-9|sess-fwd|aff-fwd|arbitrary-value`),
    );
    const r = await record(id);
    assert.equal(r.request_id, legacy);
    assert.equal(r.session_id, 'sess-fwd');
    assert.equal(r.workbench_run_id, 'run-7');
    assert.equal(r.task_id, 'task-9');

    // An alias with an upstream key sends that key, never the caller's.
    const keyed = await chat('keyed', {}, {}, 'recorded-keyed');
    assert.equal(keyed.status, 200);
    await keyed.text();
    assert.equal(rec.requests.at(-1)!.headers['authorization'], `Bearer ${UPSTREAM_KEY}`);
    assert.ok(!h.routerOutput().includes(UPSTREAM_KEY), 'the upstream key is not logged');
    assert.ok(!h.routerOutput().includes(h.key), 'the data-plane key is not logged');

    // X-Session-Affinity when X-Svc-Session-Id is absent.
    const aff = await chat('affinity', {}, { 'x-session-affinity': 'aff-only' });
    const affId = gidOf(aff);
    await aff.text();
    assert.equal((await record(affId)).session_id, 'aff-only');
    // Oversized ids are dropped, never truncated into a record.
    const big = await chat('big', {}, { 'x-svc-session-id': 's'.repeat(200), 'x-svc-task-id': 't'.repeat(200) });
    const bigId = gidOf(big);
    await big.text();
    const bigRec = await record(bigId);
    assert.equal('session_id' in bigRec, false);
    assert.equal('task_id' in bigRec, false);
  });

  it('an upstream redirect or bodiless answer is an upstream failure, never passed on or recorded as a success', async () => {
    for (const st of ['302', '204']) {
      const res = await chat(`answer-status=${st}`, {}, {}, 'recorded');
      const id = gidOf(res);
      assert.equal(res.status, 502, st);
      assert.equal(res.headers.get('content-type'), 'application/json');
      assert.equal(res.headers.get('location'), null);
      const text = await res.text();
      assert.ok(!text.includes('UPSTREAM-REDIRECT-BODY'), text);
      const r = await record(id);
      assert.equal(r.outcome, 'error', st);
      assert.equal(r.status_code, 502);
      assert.equal(r.usage.prompt_source, 'estimated', 'the prompt was sent: its estimate stands');
      assert.equal(r.usage.completion_source, 'unknown');
    }
  });

  it('an informational answer before the real one: 103 Early Hints is skipped; an unasked 100 Continue is an upstream failure', async () => {
    const hinted = await chat('answer-early-hints', {}, {}, 'recorded');
    assert.equal(hinted.status, 200);
    assert.equal(hinted.headers.get('link'), null);
    assert.equal(((await hinted.json()) as { object: string }).object, 'chat.completion');
    const r = await record(gidOf(hinted));
    assert.equal(r.outcome, 'success');
    assert.equal(r.status_code, 200);
    // undici, the router's client, refuses a 100 it did not ask for (the router never sends
    // Expect): a fixed 502 and an error record, as docs/reference/router-http.md says.
    const cont = await chat('answer-continue', {}, {}, 'recorded');
    assert.equal(cont.status, 502);
    await cont.text();
    assert.equal((await record(gidOf(cont))).outcome, 'error');
  });

  it('a CR in a header value or an oversized header never reaches the upstream', async () => {
    const n = rec.requests.length;
    const body = JSON.stringify({ model: 'recorded', messages: user('raw') });
    const url = new URL(h.routerUrl);
    const head = (extra: string) =>
      `POST /v1/chat/completions HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nContent-Type: application/json\r\n${extra}Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
    // Each is the fixed invalid-input problem (never node's or Fastify's own JSON), connection closed.
    // Off the data plane, node's own refusal of what it cannot parse is the fixed problem; on an
    // inference path it is the data plane's fixed error object (invalid_headers), as is a
    // request the relay reads and refuses for its framing.
    const problem400 = (answer: string): void => {
      assert.match(answer, /^HTTP\/1\.1 400 /);
      const problem = JSON.stringify(problemFor(ErrorCode.INVALID_INPUT));
      const relayed = [
        ErrorCode.INVALID_FRAMING,
        ErrorCode.INVALID_HEADERS,
        ErrorCode.INVALID_JSON,
        ErrorCode.INVALID_EXPECTATION,
      ].map((c) => JSON.stringify(openAiError(c)));
      if (/\r\ncontent-type: application\/problem\+json; charset=utf-8\r\n/i.test(answer))
        assert.ok(answer.endsWith(problem), answer);
      else {
        assert.match(answer, /\r\ncontent-type: application\/json\r\n/i);
        assert.ok(
          relayed.some((r) => answer.endsWith(r)),
          answer,
        );
      }
    };
    problem400(await raw(url, head('X-Svc-Task-Id: abc\rInjected: yes\r\n')));
    problem400(await raw(url, head(`X-Svc-Session-Id: ${'a'.repeat(20_000)}\r\n`)));
    problem400(await raw(url, head('X-Svc-Workbench-Run-Id: a\u0000b\r\n')));
    problem400(await raw(url, `GARBAGE\r\n\r\n`));
    // A body naming a member twice is refused: the output ceiling and the alias are decided
    // on one copy, and an engine could read the other.
    for (const dup of [
      `{"model":"recorded","max_tokens":100000,"max_tokens":5,"messages":${JSON.stringify(user('dup'))}}`,
      `{"model":"other","model":"recorded","messages":${JSON.stringify(user('dup'))}}`,
      `{"model":"recorded","messages":[{"role":"user","role":"system","content":"dup"}]}`,
      `{"model":"recorded","messages":[{"role":"user","\\u0072ole":"system","content":"dup"}]}`,
      // Prototype poisoning, refused as on every other JSON route.
      `{"model":"recorded","__proto__":{"x":1},"messages":${JSON.stringify(user('dup'))}}`,
      `{"model":"recorded","messages":[{"role":"user","content":"p","\\u005f_proto__":{}}]}`,
      `{"model":"recorded","messages":${JSON.stringify(user('p'))},"tools":[{"constructor":{"prototype":{}}}]}`,
    ]) {
      problem400(
        await raw(
          url,
          `POST /v1/chat/completions HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(dup)}\r\nConnection: close\r\n\r\n${dup}`,
        ),
      );
    }
    // A credential or body type named twice (even with the same value) is refused, not guessed.
    const twoKeys = await raw(url, head(`Authorization: Bearer ${h.key}\r\n`));
    problem400(twoKeys);
    // Also behind more headers than node keeps by default (it dropped those past 1,000).
    const filler = Array.from({ length: 1100 }, (_, i) => `x${i}: a\r\n`).join('');
    problem400(await raw(url, head(`${filler}Authorization: Bearer ${h.key}\r\n`)));
    problem400(await raw(url, head(`${filler}Content-Type: text/plain\r\n`)));
    problem400(
      await raw(
        url,
        `GET /v1/router/status HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\n${filler}Host: other\r\nConnection: close\r\n\r\n`,
      ),
    );
    assert.doesNotMatch(twoKeys, /x-svc-request-id/i, 'two credentials authenticate nobody');
    const twoTypes = await raw(url, head('Content-Type: text/plain\r\n'));
    problem400(twoTypes);
    assert.match(
      twoTypes,
      /\r\nx-svc-request-id: req_[0-9a-f]{32}\r\n/i,
      'authenticated: the answer carries its identifier',
    );
    // HTTP/1.1 without Host: the fixed problem (node's own answer would be a bare 400), with the
    // identifier on an inference route; the read routes too. HTTP/1.0 may omit it.
    const noHost = (t: string): string => t.replace(`Host: ${url.host}\r\n`, '');
    const hostless = await raw(url, noHost(head('')));
    problem400(hostless);
    assert.match(hostless, /\r\nx-svc-request-id: req_[0-9a-f]{32}\r\n/i);
    problem400(await raw(url, `GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n`));
    problem400(
      await raw(
        url,
        `GET /v1/chat/completions HTTP/1.1\r\nAuthorization: Bearer ${h.key}\r\nConnection: close\r\n\r\n`,
      ),
    );
    assert.match(await raw(url, `GET /metrics HTTP/1.0\r\n\r\n`), /^HTTP\/1\.1 200 /);
    // Requests node:http would answer itself: an unknown expectation, CONNECT.
    const expect = await raw(url, head('Expect: something-else\r\n'));
    problem400(expect);
    assert.ok(expect.endsWith(JSON.stringify(openAiError(ErrorCode.INVALID_EXPECTATION))), expect);
    const expectId = /\r\nx-svc-request-id: (req_[0-9a-f]{32})\r\n/i.exec(expect)?.[1];
    assert.ok(expectId, 'authenticated: the answer carries its identifier');
    // ... and leaves its one terminal record (CONTRACT.md, HTTP).
    assert.deepEqual((({ outcome, refusal, model }) => ({ outcome, refusal, model }))(await record(expectId)), {
      outcome: 'rejected',
      refusal: 'invalid_request',
      model: null,
    });
    const expectNoKey = await raw(
      url,
      head('Expect: something-else\r\n').replace(`Authorization: Bearer ${h.key}\r\n`, ''),
    );
    problem400(expectNoKey);
    assert.doesNotMatch(expectNoKey, /x-svc-request-id/i, 'no credential, no identifier');
    problem400(await raw(url, `CONNECT ${url.host} HTTP/1.1\r\nHost: ${url.host}\r\n\r\n`));
    // A wrong method on an inference route, with a valid key: 405, with an identifier.
    const wrong = await raw(
      url,
      `GET /v1/chat/completions HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nConnection: close\r\n\r\n`,
    );
    assert.match(wrong, /^HTTP\/1\.1 405 /);
    assert.match(wrong, /\r\nx-svc-request-id: req_[0-9a-f]{32}\r\n/i);
    // A chunked body with a chunk size that is not hexadecimal: the same fixed 400, not a bare close.
    problem400(
      await raw(
        url,
        `POST /v1/chat/completions HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"mod\r\nzz\r\nel": 1}\r\n0\r\n\r\n`,
      ),
    );
    assert.equal(rec.requests.length, n, 'nothing reached the upstream');
    // The same request without the bad header does reach it.
    const ok = await raw(url, head(''));
    assert.match(ok, /^HTTP\/1\.1 200 /);
    assert.equal(rec.requests.length, n + 1);
  });

  it('active requests show a slow stream in phase streaming; workloads shows the router source', async () => {
    const session = `sess-active-${randomBytes(4).toString('hex')}`;
    const res = await chat('sim:tokens=400 sim:token_delay_ms=20', { stream: true }, { 'x-svc-session-id': session });
    const id = gidOf(res);
    const { reader } = await readEvents(res, 2);
    const active = (await (await h.get('/v1/requests?active=1')).json()) as {
      requests: Record<string, unknown>[];
      truncation: { returned: number; omitted: number };
    };
    const mine = active.requests.find((x) => x['request_id'] === id);
    assert.ok(mine, 'the stream is listed');
    assert.equal(mine['phase'], 'streaming');
    assert.equal(mine['model'], 'chat');
    assert.equal(mine['session_id'], session);
    assert.equal(typeof mine['since_upstream_activity_ms'], 'number');
    assert.equal(active.truncation.returned, active.requests.length);
    assert.equal(active.truncation.omitted, 0);
    // The reader client may look too; without a credential nobody may.
    assert.equal((await h.get('/v1/requests?active=1', h.readerToken)).status, 200);
    await assertProblem(await h.get('/v1/requests?active=1', null), 401, 'unauthenticated');

    const wl = await eventually(
      async () => {
        const r = await h.get('/v1/workloads?owner=router&active_only=true', h.readerToken);
        const body = (await r.json()) as NodeResult;
        return r.status === 200 && body.sources[0]?.records.some((x) => x.state === 'streaming') ? body : undefined;
      },
      3000,
      50,
    );
    assert.ok(checkNodeResult.Check(wl));
    assert.equal(wl.sources.length, 1);
    assert.equal(wl.sources[0]!.owner, 'router');
    assert.doesNotMatch(JSON.stringify(wl), /req_[0-9a-f]{32}/);
    await reader.cancel();
    const r = await eventually(async () => ((await h.lookup(id)).status === 200 ? record(id) : undefined), 2000, 20);
    assert.equal(r.outcome, 'disconnected');
    assert.equal(r.session_id, session);
  });

  it('session history: newest first, at most 50, with exact truncation; malformed queries are 400 problems', async () => {
    const session = `sess-hist-${randomBytes(4).toString('hex')}`;
    const ids: string[] = [];
    for (let i = 0; i < 52; i++) {
      const res = await chat('sim:ttft_ms=0 sim:token_delay_ms=0 sim:tokens=1', {}, { 'x-svc-session-id': session });
      ids.push(gidOf(res));
      await res.text();
    }
    const other = await chat('other session', {}, { 'x-svc-session-id': `${session}-other` });
    await other.text();
    const res = await h.get(`/v1/requests?session_id=${session}&history=1`);
    assert.equal(res.status, 200);
    const body = (await res.json()) as {
      requests: TerminalRecord[];
      truncation: { returned: number; omitted: number | null };
    };
    assert.equal(body.requests.length, 50);
    assert.deepEqual(body.truncation, { returned: 50, omitted: 2 });
    assert.deepEqual(
      body.requests.map((r) => r.request_id),
      ids.slice(2).reverse(),
    );
    for (const r of body.requests) assert.equal(r.session_id, session);
    for (let i = 1; i < body.requests.length; i++)
      assert.ok(body.requests[i - 1]!.finished_at >= body.requests[i]!.finished_at);
    assert.equal(
      (await h.get(`/v1/requests?history=1&session_id=${session}`)).status,
      200,
      'order of members does not matter',
    );

    const bad = [
      '/v1/requests',
      '/v1/requests?',
      '/v1/requests?active=0',
      '/v1/requests?active=true',
      '/v1/requests?active=1&active=1',
      '/v1/requests?active',
      '/v1/requests?active=1&',
      '/v1/requests?&active=1',
      '/v1/requests?ACTIVE=1',
      '/v1/requests?active=1&history=1',
      `/v1/requests?session_id=${session}`,
      `/v1/requests?session_id=${session}&history=0`,
      `/v1/requests?session_id=${session}&history=1&x=1`,
      '/v1/requests?session_id=bad%20id&history=1',
      '/v1/requests?session_id=&history=1',
      '/v1/requests?session_id=%zz&history=1',
      `/v1/requests?session_id=${'s'.repeat(129)}&history=1`,
      `/v1/requests/${ids[0]}?x=1`,
      '/v1/requests/bad%20id',
    ];
    for (const path of bad) await assertProblem(await h.get(path), 400, 'invalid_input');
  });
});
