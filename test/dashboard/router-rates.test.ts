import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  MAX_ALIASES,
  RouterRates,
  bucketIncrease,
  counterIncrease,
  histogramQuantile,
  parseRouterScrape,
} from '../../src/telemetry/router-rates.js';

type AliasRatesOf = { req_per_s: number | null };

const buckets = (entries: [number, number][]) => new Map(entries);

/** Prometheus text as prom-client writes the router's series (le first, two aliases). */
function exposition(o: {
  ok: number;
  err: number;
  timeout: number;
  ttft: [number, number][];
  dur: [number, number][];
}): string {
  const lines = [
    '# HELP svc_router_requests_total Requests that got an id, counted at their terminal record',
    '# TYPE svc_router_requests_total counter',
    `svc_router_requests_total{alias="a",route="chat",outcome="success",status_class="2xx"} ${o.ok}`,
    `svc_router_requests_total{alias="b",route="chat",outcome="error",status_class="5xx"} ${o.err}`,
    `svc_router_requests_total{alias="b",route="chat",outcome="timeout",status_class="none"} ${o.timeout}`,
  ];
  for (const [name, rows] of [
    ['svc_router_time_to_first_token_seconds', o.ttft],
    ['svc_router_request_duration_seconds', o.dur],
  ] as const)
    for (const [le, c] of rows) {
      const bound = le === Infinity ? '+Inf' : String(le);
      // Split over two aliases: the panel sums them, as sum by (le) does.
      lines.push(`${name}_bucket{le="${bound}",alias="a",route="chat"} ${Math.floor(c / 2)}`);
      lines.push(`${name}_bucket{le="${bound}",alias="b",route="chat"} ${c - Math.floor(c / 2)}`);
    }
  lines.push('svc_router_in_flight{alias="a"} 3');
  return lines.join('\n');
}

describe('router panel: quantiles as histogram_quantile computes them', () => {
  it('interpolates linearly inside the bucket that holds the rank', () => {
    const b = buckets([
      [0.1, 10],
      [0.5, 20],
      [1, 40],
      [Infinity, 40],
    ]);
    assert.equal(histogramQuantile(0.5, b), 0.5);
    assert.equal(histogramQuantile(0.75, b), 0.75);
    assert.equal(histogramQuantile(0.25, b), 0.1, 'a rank at the top of a bucket is its bound');
    assert.ok(Math.abs(histogramQuantile(0.375, b) - 0.3) < 1e-12, 'half way through (0.1, 0.5]');
  });
  it('the first bucket starts at 0; a rank in +Inf is the highest finite bound', () => {
    assert.equal(
      histogramQuantile(
        0.5,
        buckets([
          [1, 10],
          [Infinity, 10],
        ]),
      ),
      0.5,
    );
    assert.equal(
      histogramQuantile(
        0.9,
        buckets([
          [1, 5],
          [Infinity, 10],
        ]),
      ),
      1,
    );
  });
  it('no observations, one bucket or no +Inf bucket: NaN (shown as no data, never 0)', () => {
    assert.ok(
      Number.isNaN(
        histogramQuantile(
          0.5,
          buckets([
            [1, 0],
            [Infinity, 0],
          ]),
        ),
      ),
    );
    assert.ok(Number.isNaN(histogramQuantile(0.5, buckets([[Infinity, 4]]))));
    assert.ok(
      Number.isNaN(
        histogramQuantile(
          0.5,
          buckets([
            [1, 4],
            [2, 4],
          ]),
        ),
      ),
    );
  });
});

describe('router panel: counters and buckets across a restart', () => {
  it('a counter that went down was reset: its growth is its new value, never negative', () => {
    assert.equal(counterIncrease(5, 8), 3);
    assert.equal(counterIncrease(100, 4), 4);
  });
  it('a histogram with any bucket lower than before counts every bucket from zero', () => {
    const before = buckets([
      [1, 10],
      [Infinity, 12],
    ]);
    assert.deepEqual(
      [
        ...bucketIncrease(
          before,
          buckets([
            [1, 13],
            [Infinity, 16],
          ]),
        ),
      ],
      [
        [1, 3],
        [Infinity, 4],
      ],
    );
    assert.deepEqual(
      [
        ...bucketIncrease(
          before,
          buckets([
            [1, 1],
            [Infinity, 2],
          ]),
        ),
      ],
      [
        [1, 1],
        [Infinity, 2],
      ],
    );
  });
});

describe('router panel: rates over a sliding minute from successive scrapes', () => {
  it('parses the exposition, summed over aliases and routes; errors are error and timeout outcomes', () => {
    const s = parseRouterScrape(
      exposition({
        ok: 7,
        err: 2,
        timeout: 1,
        ttft: [
          [0.1, 4],
          [Infinity, 6],
        ],
        dur: [
          [1, 3],
          [Infinity, 9],
        ],
      }),
      1000,
    );
    assert.equal(s.requests, 10);
    assert.equal(s.errors, 3);
    assert.deepEqual(
      [...s.firstToken],
      [
        [0.1, 4],
        [Infinity, 6],
      ],
    );
    assert.deepEqual(
      [...s.duration],
      [
        [1, 3],
        [Infinity, 9],
      ],
    );
  });

  it('rates and quantiles of the window, a restart never negative, old steps leave the window', () => {
    const r = new RouterRates(60_000, 15 * 60_000);
    const at = (t: number, ok: number, err: number, ttft: [number, number][]) =>
      r.add(parseRouterScrape(exposition({ ok, err, timeout: 0, ttft, dur: ttft }), t));
    assert.equal(
      at(0, 0, 0, [
        [0.1, 0],
        [1, 0],
        [Infinity, 0],
      ]),
      undefined,
      'one scrape is no rate',
    );
    const p1 = at(3_000, 6, 0, [
      [0.1, 2],
      [1, 6],
      [Infinity, 6],
    ])!;
    assert.equal(p1.req_per_s, 2);
    assert.equal(p1.err_per_s, 0);
    // 6 observations: the median's rank 3 is 1 of the 4 in (0.1, 1].
    assert.equal(p1.ttft_p50_ms, 325);
    const p2 = at(6_000, 9, 3, [
      [0.1, 2],
      [1, 12],
      [Infinity, 12],
    ])!;
    assert.equal(p2.req_per_s, 2, '12 requests in 6 s');
    assert.equal(p2.err_per_s, 0.5);
    // The router restarted: every counter is lower. The growth is the new value.
    const p3 = at(9_000, 3, 0, [
      [0.1, 3],
      [1, 3],
      [Infinity, 3],
    ])!;
    assert.equal(p3.req_per_s, 1.6667, '15 requests in 9 s, to 1/10,000 per second');
    assert.ok(p3.err_per_s! >= 0);
    // Two minutes later only the last step is in the window.
    const p4 = at(129_000, 3, 0, [
      [0.1, 3],
      [1, 3],
      [Infinity, 3],
    ])!;
    assert.equal(p4.req_per_s, 0);
    assert.equal(p4.ttft_p50_ms, null, 'no observation in the window: no data, not 0');
    assert.equal(r.series().length, 4);
  });

  it('keeps 15 minutes of points; a failed scrape starts a new window', () => {
    const r = new RouterRates(60_000, 15 * 60_000);
    const scrape = (t: number, n: number) =>
      parseRouterScrape(exposition({ ok: n, err: 0, timeout: 0, ttft: [], dur: [] }), t);
    for (let i = 0; i <= 400; i++) r.add(scrape(i * 3_000, i));
    assert.equal(r.series().length, 300, '15 minutes of 3 s points');
    r.gap();
    assert.equal(r.add(scrape(1_300_000, 1000)), undefined, 'no rate across the gap');
    assert.equal(r.add(scrape(1_303_000, 1003))!.req_per_s, 1);
  });
});

describe('router panel: a series per alias (decision 0036)', () => {
  it('parses each alias on its own, summed over its routes, besides the sum of all', () => {
    const s = parseRouterScrape(
      exposition({
        ok: 7,
        err: 2,
        timeout: 1,
        ttft: [
          [0.1, 4],
          [Infinity, 6],
        ],
        dur: [
          [1, 3],
          [Infinity, 9],
        ],
      }),
      1000,
    );
    assert.deepEqual([...s.aliases.keys()], ['a', 'b']);
    const a = s.aliases.get('a')!;
    const b = s.aliases.get('b')!;
    assert.deepEqual([a.requests, a.errors, b.requests, b.errors], [7, 0, 3, 3]);
    assert.deepEqual(
      [...a.firstToken],
      [
        [0.1, 2],
        [Infinity, 3],
      ],
    );
    assert.deepEqual(
      [...b.duration],
      [
        [1, 2],
        [Infinity, 5],
      ],
    );
    assert.equal(s.aliasesOmitted, 0);
  });

  it("each alias's rates and quantiles come from its own window; the sum's are those of all", () => {
    const r = new RouterRates(60_000, 15 * 60_000);
    const scrape = (t: number, a: number, b: number, aSlow: number) =>
      parseRouterScrape(
        [
          `svc_router_requests_total{alias="fast",route="chat",outcome="success",status_class="2xx"} ${a}`,
          `svc_router_requests_total{alias="slow",route="chat",outcome="timeout",status_class="none"} ${b}`,
          `svc_router_request_duration_seconds_bucket{alias="fast",route="chat",le="0.1"} ${a}`,
          `svc_router_request_duration_seconds_bucket{alias="fast",route="chat",le="10"} ${a}`,
          `svc_router_request_duration_seconds_bucket{alias="fast",route="chat",le="+Inf"} ${a}`,
          `svc_router_request_duration_seconds_bucket{alias="slow",route="chat",le="0.1"} 0`,
          `svc_router_request_duration_seconds_bucket{alias="slow",route="chat",le="10"} ${aSlow}`,
          `svc_router_request_duration_seconds_bucket{alias="slow",route="chat",le="+Inf"} ${aSlow}`,
        ].join('\n'),
        t,
      );
    assert.equal(r.add(scrape(0, 0, 0, 0)), undefined);
    const p = r.add(scrape(10_000, 20, 5, 5))!;
    assert.equal(p.req_per_s, 2.5, 'all aliases: 25 requests in 10 s');
    assert.equal(p.err_per_s, 0.5);
    assert.deepEqual(Object.keys(p.by_alias), ['fast', 'slow']);
    const fast = p.by_alias['fast']!;
    const slow = p.by_alias['slow']!;
    assert.equal(fast.req_per_s, 2);
    assert.equal(fast.err_per_s, 0);
    assert.equal(slow.req_per_s, 0.5);
    assert.equal(slow.err_per_s, 0.5, 'the timeouts are the slow alias’s own');
    assert.equal(fast.dur_p50_ms, 50, 'every fast request under 100 ms');
    assert.equal(slow.dur_p50_ms, 5050, 'every slow one between 0.1 and 10 s');
    assert.equal(fast.ttft_p50_ms, null, 'no first-token observations: no data, not 0');
    assert.ok(p.dur_p95_ms! > fast.dur_p95_ms!, 'the sum mixes both');
  });

  it('an alias that appears later starts its own window; one that goes is dropped, and back it starts afresh', () => {
    const r = new RouterRates(60_000, 15 * 60_000);
    const line = (alias: string, n: number) =>
      `svc_router_requests_total{alias="${alias}",route="chat",outcome="success",status_class="2xx"} ${n}`;
    const at = (t: number, lines: string[]) => r.add(parseRouterScrape(lines.join('\n'), t));
    at(0, [line('a', 0)]);
    assert.deepEqual(Object.keys(at(1_000, [line('a', 1)])!.by_alias), ['a']);
    assert.deepEqual(
      Object.keys(at(2_000, [line('a', 2), line('b', 10)])!.by_alias),
      ['a'],
      'one scrape of b: no rate',
    );
    assert.equal(at(3_000, [line('a', 3), line('b', 12)])!.by_alias['b']!.req_per_s, 2);
    assert.deepEqual(Object.keys(at(4_000, [line('a', 4)])!.by_alias), ['a']);
    const back = at(5_000, [line('a', 5), line('b', 100)])!;
    assert.equal(back.by_alias['b'], undefined, 'b came back: its growth across the gap is not a rate');
  });

  it(`charts at most ${MAX_ALIASES} aliases one by one; the others count in the sum and are said to be left out`, () => {
    const lines = (n: number) =>
      Array.from(
        { length: MAX_ALIASES + 3 },
        (_, i) => `svc_router_requests_total{alias="m${i}",route="chat",outcome="success",status_class="2xx"} ${n}`,
      ).join('\n');
    const r = new RouterRates(60_000, 15 * 60_000);
    r.add(parseRouterScrape(lines(0), 0));
    const p = r.add(parseRouterScrape(lines(1), 1_000))!;
    assert.equal(Object.keys(p.by_alias).length, MAX_ALIASES);
    assert.equal(p.aliases_omitted, 3);
    assert.equal(p.req_per_s, MAX_ALIASES + 3, 'every alias counts in the sum');
  });

  it('an alias label is unescaped and kept to printable characters; the point survives JSON as sent', () => {
    const text = [
      'svc_router_requests_total{alias="we\\"ird\\\\one",route="chat",outcome="success",status_class="2xx"} 1',
      'svc_router_requests_total{alias="__proto__",route="chat",outcome="success",status_class="2xx"} 1',
    ].join('\n');
    const s = parseRouterScrape(text, 0);
    assert.deepEqual([...s.aliases.keys()], ['we"ird\\one', '__proto__']);
    const r = new RouterRates(60_000, 15 * 60_000);
    r.add(s);
    const p = r.add(parseRouterScrape(text.replaceAll('} 1', '} 3'), 1_000))!;
    const sent = JSON.parse(JSON.stringify(p)) as typeof p;
    assert.equal(Object.hasOwn(sent.by_alias, '__proto__'), true);
    const own = Object.getOwnPropertyDescriptor(sent.by_alias, '__proto__')!.value as AliasRatesOf;
    assert.equal(own.req_per_s, 2);
  });
});
