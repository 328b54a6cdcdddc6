/**
 * Faults between the bus and nats-server that must not take a process down or leave it cut
 * off for good: a subject the server's permissions refuse, and credentials refused during a
 * reconnect (a server restarted with other ones, then fixed). Real nats-server processes.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { LOG_OPTIONS } from '../../src/logger.js';
import { OwnerActor } from '../../src/actors/owner-actor.js';
import { connectNatsBus } from '../../src/streams/nats-bus.js';
import { NodeView } from '../../src/streams/node-view.js';
import { CONTROLLER_OWNERS } from '../../src/streams/query-node.js';
import { resolveFilters } from '../../src/schema/filters.js';
import { eventually } from '../support/processes.js';
import { natsUsers } from '../support/nats-permissions.js';
import { startNatsServer } from '../support/nats-server.js';

const T = { timeout: 60_000 };

function capture() {
  const lines: Array<Record<string, unknown>> = [];
  const logger = pino(
    { ...LOG_OPTIONS, level: 'info' },
    new Writable({
      write(chunk, _enc, cb) {
        lines.push(JSON.parse(String(chunk)) as Record<string, unknown>);
        cb();
      },
    }),
  );
  return { lines, logger };
}

describe('bus faults (real nats-server)', () => {
  it(
    'a subscription the server refuses is logged and tried again; the process and its view keep going',
    T,
    async (t) => {
      const users = natsUsers(['node-a', 'node-b']);
      const server = await startNatsServer({ configText: users.configText });
      t.after(() => server.stop());
      const { lines, logger } = capture();
      // node-a's credentials for node-b's subjects: every subscribe is a permission violation.
      const bus = await connectNatsBus({
        servers: server.url,
        user: 'node-a',
        pass: users.passwords['node-a'],
        logger,
      });
      t.after(() => bus.close());
      const view = new NodeView({ host: 'node-b', bus, staleAfterMs: 30_000, owners: CONTROLLER_OWNERS, logger });
      const actor = new OwnerActor({
        host: 'node-b',
        owner: 'media',
        bus,
        read: () => ({ status: 'complete', records: [] }),
        logger,
      });
      view.start();
      actor.start();
      t.after(() => {
        actor.stop();
        view.stop();
      });
      await eventually(
        () => lines.filter((l) => l['msg'] === 'bus subscription failed; subscribing again').length >= 2,
        5000,
        50,
      );
      const subs = new Set(
        lines.filter((l) => l['msg'] === 'bus subscription failed; subscribing again').map((l) => l['subscription']),
      );
      assert.deepEqual([...subs].sort(), ['observations', 'resync']);
      for (const l of lines)
        assert.ok(!JSON.stringify(l).includes(users.passwords['node-a']!), 'no credential in any line');
      // Nothing observed: the view says so (unavailable), it does not crash or claim an idle node.
      const r = view.query(resolveFilters({}));
      assert.equal(r.status, 'unavailable');
    },
  );

  it('credentials refused during a reconnect do not end the connection: fixed credentials heal it', T, async (t) => {
    const conf = (pass: string) => `authorization {\n  user: svc\n  password: "${pass}"\n}\n`;
    let server = await startNatsServer({ configText: conf('right-pass-1') });
    const port = server.port;
    t.after(() => server.stop());
    const { lines, logger } = capture();
    const bus = await connectNatsBus({ servers: server.url, user: 'svc', pass: 'right-pass-1', logger });
    t.after(() => bus.close());
    const got: string[] = [];
    const sub = bus.subscribe('svc.v1.a.obs.x').subscribe((m) => got.push(new TextDecoder().decode(m.data)));
    t.after(() => sub.unsubscribe());

    await server.stop();
    server = await startNatsServer({ port, configText: conf('other-pass-2') });
    await eventually(() => lines.some((l) => l['msg'] === 'nats server error'), 10_000, 50);
    await new Promise((r) => setTimeout(r, 1500)); // several refused reconnects
    assert.equal(
      lines.filter((l) => l['msg'] === 'nats server error').length,
      1,
      'one line per 10 s, not one per attempt',
    );
    assert.equal(
      lines.filter((l) => l['msg'] === 'nats disconnected').length,
      1,
      'the refused attempts are not each a disconnection line',
    );
    await server.stop();
    server = await startNatsServer({ port, configText: conf('right-pass-1') });

    await eventually(
      async () => {
        try {
          bus.publish('svc.v1.a.obs.x', new TextEncoder().encode('after'));
        } catch {
          return false;
        }
        await new Promise((r) => setTimeout(r, 100));
        return got.includes('after');
      },
      15_000,
      200,
    );
    // The client reports a reconnect per refused attempt, all at once: one line.
    assert.equal(lines.filter((l) => l['msg'] === 'nats reconnected').length, 1);
  });

  it(
    'a served subject the server refuses is served again once the permissions allow it (node_workloads answers without a restart)',
    T,
    async (t) => {
      const users = natsUsers(['node-a', 'node-b']);
      let server = await startNatsServer({ configText: users.configText });
      const port = server.port;
      t.after(() => server.stop());
      const { lines, logger } = capture();
      // node-a's credentials serving node-b's subject: refused until the permissions are fixed.
      const bus = await connectNatsBus({
        servers: server.url,
        user: 'node-a',
        pass: users.passwords['node-a'],
        inboxPrefix: '_INBOX_node-a',
        logger,
      });
      t.after(() => bus.close());
      const service = bus.serve('svc.v1.node-b.workloads', () => new TextEncoder().encode('served'));
      t.after(() => service.stop());
      await eventually(
        () => lines.some((l) => l['msg'] === 'bus service subscription failed; serving again'),
        5000,
        50,
      );
      await server.stop();
      const fixed = users.configText.replace(
        'subscribe: { allow: ["svc.v1.node-a.>"',
        'subscribe: { allow: ["svc.v1.node-a.>", "svc.v1.node-b.>"',
      );
      assert.notEqual(fixed, users.configText);
      server = await startNatsServer({ port, configText: fixed });
      const fleet = await connectNatsBus({
        servers: server.url,
        user: 'fleet',
        pass: users.passwords['fleet'],
        inboxPrefix: '_INBOX_fleet',
      });
      t.after(() => fleet.close());
      await eventually(
        async () => {
          try {
            return (
              new TextDecoder().decode(
                await fleet.request('svc.v1.node-b.workloads', new Uint8Array(0), { timeoutMs: 500 }),
              ) === 'served'
            );
          } catch {
            return false;
          }
        },
        20_000,
        250,
      );
      for (const l of lines)
        assert.ok(!JSON.stringify(l).includes(users.passwords['node-a']!), 'no credential in any line');
    },
  );
});
