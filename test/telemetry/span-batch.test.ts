import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { SpanBatch } from '../../src/telemetry/span-batch.js';

describe('span work a batch at a time', () => {
  it('runs a batch when it is full, in order, and not before', () => {
    const ran: number[] = [];
    const b = new SpanBatch(() => assert.fail('no error'), 3, 60_000);
    b.add(() => ran.push(1));
    b.add(() => ran.push(2));
    assert.equal(ran.length, 0);
    b.add(() => ran.push(3));
    assert.deepEqual(ran, [1, 2, 3]);
    b.add(() => ran.push(4));
    assert.deepEqual(ran, [1, 2, 3]);
    b.run();
    assert.deepEqual(ran, [1, 2, 3, 4]);
  });

  it('runs what waits once the delay has passed, and each task once', async () => {
    const ran: number[] = [];
    const b = new SpanBatch(() => assert.fail('no error'), 100, 20);
    b.add(() => ran.push(1));
    await sleep(5);
    b.add(() => ran.push(2));
    assert.equal(ran.length, 0);
    await sleep(80);
    assert.deepEqual(ran, [1, 2]);
    b.run();
    assert.deepEqual(ran, [1, 2]);
  });

  it('a task that throws is reported and the others still run', () => {
    const ran: number[] = [];
    const errors: unknown[] = [];
    const b = new SpanBatch((err) => errors.push(err), 10, 60_000);
    b.add(() => ran.push(1));
    b.add(() => {
      throw new RangeError('bad span');
    });
    b.add(() => ran.push(3));
    b.run();
    assert.deepEqual(ran, [1, 3]);
    assert.equal(errors.length, 1);
    assert.ok(errors[0] instanceof RangeError);
  });
});
