import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isInboxReply } from '../../src/streams/nats-bus.js';

describe('reply subjects a server answers on (CONTRACT.md, request/reply trust)', () => {
  it("answers on inboxes: the default prefix and a user's own", () => {
    for (const s of ['_INBOX.abc', '_INBOX.abc.1', '_INBOX_fleet.K2x9.17', '_INBOX_node-a.x', '_INBOX_node_b.x.y.z'])
      assert.ok(isInboxReply(s), s);
  });
  it('never on a svc. subject, a system subject, a wildcard or an inbox prefix without a token', () => {
    for (const s of [
      'svc.v1.node-b.resync',
      'svc.v1.node-b.obs.manifest',
      'svc.v1.node-a.workloads',
      '$SYS.REQ.SERVER.PING',
      '_INBOX',
      '_INBOX.',
      '_INBOX_fleet',
      '_INBOX_fleet.',
      '_INBOX_.x',
      '_INBOX.>',
      '_INBOX.*',
      '_INBOX.a.>',
      '_INBOXX.a',
      'x._INBOX.a',
      '_INBOX.a b',
      '_INBOX..a',
      `_INBOX.${'a'.repeat(600)}`,
      '',
    ])
      assert.ok(!isInboxReply(s), JSON.stringify(s));
  });
});
