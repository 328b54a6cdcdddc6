import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { TerminalRecord } from '../../src/schema/terminal-record.js';
import { statusClass } from '../../src/router/metrics.js';
import { eventually } from '../support/processes.js';
import { startRouterHarness, type RouterHarness } from '../support/router-harness.js';
import { noPromtool, promtoolCheck } from '../support/promtool.js';

/** Every sample of `name` in an exposition: its label text and value. */
function samples(text: string, name: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)\{([^}]*)\} (\S+)$/.exec(line);
    if (m && m[1] === name) out.set(m[2]!, Number(m[3]));
  }
  return out;
}

describe('router metrics end to end: counters agree with the terminal records', () => {
  let h: RouterHarness;
  before(async () => {
    h = await startRouterHarness({
      models: [{ alias: 'chat' }, { alias: 'single', max_concurrency: 1, max_queue: 0 }],
      sim: { tokens: 6, tokenDelayMs: 2 },
    });
  });
  after(() => h?.stop());

  const post = (body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal) =>
    fetch(`${h.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal: signal ?? AbortSignal.timeout(10_000),
    });
  const chat = (content: string, extra: Record<string, unknown> = {}, model = 'chat') =>
    post({ model, messages: [{ role: 'user', content }], ...extra });
  const scrape = async () => {
    const res = await h.get('/metrics', null);
    assert.equal(res.status, 200);
    return res.text();
  };

  it('a mix of outcomes: each series of requests, tokens and durations equals what the records say', async () => {
    const ids: string[] = [];
    const take = async (p: Promise<Response>): Promise<void> => {
      const res = await p;
      const id = res.headers.get('x-svc-request-id');
      if (id !== null) ids.push(id);
      await res.text().catch(() => undefined);
    };
    await Promise.all([
      take(chat('plain')),
      take(chat('streamed', { stream: true, stream_options: { include_usage: true } })),
      take(chat('sim:reject=context')),
      take(chat('sim:status=503')),
      take(chat('sim:fail_after=1', { stream: true })),
      take(chat('sim:error_after=2', { stream: true })),
      take(chat('no alias', {}, 'no-such-alias')),
    ]);
    // Admission: `single` takes one request and queues none; a second one is refused (429).
    const slow = chat('sim:ttft_ms=600', {}, 'single');
    await eventually(
      async () =>
        (
          (await (await h.get('/v1/requests?active=1')).json()) as { requests: { model: string; phase: string }[] }
        ).requests.some((x) => x.model === 'single' && x.phase === 'dispatched'),
      3000,
      10,
    );
    const refused = await chat('refused', {}, 'single');
    assert.equal(refused.status, 429);
    await take(Promise.resolve(refused));
    await take(slow);
    // A client that leaves mid-stream.
    const ac = new AbortController();
    const leaving = await post(
      { model: 'chat', messages: [{ role: 'user', content: 'sim:tokens=200 sim:token_delay_ms=20' }], stream: true },
      {},
      ac.signal,
    );
    ids.push(leaving.headers.get('x-svc-request-id')!);
    const reader = leaving.body!.getReader();
    await reader.read();
    ac.abort();
    // Refused before authentication: no id, no record; counted apart.
    for (const authorization of ['', `Bearer ${h.readerToken}`])
      await take(
        fetch(`${h.routerUrl}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(authorization ? { authorization } : {}) },
          body: JSON.stringify({ model: 'chat', messages: [] }),
        }),
      );
    await h.idle();

    const records: TerminalRecord[] = [];
    for (const id of ids) {
      const r = await eventually(async () => {
        const got = await h.lookup(id);
        // A request answered before routing may have no record (it is then in no counter either).
        return got.status === 200 || got.status === 404 ? got : undefined;
      }, 3000);
      if (r.status === 200) records.push(r.body.request as TerminalRecord);
    }
    const outcomes = new Set(records.map((r) => r.outcome));
    for (const o of ['success', 'error', 'rejected', 'disconnected']) assert.ok(outcomes.has(o as never), o);
    assert.ok(records.some((r) => r.status_code === 429));
    assert.ok(
      records.some((r) => r.outcome === 'rejected' && r.status_code === 400),
      'context rejection',
    );

    const text = await scrape();
    // svc_router_requests_total: every series with a count is one the records have, with that count.
    const expected = new Map<string, number>();
    for (const r of records) {
      const alias = r.model === 'chat' || r.model === 'single' ? r.model : '-';
      const k = `alias="${alias}",route="${r.route}",outcome="${r.outcome}",status_class="${statusClass(r.status_code)}"`;
      expected.set(k, (expected.get(k) ?? 0) + 1);
    }
    const counted = new Map([...samples(text, 'svc_router_requests_total')].filter(([, v]) => v > 0));
    assert.deepEqual(counted, expected);
    // Tokens: the records' known counts, by alias, kind and source.
    const tokens = new Map<string, number>();
    for (const r of records)
      for (const kind of ['prompt', 'completion'] as const) {
        const n = r.usage[`${kind}_tokens`];
        const source = r.usage[`${kind}_source`];
        if (n === null || n === 0 || source === 'unknown') continue;
        const k = `alias="${r.model}",kind="${kind}",source="${source}"`;
        tokens.set(k, (tokens.get(k) ?? 0) + n);
      }
    assert.deepEqual(new Map([...samples(text, 'svc_router_tokens_total')].filter(([, v]) => v > 0)), tokens);
    // Durations: one observation per record with a measured latency, summed in seconds.
    const durations = samples(text, 'svc_router_request_duration_seconds_count');
    const sums = samples(text, 'svc_router_request_duration_seconds_sum');
    for (const alias of ['chat', 'single']) {
      const mine = records.filter((r) => r.model === alias && r.latency_ms !== null);
      const key = `alias="${alias}",route="chat.completions"`;
      assert.equal(durations.get(key), mine.length, key);
      const sum = mine.reduce((s, r) => s + r.latency_ms!, 0) / 1000;
      assert.ok(Math.abs(sums.get(key)! - sum) < 0.005 * mine.length, `${sums.get(key)} vs ${sum}`);
    }
    // A streamed success has a first token and an inter-token latency.
    assert.ok(samples(text, 'svc_router_time_to_first_token_seconds_count').get('alias="chat"')! >= 1);
    assert.ok(samples(text, 'svc_router_inter_token_latency_seconds_count').get('alias="chat"')! >= 1);
    assert.ok(samples(text, 'svc_router_admission_wait_seconds_count').get('alias="single"')! >= 2);
    const refusals = samples(text, 'svc_router_auth_refusals_total');
    assert.equal(refusals.get('status="401"'), 1);
    assert.equal(refusals.get('status="403"'), 1);
    assert.equal(samples(text, 'svc_router_in_flight').get('alias="single"'), 0);
    assert.equal(samples(text, 'svc_router_queue_depth').get('alias="chat"'), 0);
  });

  it('no caller string reaches a label: a secret-looking model, session id and key are absent from the scrape', async () => {
    const canary = `sk-canary${randomBytes(8).toString('hex')}`;
    await (await post({ model: `${canary}-model`, messages: [] }, { 'x-svc-session-id': `${canary}-session` })).text();
    await (await chat('hi', {}, 'chat')).text();
    await (
      await post({ model: 'chat', messages: [{ role: 'user', content: 'x' }] }, { 'x-svc-session-id': `${canary}-s2` })
    ).text();
    await (
      await fetch(`${h.routerUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${canary}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: `${canary}-m`, messages: [] }),
      })
    ).text();
    await h.idle();
    const text = await scrape();
    assert.ok(!text.includes('canary'), 'a caller string in the scrape');
    assert.doesNotMatch(text, /req_[0-9a-f]{32}/);
    for (const line of text.split('\n').filter((l) => l.includes('alias="')))
      assert.match(line, /alias="(chat|single|-)"/, line);
  });

  it('promtool check metrics reports nothing on the live scrape', { skip: noPromtool }, async () => {
    assert.deepEqual(promtoolCheck(await scrape()), { status: 0, output: '' });
  });
});
