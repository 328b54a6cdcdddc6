import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../support/free-port.js';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { natsUsers } from '../support/nats-permissions.js';
import { RawNats } from '../support/raw-nats.js';

const deployFile = (p: string): string => fileURLToPath(new URL(`../../../deploy/${p}`, import.meta.url));

/**
 * Audit: a node user answering a request it sent itself. With `allow_responses`, nats-server
 * lets a user publish on the reply subject of any message it received, its own included: a
 * node's user that publishes on its own subject with reply `svc.v1.<other>.obs.<owner>`, and
 * receives it on a second connection, could then publish on the other host's subjects (forged
 * observations, resyncs). Every shipped configuration is tried with the raw protocol: the
 * forged publish must be refused, while an answer to the fleet's inbox and to the node's own
 * inbox still goes through.
 */
interface Case {
  readonly name: string;
  readonly start: () => Promise<NatsServerHandle>;
  /** The attacking node's user and the host it attacks (both served by this server). */
  readonly attacker: string;
  readonly victim: string;
  readonly pw: Record<string, string>;
}

const pw = (...users: string[]): Record<string, string> =>
  Object.fromEntries(users.map((u) => [u, `p${randomBytes(12).toString('hex')}`]));
const shipped = pw('node-a', 'node-b', 'fleet');
const site = pw('node-c', 'node-d');
const test = natsUsers(['node-a', 'node-b']);

const cases: Case[] = [
  {
    name: 'deploy/nats.conf',
    attacker: 'node-b',
    victim: 'node-a',
    pw: shipped,
    start: () =>
      startNatsServer({
        configFile: deployFile('nats.conf'),
        jetstream: false,
        env: {
          NODE_A_NATS_PASSWORD: shipped['node-a']!,
          NODE_B_NATS_PASSWORD: shipped['node-b']!,
          FLEET_NATS_PASSWORD: shipped.fleet!,
        },
      }),
  },
  {
    name: 'deploy/nats-cluster (users.conf)',
    attacker: 'node-b',
    victim: 'node-a',
    pw: shipped,
    start: async () =>
      startNatsServer({
        configFile: deployFile('nats-cluster/nats-1.conf'),
        jetstream: false,
        env: {
          NODE_A_NATS_PASSWORD: shipped['node-a']!,
          NODE_B_NATS_PASSWORD: shipped['node-b']!,
          FLEET_NATS_PASSWORD: shipped.fleet!,
          NATS_ROUTE_PASSWORD: 'r',
          NATS_ROUTE_2: `nats-route://route:r@127.0.0.1:${await freePort()}`,
          NATS_ROUTE_3: `nats-route://route:r@127.0.0.1:${await freePort()}`,
        },
      }),
  },
  {
    name: 'deploy/nats-leaf/hub.conf',
    attacker: 'node-b',
    victim: 'node-a',
    pw: shipped,
    start: () =>
      startNatsServer({
        configFile: deployFile('nats-leaf/hub.conf'),
        jetstream: false,
        env: {
          NODE_A_NATS_PASSWORD: shipped['node-a']!,
          NODE_B_NATS_PASSWORD: shipped['node-b']!,
          FLEET_NATS_PASSWORD: shipped.fleet!,
          SITE_EAST_LEAF_PASSWORD: 'l',
        },
      }),
  },
  {
    name: 'deploy/nats-leaf/site-east.conf',
    attacker: 'node-d',
    victim: 'node-c',
    pw: site,
    start: async () =>
      startNatsServer({
        configFile: deployFile('nats-leaf/site-east.conf'),
        jetstream: false,
        env: {
          NODE_C_NATS_PASSWORD: site['node-c']!,
          NODE_D_NATS_PASSWORD: site['node-d']!,
          HUB_LEAF_URL: `nats-leaf://site-east:l@127.0.0.1:${await freePort()}`,
        },
      }),
  },
  {
    name: 'test/support/nats-permissions.ts',
    attacker: 'node-b',
    victim: 'node-a',
    pw: test.passwords,
    start: () => startNatsServer({ configText: test.configText, jetstream: false }),
  },
];

for (const c of cases) {
  describe(`audit: a node cannot speak for another host by answering its own request (${c.name})`, () => {
    let nats: NatsServerHandle;
    const open: RawNats[] = [];
    const conn = async (user: string): Promise<RawNats> => {
      const r = await RawNats.open(nats.port, user, c.pw[user]!);
      open.push(r);
      return r;
    };
    before(async () => {
      nats = await c.start();
    });
    after(async () => {
      for (const r of open) r.close();
      await nats?.stop();
    });

    it("the forged publish on the victim's subjects is refused and never delivered", async () => {
      const victim = await conn(c.victim);
      victim.sub(`svc.v1.${c.victim}.>`);
      await victim.flush();
      const asker = await conn(c.attacker);
      const answerer = await conn(c.attacker);
      answerer.sub(`svc.v1.${c.attacker}.trick`);
      await answerer.flush();
      const targets = [`svc.v1.${c.victim}.obs.manifest`, `svc.v1.${c.victim}.resync`, `svc.v1.${c.victim}.workloads`];
      for (const target of targets) {
        asker.pub(`svc.v1.${c.attacker}.trick`, 'x', target);
        await asker.flush();
        await sleep(50);
        assert.equal(answerer.msgs.at(-1)?.reply, target, "the request reached the attacker's second connection");
        answerer.pub(target, '{"forged":true}');
        await answerer.flush();
      }
      await sleep(200);
      assert.deepEqual(
        victim.msgs.map((m) => m.subject),
        [],
        "nothing was published on the victim host's subjects",
      );
      for (const target of targets) {
        assert.ok(
          answerer.errors.some((e) => e.includes(`Permissions Violation for Publish to "${target}"`)),
          `publish on ${target} refused`,
        );
      }
    });

    it("a node still answers a request on its own inbox and on the fleet's inbox", async () => {
      const node = await conn(c.victim);
      node.sub(`svc.v1.${c.victim}.workloads`);
      await node.flush();
      const self = await conn(c.victim);
      self.sub(`_INBOX_${c.victim}.>`);
      await self.flush();
      self.pub(`svc.v1.${c.victim}.workloads`, '{}', `_INBOX_${c.victim}.self.1`);
      await self.flush();
      await sleep(50);
      node.pub(node.msgs.at(-1)!.reply!, '{"answer":1}');
      await node.flush();
      // The fleet's inbox: the fleet's user where this server has one, else the publish alone
      // (a site server carries it to the hub).
      let fleet: RawNats | undefined;
      if (c.pw.fleet !== undefined) {
        fleet = await conn('fleet');
        fleet.sub('_INBOX_fleet.>');
        await fleet.flush();
        fleet.pub(`svc.v1.${c.victim}.workloads`, '{}', '_INBOX_fleet.f.1');
        await fleet.flush();
        await sleep(50);
        assert.equal(node.msgs.at(-1)?.reply, '_INBOX_fleet.f.1');
      }
      node.pub('_INBOX_fleet.f.1', '{"answer":2}');
      await node.flush();
      await sleep(100);
      assert.deepEqual(
        self.msgs.map((m) => m.subject),
        [`_INBOX_${c.victim}.self.1`],
      );
      if (fleet)
        assert.deepEqual(
          fleet.msgs.map((m) => m.subject),
          ['_INBOX_fleet.f.1'],
        );
      assert.deepEqual(node.errors, [], 'no permission refused the answers');
    });
  });
}
