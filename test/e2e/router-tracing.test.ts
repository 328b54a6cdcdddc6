import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../support/otlp-receiver.js';
import { startRecordingUpstream, type RecordingUpstream } from '../support/recording-upstream.js';
import { startRouterHarness, type RouterHarness } from '../support/router-harness.js';
import { parseTimestamp } from '../../src/schema/primitives.js';
import type { TerminalRecord } from '../../src/schema/terminal-record.js';

/*
 * Traces as a collector receives them: the router process exports over OTLP/HTTP to a real
 * receiver (test/support/otlp-receiver.ts), in both protocols, and every check reads the
 * decoded export, attribute by attribute. The recording upstream shows what the engine got.
 */

const hex = (n: number): string => randomBytes(n).toString('hex');
const SERVER = 2;
const STATUS_ERROR = 2;
const STATUS_UNSET = 0;

/** A client's W3C trace context: its trace, its span (the router's parent), sampled. */
function clientTrace(): { traceId: string; spanId: string; traceparent: string } {
  const traceId = hex(16);
  const spanId = hex(8);
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
}

interface Setup {
  h: RouterHarness;
  rec: RecordingUpstream;
  otlp: OtlpReceiver;
}

async function startSetup(env: Record<string, string>, otlp: OtlpReceiver): Promise<Setup> {
  const rec = await startRecordingUpstream('recorded-model');
  const h = await startRouterHarness({
    models: [{ alias: 'chat' }, { alias: 'rec', upstream: rec.url }],
    routerEnv: env,
  });
  return { h, rec, otlp };
}

function post(s: Setup, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${s.h.routerUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${s.h.key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
}

async function recordOf(s: Setup, res: Response): Promise<TerminalRecord> {
  const r = await s.h.lookup(res.headers.get('x-svc-request-id')!);
  assert.equal(r.status, 200);
  return r.body.request as TerminalRecord;
}

const nsOf = (ts: string): bigint => BigInt(parseTimestamp(ts)) * 1_000_000n;

for (const protocol of ['http/json', 'http/protobuf'] as const) {
  describe(`router traces over OTLP ${protocol}: one span per request, as a collector receives it`, () => {
    let s: Setup;
    before(async () => {
      const otlp = await startOtlpReceiver();
      s = await startSetup(
        {
          OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
          OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
          OTEL_SERVICE_NAME: 'svc-test-router',
          OTEL_BSP_SCHEDULE_DELAY: '50',
        },
        otlp,
      );
    });
    after(async () => {
      await s?.h.stop();
      await s?.rec.close();
      await s?.otlp.close();
    });
    const spanOf = (id: string): Promise<ReceivedSpan> => s.otlp.waitFor((x) => x.attributes['svc.request_id'] === id);

    it('exports with the content type of its protocol', async () => {
      const res = await post(s, { model: 'chat', messages: [{ role: 'user', content: 'hello' }] });
      await res.text();
      await spanOf(res.headers.get('x-request-id')!);
      const want = protocol === 'http/json' ? /^application\/json/ : /^application\/x-protobuf/;
      assert.ok(s.otlp.exports.length > 0);
      for (const e of s.otlp.exports) assert.match(e.contentType, want);
    });

    it("a chat request with a client traceparent: the span continues the client's trace, and the engine got a traceparent of that trace whose parent is the router's span", async () => {
      const c = clientTrace();
      const session = `sess-${hex(6)}`;
      const res = await post(
        s,
        { model: 'rec', messages: [{ role: 'user', content: 'hello' }] },
        { traceparent: c.traceparent, tracestate: 'vendor=abc,other=1', 'x-svc-session-id': session },
      );
      assert.equal(res.status, 200);
      await res.text();
      const record = await recordOf(s, res);
      const span = await spanOf(record.request_id);
      assert.equal(span.traceId, c.traceId);
      assert.equal(span.parentSpanId, c.spanId);
      assert.match(span.spanId, /^[0-9a-f]{16}$/);
      assert.notEqual(span.spanId, c.spanId);
      assert.equal(span.traceState, 'vendor=abc,other=1');
      assert.equal(span.name, 'chat rec');
      assert.equal(span.kind, SERVER);
      assert.equal(span.status.code, STATUS_UNSET);
      assert.equal(span.resource['service.name'], 'svc-test-router');
      assert.equal(span.scope, 'svc-serving');
      // What the engine got: the same trace, the router's span as its parent, the caller's state.
      const sent = s.rec.requests.at(-1)!;
      assert.equal(sent.headers['traceparent'], `00-${c.traceId}-${span.spanId}-01`);
      assert.equal(sent.headers['tracestate'], 'vendor=abc,other=1');
      const recUrl = new URL(s.rec.url);
      assert.deepEqual(span.attributes, {
        'gen_ai.operation.name': 'chat',
        'gen_ai.request.model': 'rec',
        'gen_ai.response.finish_reasons': ['stop'],
        'gen_ai.usage.input_tokens': 3,
        'gen_ai.usage.output_tokens': 2,
        'server.address': recUrl.hostname,
        'server.port': Number(recUrl.port),
        'http.response.status_code': 200,
        'svc.request_id': record.request_id,
        'svc.outcome': 'success',
        'svc.route': 'chat.completions',
        'session.id': session,
      });
      // The span covers the request as its record does; the phases are events within it.
      assert.equal(span.startNs, nsOf(record.started_at));
      assert.equal(span.endNs, nsOf(record.finished_at));
      const names = span.events.map((e) => e.name);
      assert.deepEqual(names, ['admitted', 'dispatched', 'first_content']);
      for (const e of span.events) {
        assert.ok(e.timeNs >= span.startNs && e.timeNs <= span.endNs, `${e.name} within the span`);
        assert.deepEqual(e.attributes, {});
      }
    });

    it('a streamed request without a traceparent: the router begins the trace and the engine gets it', async () => {
      const res = await post(s, { model: 'rec', messages: [{ role: 'user', content: 'hello' }], stream: true });
      assert.equal(res.status, 200);
      await res.text();
      const span = await spanOf(res.headers.get('x-request-id')!);
      assert.equal(span.parentSpanId, '');
      assert.match(span.traceId, /^[0-9a-f]{32}$/);
      assert.equal(s.rec.requests.at(-1)!.headers['traceparent'], `00-${span.traceId}-${span.spanId}-01`);
      assert.equal(s.rec.requests.at(-1)!.headers['tracestate'], undefined);
      assert.deepEqual(span.attributes['gen_ai.response.finish_reasons'], ['stop']);
      assert.ok(span.events.some((e) => e.name === 'first_content'));
    });

    it('a failed request: error status and error.type; a refused one: error.type, not the server error', async () => {
      const c = clientTrace();
      const failed = await post(
        s,
        { model: 'chat', messages: [{ role: 'user', content: 'sim:status=503' }] },
        { traceparent: c.traceparent },
      );
      assert.equal(failed.status, 502);
      await failed.text();
      const fs = await spanOf(failed.headers.get('x-request-id')!);
      assert.equal(fs.traceId, c.traceId);
      assert.equal(fs.status.code, STATUS_ERROR);
      assert.equal(fs.attributes['svc.outcome'], 'error');
      assert.equal(fs.attributes['error.type'], 'error');
      assert.equal(fs.attributes['http.response.status_code'], 502);
      assert.equal(fs.attributes['server.address'], new URL(s.h.simUrl).hostname);

      const refused = await post(s, { model: 'no-such-alias', messages: [] }, { traceparent: c.traceparent });
      assert.equal(refused.status, 404);
      await refused.text();
      const rs = await spanOf(refused.headers.get('x-request-id')!);
      assert.equal(rs.name, 'chat');
      assert.equal(rs.traceId, c.traceId);
      assert.equal(rs.parentSpanId, c.spanId);
      assert.equal(rs.status.code, STATUS_UNSET);
      assert.equal(rs.attributes['error.type'], 'unknown_model');
      assert.equal(rs.attributes['svc.outcome'], 'rejected');
      assert.equal(rs.attributes['gen_ai.request.model'], undefined);
      assert.deepEqual(rs.events, []);
    });

    it('canary: no prompt, answer, header value or key reaches an exported span (only session.id holds the session id)', async () => {
      const prompt = `PROMPT-CANARY-${hex(8)}`;
      const affinity = `AFFINITY-CANARY-${hex(8)}`;
      const run = `RUN-CANARY-${hex(8)}`;
      const session = `SESSION-${hex(8)}`;
      const before = s.otlp.exports.length;
      const ids: string[] = [];
      for (const [model, stream] of [
        ['rec', false],
        ['rec', true],
        ['chat', true],
      ] as const) {
        const res = await post(
          s,
          { model, messages: [{ role: 'user', content: prompt }], stream },
          {
            'x-svc-session-id': session,
            'x-session-affinity': affinity,
            'x-svc-workbench-run-id': run,
            // A key pasted where ids and trace state go: dropped, never exported.
            'x-request-id': s.h.key,
            traceparent: clientTrace().traceparent,
            tracestate: `k=${s.h.key}`,
            'user-agent': `UA-CANARY-${prompt}`,
          },
        );
        assert.equal(res.status, 200);
        await res.text();
        ids.push(res.headers.get('x-svc-request-id')!);
      }
      for (const id of ids) await spanOf(id);
      const exported = Buffer.concat(s.otlp.exports.slice(before).map((e) => e.body));
      for (const secret of [prompt, affinity, run, s.h.key, 'hi there', 'UA-CANARY'])
        assert.equal(exported.includes(secret), false, `an export holds ${secret.slice(0, 12)}...`);
      const mine = s.otlp.spans.filter((x) => ids.includes(String(x.attributes['svc.request_id'])));
      assert.equal(mine.length, 3);
      for (const x of mine) {
        assert.equal(x.attributes['session.id'], session);
        assert.equal(x.traceState, '');
        // The session id is in session.id and nowhere else.
        const text = JSON.stringify(x, (_k, v) => (typeof v === 'bigint' ? String(v) : v));
        assert.equal(text.split(session).length - 1, 1);
      }
      // The key went neither to the engine (as trace state) nor anywhere else.
      for (const r of s.rec.requests) assert.equal(JSON.stringify(r.headers).includes(s.h.key), false);
    });
  });
}

describe('router traces not asked for: nothing exported, the trace context still forwarded', () => {
  let s: Setup;
  before(async () => {
    // Listening where the SDK would export by default (localhost:4318).
    const otlp = await startOtlpReceiver({ port: 4318, host: '::' });
    s = await startSetup({ OTEL_SERVICE_NAME: 'svc-test-router', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }, otlp);
  });
  after(async () => {
    await s?.h.stop();
    await s?.rec.close();
    await s?.otlp.close();
  });

  it("the engine gets the caller's traceparent and tracestate unchanged; a receiver at the default endpoint gets nothing", async () => {
    const c = clientTrace();
    const res = await post(
      s,
      { model: 'rec', messages: [{ role: 'user', content: 'hello' }] },
      { traceparent: c.traceparent, tracestate: 'vendor=abc' },
    );
    assert.equal(res.status, 200);
    await res.text();
    const sent = s.rec.requests.at(-1)!;
    assert.equal(sent.headers['traceparent'], c.traceparent);
    assert.equal(sent.headers['tracestate'], 'vendor=abc');
    // Without a traceparent, or with a malformed one, nothing is sent on.
    for (const tp of [
      undefined,
      `00-${'0'.repeat(32)}-${hex(8)}-01`,
      'garbage',
      `00-${hex(16).toUpperCase()}-${hex(8)}-01`,
    ]) {
      const r = await post(
        s,
        { model: 'rec', messages: [{ role: 'user', content: 'hello' }] },
        tp === undefined ? {} : { traceparent: tp, tracestate: 'vendor=abc' },
      );
      assert.equal(r.status, 200);
      await r.text();
      assert.equal(s.rec.requests.at(-1)!.headers['traceparent'], undefined, `traceparent ${tp}`);
      assert.equal(s.rec.requests.at(-1)!.headers['tracestate'], undefined);
    }
    // A key pasted as a member's key (or as the tenant of a multi-tenant key), not its value:
    // the whole tracestate is dropped, as for a key in a value.
    for (const ts of [`${s.h.key}=1`, `vendor=abc,${s.h.key}=1`, `${s.h.key}@vendor=1`]) {
      const r = await post(
        s,
        { model: 'rec', messages: [{ role: 'user', content: 'hello' }] },
        { traceparent: c.traceparent, tracestate: ts },
      );
      assert.equal(r.status, 200);
      await r.text();
      assert.equal(s.rec.requests.at(-1)!.headers['traceparent'], c.traceparent);
      assert.equal(s.rec.requests.at(-1)!.headers['tracestate'], undefined, 'a key as a tracestate member key');
    }
    // A started SDK would export its spans by the time it shuts down with the router.
    await sleep(1000);
    await s.h.stopRouter();
    await sleep(500);
    assert.equal(s.otlp.exports.length, 0);
    assert.equal(/traces exported/.test(s.h.routerOutput()), false);
  });
});
