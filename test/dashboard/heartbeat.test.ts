import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BEAT_FRAME, Heartbeat, SILENT_BEATS, type HeartbeatSocket } from '../../src/dashboard/dashboard-heartbeat.js';

/** A socket that records what the heartbeat did to it. */
function fakeSocket(): HeartbeatSocket & { pings: number; sent: string[]; cut: boolean } {
  const s = {
    readyState: 1,
    pings: 0,
    sent: [] as string[],
    cut: false,
    ping() {
      s.pings++;
    },
    send(data: string) {
      s.sent.push(data);
    },
    terminate() {
      s.cut = true;
      s.readyState = 3;
    },
  };
  return s;
}

describe('dashboard heartbeat (decision 0037)', () => {
  it('pings every socket each round, and sends beat only to one that was sent nothing else', () => {
    let now = 0;
    const hb = new Heartbeat(1_000, () => now);
    const busy = fakeSocket();
    const idle = fakeSocket();
    hb.add(busy);
    hb.add(idle);
    for (let i = 1; i <= 2; i++) {
      now = i * 1_000;
      hb.sent(busy);
      hb.heard(busy);
      hb.heard(idle);
      hb.tick();
    }
    assert.equal(busy.pings, 2);
    assert.equal(idle.pings, 2);
    assert.deepEqual(busy.sent, [], 'a socket sent frames needs no beat');
    assert.deepEqual(idle.sent, [BEAT_FRAME, BEAT_FRAME]);
  });

  it(`cuts a socket that answered nothing for ${SILENT_BEATS} rounds, and only that one`, () => {
    let now = 0;
    const hb = new Heartbeat(1_000, () => now);
    const dead = fakeSocket();
    const alive = fakeSocket();
    hb.add(dead);
    hb.add(alive);
    for (let i = 1; i <= SILENT_BEATS + 1; i++) {
      now = i * 1_000;
      hb.heard(alive);
      hb.tick();
      assert.equal(dead.cut, i > SILENT_BEATS, `round ${i}`);
    }
    assert.equal(alive.cut, false);
    // A cut socket is forgotten: later rounds leave it alone.
    const pings = dead.pings;
    now += 1_000;
    hb.tick();
    assert.equal(dead.pings, pings);
  });

  it('a socket closing under a round does not stop the round for the others', () => {
    const hb = new Heartbeat(1_000, () => 10_000);
    const closing = fakeSocket();
    closing.ping = () => {
      throw new Error('WebSocket is not open');
    };
    const other = fakeSocket();
    hb.add(closing);
    hb.add(other);
    hb.heard(closing);
    hb.heard(other);
    hb.tick();
    assert.equal(other.pings, 1);
  });
});
