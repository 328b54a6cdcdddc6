/**
 * Request/reply over the bus's own inbox multiplexing (src/streams/nats-requests.ts), against
 * a real nats-server: answers reach their own request when many are in flight, the documented
 * per-user inboxes work, a publish the permissions refuse fails at once, a late answer is
 * dropped, and close fails what is still waiting.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BusClosedError, BusNoRespondersError, BusTimeoutError, ForbiddenError } from '../../src/errors.js';
import { connectNatsBus } from '../../src/streams/nats-bus.js';
import { natsUsers } from '../support/nats-permissions.js';
import { startNatsServer } from '../support/nats-server.js';

const T = { timeout: 60_000 };
const enc = new TextEncoder();
const dec = new TextDecoder();

describe('bus requests (real nats-server)', () => {
  it('a thousand requests in flight at once each get their own answer', T, async (t) => {
    const server = await startNatsServer();
    t.after(() => server.stop());
    const nodes = await connectNatsBus({ servers: server.url });
    const fleet = await connectNatsBus({ servers: server.url });
    t.after(async () => {
      await fleet.close();
      await nodes.close();
    });
    // Answers in a scrambled order: some at once, some after a while.
    for (let h = 0; h < 50; h++)
      nodes.serve(`svc.v1.h${h}.workloads`, (data) =>
        h % 3 === 0
          ? new Promise((r) => setTimeout(() => r(enc.encode(`h${h}:${dec.decode(data)}`)), 20))
          : enc.encode(`h${h}:${dec.decode(data)}`),
      );
    await nodes.flush();
    const asks = Array.from({ length: 1000 }, (_, i) => ({ h: i % 50, q: String(i) }));
    const answers = await Promise.all(
      asks.map((a) => fleet.request(`svc.v1.h${a.h}.workloads`, enc.encode(a.q), { timeoutMs: 10_000 })),
    );
    answers.forEach((a, i) => assert.equal(dec.decode(a), `h${asks[i]!.h}:${asks[i]!.q}`));
  });

  it(
    'with the documented per-user inboxes: answers arrive; a refused publish fails at once, not at its timeout',
    T,
    async (t) => {
      const users = natsUsers(['node-a']);
      const server = await startNatsServer({ configText: users.configText });
      t.after(() => server.stop());
      const node = await connectNatsBus({
        servers: server.url,
        user: 'node-a',
        pass: users.passwords['node-a'],
        inboxPrefix: '_INBOX_node-a',
      });
      const fleet = await connectNatsBus({
        servers: server.url,
        user: 'fleet',
        pass: users.passwords['fleet'],
        inboxPrefix: '_INBOX_fleet',
      });
      t.after(async () => {
        await fleet.close();
        await node.close();
      });
      node.serve('svc.v1.node-a.workloads', () => enc.encode('ok'));
      await node.flush();
      assert.equal(
        dec.decode(await fleet.request('svc.v1.node-a.workloads', enc.encode('{}'), { timeoutMs: 5_000 })),
        'ok',
      );
      // The fleet's user may not publish observations.
      const started = Date.now();
      await assert.rejects(
        fleet.request('svc.v1.node-a.obs.media', enc.encode('{}'), { timeoutMs: 10_000 }),
        ForbiddenError,
      );
      assert.ok(Date.now() - started < 5_000, 'refused by the server, not timed out');
      // And the bus goes on answering.
      assert.equal(
        dec.decode(await fleet.request('svc.v1.node-a.workloads', enc.encode('{}'), { timeoutMs: 5_000 })),
        'ok',
      );
    },
  );

  it('an answer after the timeout is dropped; no responders, timeouts and close are told apart', T, async (t) => {
    const server = await startNatsServer();
    t.after(() => server.stop());
    const node = await connectNatsBus({ servers: server.url });
    const fleet = await connectNatsBus({ servers: server.url });
    t.after(() => node.close());
    node.serve('svc.v1.a.slow', () => new Promise((r) => setTimeout(() => r(enc.encode('late')), 300)));
    node.serve('svc.v1.a.never', () => new Promise(() => undefined));
    node.serve('svc.v1.a.fast', () => enc.encode('fast'));
    await node.flush();
    await assert.rejects(fleet.request('svc.v1.a.slow', enc.encode(''), { timeoutMs: 50 }), BusTimeoutError);
    await new Promise((r) => setTimeout(r, 400)); // the late answer arrives, and goes nowhere
    assert.equal(dec.decode(await fleet.request('svc.v1.a.fast', enc.encode(''), { timeoutMs: 5_000 })), 'fast');
    await assert.rejects(fleet.request('svc.v1.a.nobody', enc.encode(''), { timeoutMs: 5_000 }), BusNoRespondersError);
    const waiting = fleet.request('svc.v1.a.never', enc.encode(''), { timeoutMs: 30_000 });
    await fleet.flush();
    await fleet.close();
    await assert.rejects(waiting, BusClosedError);
  });
});
