import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Counter, Histogram, Registry } from 'prom-client';
import { CounterSeries, HistogramSeries, seriesKey } from '../../src/router/metric-series.js';

const BOUNDS = [0.01, 0.1, 1, 10];
/** Observations on and between the bounds, below the first and above the last. */
const VALUES = [0, 0.005, 0.01, 0.010001, 0.1, 0.5, 1, 9.99, 10, 11, 600, 0.3];
const ALIASES = ['a', 'b"q\\z', '-'];

describe('router metric series', () => {
  it('expose exactly what prom-client Counter and Histogram expose for the same counts and observations', async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const c = new CounterSeries('t_requests_total', 'Requests', ['alias', 'route'], ours);
    const h = new HistogramSeries('t_duration_seconds', 'Duration', ['alias', 'route'], BOUNDS, ours);
    const pc = new Counter({
      name: 't_requests_total',
      help: 'Requests',
      labelNames: ['alias', 'route'],
      registers: [theirs],
    });
    const ph = new Histogram({
      name: 't_duration_seconds',
      help: 'Duration',
      labelNames: ['alias', 'route'],
      buckets: BOUNDS,
      registers: [theirs],
    });
    // A series present from the start at 0, as the router's configured aliases have.
    c.inc(['a', 'embeddings'], 0);
    pc.inc({ alias: 'a', route: 'embeddings' }, 0);
    let i = 0;
    for (const alias of ALIASES)
      for (const v of VALUES) {
        const route = i++ % 2 === 0 ? 'chat' : 'embeddings';
        c.cell(seriesKey(alias, route), [alias, route]).value++;
        c.inc([alias, route], 3);
        pc.labels(alias, route).inc();
        pc.labels(alias, route).inc(3);
        h.observe(h.cell(seriesKey(alias, route), [alias, route]), v);
        ph.labels(alias, route).observe(v);
      }
    const text = await ours.metrics();
    assert.equal(text, await theirs.metrics());
    assert.match(text, /t_duration_seconds_bucket\{le="\+Inf",alias="b\\"q\\\\z",route="chat"\} \d+/);
    // A scrape does not change what the next one shows.
    assert.equal(await ours.metrics(), text);
  });

  it('a value that is not a finite number is not an observation, and a counter never decreases', async () => {
    const reg = new Registry();
    const c = new CounterSeries('t_total', 'T', ['k'], reg);
    const h = new HistogramSeries('t_seconds', 'T', ['k'], BOUNDS, reg);
    const cell = h.cell('x', ['x']);
    for (const v of [Number.NaN, Number.POSITIVE_INFINITY, 0.5]) h.observe(cell, v);
    c.inc(['x'], 2);
    c.inc(['x'], -1);
    c.inc(['x'], Number.NaN);
    const text = await reg.metrics();
    assert.match(text, /^t_seconds_count\{k="x"\} 1$/m);
    assert.match(text, /^t_seconds_sum\{k="x"\} 0.5$/m);
    assert.match(text, /^t_total\{k="x"\} 2$/m);
  });
});
