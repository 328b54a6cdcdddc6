import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ControllerReader, READ_DEADLINE_MS } from '../../src/dashboard/dashboard-reader.js';
import { SCRAPE_DEADLINE_MS, scrapeRouterMetrics } from '../../src/telemetry/router-metrics.js';

/**
 * Peers that answer at once and then drip their body one byte a second: every per-wait
 * timeout is satisfied, so only a deadline for the whole read ends it.
 */
describe('dashboard reads of a peer that drips its answer', { timeout: 60_000 }, () => {
  let server: Server;
  let origin = '';
  const timers = new Set<NodeJS.Timeout>();
  before(async () => {
    server = createServer((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': req.url === '/metrics' ? 'text/plain' : 'application/json' });
      res.write(req.url === '/metrics' ? '# HELP' : '{');
      const t = setInterval(() => res.write(' '), 1_000);
      timers.add(t);
      res.on('close', () => clearInterval(t));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    for (const t of timers) clearInterval(t);
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });

  it('a workload read is a timeout at its deadline (drawn as unavailable), not a read that never ends', async () => {
    const reader = new ControllerReader(origin, 'node-a');
    const t0 = Date.now();
    const r = await reader.read('token', {}, new AbortController().signal);
    const took = Date.now() - t0;
    assert.deepEqual(r, { kind: 'failure', failure: 'timeout' });
    assert.ok(took >= READ_DEADLINE_MS - 100 && took < READ_DEADLINE_MS + 3_000, `${took} ms`);
    // Cut by the caller instead: aborted, not a failure.
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 300);
    assert.deepEqual(await reader.read('token', {}, ac.signal), { kind: 'aborted' });
    await reader.close();
  });

  it('a router metrics scrape is unavailable at its deadline', async () => {
    const t0 = Date.now();
    const r = await scrapeRouterMetrics(`${origin}/metrics`, () => 'now');
    const took = Date.now() - t0;
    assert.deepEqual(r, { status: 'unavailable', read_at: 'now' });
    assert.ok(took >= SCRAPE_DEADLINE_MS - 100 && took < SCRAPE_DEADLINE_MS + 2_000, `${took} ms`);
  });
});
