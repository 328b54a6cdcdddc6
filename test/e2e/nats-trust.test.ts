import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../support/free-port.js';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { writeTestPolicy } from '../support/policy.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { RawNats, bytesSentByUser } from '../support/raw-nats.js';
import { rec } from '../support/records.js';

const SHIPPED_CONF = fileURLToPath(new URL('../../../deploy/nats.conf', import.meta.url));
const ACTOR = fileURLToPath(new URL('../support/fixture-actor.js', import.meta.url));
const WINDOW_RECORDS = 300;

/**
 * The request/reply trust boundary (CONTRACT.md, revision 2), tried from outside with the raw
 * NATS protocol against a real nats-server running the shipped deploy/nats.conf: the least
 * privileged `fleet` user and a node user attack the other hosts. Every attempt must be
 * refused or answered nowhere, and the traffic it causes is counted in bytes.
 */
describe('NATS trust boundary under attack (raw protocol, shipped permissions)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-trust-'));
  const policy = writeTestPolicy(dir);
  const pw = {
    'node-a': `p${randomBytes(12).toString('hex')}`,
    'node-b': `p${randomBytes(12).toString('hex')}`,
    fleet: `p${randomBytes(12).toString('hex')}`,
  };
  let nats: NatsServerHandle;
  let monitorUrl = '';
  const procs: RunningProcess[] = [];
  let fleetRaw: RawNats;
  let nodeBRaw: RawNats;

  const startController = async (host: 'node-a' | 'node-b'): Promise<void> => {
    const cfg = join(dir, `${host}.toml`);
    writeFileSync(
      cfg,
      [
        '[node]',
        `host_id = "${host}"`,
        'listen = "127.0.0.1:0"',
        `nats_url = "${nats.url}"`,
        `nats_user = "${host}"`,
        'nats_password_env = "NODE_NATS_PASSWORD"',
        'authorization_policy = "policy.toml"',
        'stale_after_seconds = 60',
        `state_dir = "state-${host}"`,
      ].join('\n'),
    );
    procs.push(
      await spawnNode(CLI, ['controller', 'serve', '--config', cfg], {
        env: { ...policy.env, NODE_NATS_PASSWORD: pw[host] },
      }),
    );
  };

  before(async () => {
    const monitorPort = await freePort();
    monitorUrl = `http://127.0.0.1:${monitorPort}`;
    nats = await startNatsServer({
      configText: readFileSync(SHIPPED_CONF, 'utf8'),
      env: { NODE_A_NATS_PASSWORD: pw['node-a'], NODE_B_NATS_PASSWORD: pw['node-b'], FLEET_NATS_PASSWORD: pw.fleet },
      monitorPort,
    });
    await Promise.all([startController('node-a'), startController('node-b')]);
    // node-b's manifest owner holds a sizeable window (a full batch is tens of KB), published
    // only at start, on resync, and every 30 s: any window sent meanwhile was asked for.
    const records = join(dir, 'node-b-records.json');
    writeFileSync(
      records,
      JSON.stringify(
        Array.from({ length: WINDOW_RECORDS }, (_, i) => rec('node-b', 'manifest', `m${i}`, { at: Date.now() })),
      ),
    );
    procs.push(
      await spawnNode(ACTOR, [], {
        env: {
          NATS_URL: nats.url,
          NATS_USER: 'node-b',
          NATS_PASS: pw['node-b'],
          HOST_ID: 'node-b',
          OWNER: 'manifest',
          RECORDS_FILE: records,
          POLL_MS: '600000',
          STALE_MS: '60000',
        },
      }),
    );
    fleetRaw = await RawNats.open(nats.port, 'fleet', pw.fleet);
    nodeBRaw = await RawNats.open(nats.port, 'node-b', pw['node-b']);
    // The fleet's own inbox: a proper request is answered there (the nodes are alive).
    fleetRaw.sub('_INBOX_fleet.>');
    await fleetRaw.flush();
    await eventually(
      async () => {
        fleetRaw.pub('svc.v1.node-a.workloads', '', '_INBOX_fleet.probe.a');
        fleetRaw.pub('svc.v1.node-b.workloads', '', '_INBOX_fleet.probe.b');
        await fleetRaw.flush();
        await sleep(100);
        const subjects = new Set(fleetRaw.msgs.map((m) => m.subject));
        return subjects.has('_INBOX_fleet.probe.a') && subjects.has('_INBOX_fleet.probe.b');
      },
      10_000,
      200,
    );
  });
  after(async () => {
    fleetRaw?.close();
    nodeBRaw?.close();
    await Promise.all(procs.map((p) => p.stop()));
    await nats?.stop();
  });

  it("a request whose reply subject names another host's subject (or no inbox) is answered nowhere: node-a sends nothing, node-b resyncs nothing", async () => {
    const watcher = await RawNats.open(nats.port, 'node-b', pw['node-b']);
    try {
      watcher.sub('svc.v1.node-b.>');
      await watcher.flush();
      await sleep(300);
      const seenBefore = watcher.msgs.length;
      const sentBefore = (await bytesSentByUser(monitorUrl)).get('node-a') ?? 0;
      const replies = [
        'svc.v1.node-b.resync',
        'svc.v1.node-b.obs.manifest',
        'svc.v1.node-b.workloads',
        'svc.v1.node-a.resync',
        '_INBOX_node-b',
        'INBOX.x',
        '_INBOX_.x',
        '$SYS.REQ.SERVER.PING',
      ];
      let requestBytes = 0;
      for (let i = 0; i < 100; i++) {
        for (const reply of replies) {
          fleetRaw.pub('svc.v1.node-a.workloads', '', reply);
          requestBytes += 'svc.v1.node-a.workloads'.length + reply.length;
        }
      }
      await fleetRaw.flush();
      await sleep(1500);
      const sentByA = ((await bytesSentByUser(monitorUrl)).get('node-a') ?? 0) - sentBefore;
      const arrived = watcher.msgs.slice(seenBefore);
      assert.deepEqual(
        arrived.filter((m) => m.subject === 'svc.v1.node-b.resync').map((m) => m.subject),
        [],
        'no resync was asked of node-b',
      );
      assert.equal(
        arrived.length,
        0,
        `nothing arrived on node-b's subjects (${arrived.map((m) => m.subject).join(', ')})`,
      );
      // 800 requests answered would have been 800 NodeResults (each ~3 KB) from node-a: it sent
      // (almost) nothing, only its own keep-alive traffic.
      assert.ok(sentByA < 4096, `node-a sent ${sentByA} bytes in answer to ${requestBytes} bytes of requests`);
      assert.ok(
        !fleetRaw.errors.some((e) => /Permissions Violation for Publish to "svc\.v1\.node-a\.workloads"/.test(e)),
        'the fleet may ask',
      );
    } finally {
      watcher.close();
    }
  });

  it('a resync storm costs at most one full window per owner per second, not one per request', async () => {
    const watcher = await RawNats.open(nats.port, 'node-b', pw['node-b']);
    try {
      watcher.sub('svc.v1.node-b.obs.manifest');
      await watcher.flush();
      // One window, to know its size.
      nodeBRaw.pub('svc.v1.node-b.resync');
      await nodeBRaw.flush();
      const one = await eventually(
        () => watcher.msgs.find((m) => JSON.parse(m.payload.toString()).full === true),
        5000,
        20,
      );
      await sleep(1500);
      watcher.msgs.length = 0;
      const bytesBefore = watcher.bytesIn;
      const t0 = Date.now();
      for (let i = 0; i < 2000; i++) nodeBRaw.pub('svc.v1.node-b.resync');
      await nodeBRaw.flush();
      await sleep(3000);
      const seconds = (Date.now() - t0) / 1000;
      const windows = watcher.msgs.filter((m) => JSON.parse(m.payload.toString()).full === true).length;
      const bytes = watcher.bytesIn - bytesBefore;
      assert.ok(windows >= 1, 'a resync is still answered');
      assert.ok(
        windows <= Math.ceil(seconds) + 1,
        `${windows} full windows in ${seconds.toFixed(1)} s for 2,000 requests`,
      );
      assert.ok(
        bytes <= (Math.ceil(seconds) + 1) * (one.payload.length + 512),
        `${bytes} bytes (one window is ${one.payload.length})`,
      );
    } finally {
      watcher.close();
    }
  });

  it("no user can snoop: $SYS, wildcards, other users' inboxes and other hosts' subjects are refused", async () => {
    const refusedSubs: Array<[RawNats, string]> = [
      [fleetRaw, '$SYS.>'],
      [fleetRaw, '>'],
      [fleetRaw, '_INBOX.>'],
      [fleetRaw, '_INBOX_node-a.>'],
      [fleetRaw, 'svc.v1.>'],
      [fleetRaw, 'svc.v1.*.obs.*'],
      [nodeBRaw, '$SYS.>'],
      [nodeBRaw, '>'],
      [nodeBRaw, '_INBOX_fleet.>'],
      [nodeBRaw, '_INBOX_node-a.>'],
      [nodeBRaw, 'svc.v1.node-a.>'],
      [nodeBRaw, 'svc.v1.*.workloads'],
      [nodeBRaw, '*.*.node-a.>'],
    ];
    for (const [c, subject] of refusedSubs) c.sub(subject);
    const refusedPubs: Array<[RawNats, string]> = [
      [fleetRaw, 'svc.v1.node-a.obs.manifest'],
      [fleetRaw, 'svc.v1.node-a.resync'],
      [fleetRaw, '$SYS.REQ.SERVER.PING'],
      [fleetRaw, '_INBOX_node-a.x'],
      [nodeBRaw, 'svc.v1.node-a.obs.manifest'],
      [nodeBRaw, 'svc.v1.node-a.workloads'],
      [nodeBRaw, 'svc.v1.node-a.resync'],
      [nodeBRaw, '_INBOX_node-a.x'],
      [nodeBRaw, '$SYS.REQ.SERVER.PING'],
      // A node may publish on `_INBOX_fleet.>` (it answers the fleet there without
      // allow_responses, which let it publish anywhere: nats-self-reply-audit.test.ts).
    ];
    for (const [c, subject] of refusedPubs) c.pub(subject, '{}');
    await fleetRaw.flush();
    await nodeBRaw.flush();
    await sleep(200);
    for (const [c, subject] of refusedSubs) {
      assert.ok(
        c.errors.some((e) => e.includes(`Permissions Violation for Subscription to "${subject}"`)),
        `subscribe ${subject} refused`,
      );
    }
    for (const [c, subject] of refusedPubs) {
      assert.ok(
        c.errors.some((e) => e.includes(`Permissions Violation for Publish to "${subject}"`)),
        `publish ${subject} refused`,
      );
    }
    // Nothing the refused subscriptions could have carried reached either connection.
    assert.ok(!fleetRaw.msgs.some((m) => !m.subject.startsWith('_INBOX_fleet.')));
    assert.ok(
      !nodeBRaw.msgs.some((m) => !m.subject.startsWith('svc.v1.node-b.') && !m.subject.startsWith('_INBOX_node-b.')),
    );
  });
});
