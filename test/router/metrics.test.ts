import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { RouterRegistry } from '../../src/router/records/router-registry.js';
import { RouterMetrics, interTokenSeconds, statusClass } from '../../src/router/metrics.js';
import { rec } from '../support/terminal-records.js';
import { noPromtool, promtoolCheck } from '../support/promtool.js';

/** The value of one series in an exposition (labels as written), or undefined when absent. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('router metrics (unit)', () => {
  it('every configured alias has its series from the start, at 0: requests, tokens, in flight, queue depth', async () => {
    const metrics = new RouterMetrics(new RouterRegistry({ host: 'node-a', bufferSize: 2 }), ['a', 'b'], {
      queueDepth: (alias) => (alias === 'b' ? 3 : 0),
    });
    const text = await metrics.registry.metrics();
    for (const alias of ['a', 'b']) {
      assert.equal(
        sample(
          text,
          `svc_router_requests_total{alias="${alias}",route="chat.completions",outcome="success",status_class="2xx"}`,
        ),
        0,
      );
      assert.equal(sample(text, `svc_router_tokens_total{alias="${alias}",kind="completion",source="upstream"}`), 0);
      assert.equal(sample(text, `svc_router_in_flight{alias="${alias}"}`), 0);
    }
    assert.equal(sample(text, 'svc_router_queue_depth{alias="a"}'), 0);
    assert.equal(sample(text, 'svc_router_queue_depth{alias="b"}'), 3);
    assert.equal(sample(text, 'svc_router_auth_refusals_total{status="401"}'), 0);
  });

  it('a terminal record moves the counters and histograms in seconds; a model outside the configuration is `-`', async () => {
    const metrics = new RouterMetrics(new RouterRegistry({ host: 'node-a', bufferSize: 2 }), ['a']);
    metrics.finished(rec({ model: 'a', latency_ms: 1500, time_to_first_content_ms: 300, admission_wait_ms: 20 }), true);
    metrics.finished(rec({ model: 'a', outcome: 'disconnected', status_code: 0, latency_ms: 50 }), false);
    metrics.finished(rec({ model: 'gone-alias', outcome: 'rejected', status_code: 404 }), false);
    // A refusal before routing names no alias (another change records these with model null).
    metrics.finished({ ...rec({ outcome: 'rejected', status_code: 400 }), model: null }, false);
    const text = await metrics.registry.metrics();
    const count = (labels: string) => sample(text, `svc_router_requests_total{${labels}}`);
    assert.equal(count('alias="a",route="chat.completions",outcome="success",status_class="2xx"'), 1);
    assert.equal(count('alias="a",route="chat.completions",outcome="disconnected",status_class="none"'), 1);
    assert.equal(count('alias="-",route="chat.completions",outcome="rejected",status_class="4xx"'), 2);
    assert.doesNotMatch(text, /gone-alias/);
    // 1.5 s lands in the 2.5 s bucket, not the 1 s one; 0.05 s in the 0.05 s bucket.
    assert.equal(
      sample(text, 'svc_router_request_duration_seconds_bucket{le="1",alias="a",route="chat.completions"}'),
      1,
    );
    assert.equal(
      sample(text, 'svc_router_request_duration_seconds_bucket{le="2.5",alias="a",route="chat.completions"}'),
      2,
    );
    assert.equal(sample(text, 'svc_router_request_duration_seconds_sum{alias="a",route="chat.completions"}'), 1.55);
    // First token only for the streamed answer.
    assert.equal(sample(text, 'svc_router_time_to_first_token_seconds_count{alias="a"}'), 1);
    assert.equal(sample(text, 'svc_router_time_to_first_token_seconds_sum{alias="a"}'), 0.3);
    // (1.5 - 0.3) s over the 3 tokens after the first of 4.
    assert.equal(sample(text, 'svc_router_inter_token_latency_seconds_count{alias="a"}'), 1);
    assert.ok(Math.abs(sample(text, 'svc_router_inter_token_latency_seconds_sum{alias="a"}')! - 0.4) < 1e-9);
    assert.equal(sample(text, 'svc_router_admission_wait_seconds_sum{alias="a"}'), 0.02);
    // Tokens of every record with a known source: 3 records of alias a's and - 's each.
    assert.equal(sample(text, 'svc_router_tokens_total{alias="a",kind="completion",source="upstream"}'), 8);
    assert.equal(sample(text, 'svc_router_tokens_total{alias="-",kind="prompt",source="upstream"}'), 6);
  });

  it('inter-token latency: one per successful streamed answer of two tokens or more', () => {
    const r = rec({ latency_ms: 1000, time_to_first_content_ms: 100 });
    assert.equal(interTokenSeconds(r, true), 0.9 / 3);
    assert.equal(interTokenSeconds(r, false), undefined, 'buffered');
    assert.equal(interTokenSeconds(rec({ outcome: 'error', status_code: 502 }), true), undefined);
    const one = rec({
      usage: { prompt_tokens: 1, completion_tokens: 1, prompt_source: 'upstream', completion_source: 'upstream' },
    });
    assert.equal(interTokenSeconds(one, true), undefined);
    assert.equal(interTokenSeconds(rec({ time_to_first_content_ms: null }), true), undefined);
  });

  it('status classes are bounded', () => {
    assert.deepEqual([0, 101, 200, 302, 429, 503, 700].map(statusClass), [
      'none',
      '1xx',
      '2xx',
      '3xx',
      '4xx',
      '5xx',
      'other',
    ]);
  });

  it('refusals before authentication are counted by status; nothing else', async () => {
    const metrics = new RouterMetrics(new RouterRegistry({ host: 'node-a', bufferSize: 2 }), ['a']);
    metrics.authRefused(401);
    metrics.authRefused(401);
    metrics.authRefused(403);
    metrics.authRefused(418);
    const text = await metrics.registry.metrics();
    assert.equal(sample(text, 'svc_router_auth_refusals_total{status="401"}'), 2);
    assert.equal(sample(text, 'svc_router_auth_refusals_total{status="403"}'), 1);
    assert.doesNotMatch(text, /418/);
  });

  it('the buffer gauges are in seconds, by alias', async () => {
    const reg = new RouterRegistry({ host: 'node-a', bufferSize: 4 });
    const metrics = new RouterMetrics(reg, ['m']);
    const a = { gid: 'req_00000000000000000000000000000001', model: 'm', phase: 'streaming' } as never;
    reg.begin(a);
    reg.finish(a, rec({ latency_ms: 250 }));
    const text = await metrics.registry.metrics();
    assert.equal(sample(text, 'svc_router_buffer_latency_seconds_p50{alias="m"}'), 0.25);
    assert.equal(sample(text, 'svc_router_buffer_records{alias="m"}'), 1);
    assert.doesNotMatch(text, /_ms[_{ ]/);
  });

  it('promtool check metrics reports nothing', { skip: noPromtool }, async () => {
    const reg = new RouterRegistry({ host: 'node-a', bufferSize: 4 });
    const metrics = new RouterMetrics(reg, ['m']);
    metrics.finished(rec({ model: 'm' }), true);
    metrics.authRefused(401);
    assert.deepEqual(promtoolCheck(await metrics.registry.metrics()), { status: 0, output: '' });
  });
});
