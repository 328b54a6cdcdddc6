import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { TIMESTAMP_PATTERN, parseTimestamp } from '../../src/schema/primitives.js';

const RE = new RegExp(TIMESTAMP_PATTERN);
/** What parseTimestamp answered before it read by character: the grammar, Date.parse, and a round trip that catches rolled-over dates. */
function reference(s: string): number {
  if (!RE.test(s)) return Number.NaN;
  const ms = Date.parse(s);
  return Number.isNaN(ms) || new Date(ms).toISOString() !== s ? Number.NaN : ms;
}
const same = (s: string): void =>
  assert.ok(
    Object.is(parseTimestamp(s), reference(s)),
    `${JSON.stringify(s)}: ${parseTimestamp(s)} vs ${reference(s)}`,
  );

const pad = (n: number, w: number): string => String(n).padStart(w, '0');
/** Timestamps of the right shape with every field free, impossible ones included (month 13, Feb 30, hour 24, second 60). */
const shaped = fc
  .tuple(
    fc.integer({ min: 0, max: 9999 }),
    fc.integer({ min: 0, max: 99 }),
    fc.integer({ min: 0, max: 99 }),
    fc.integer({ min: 0, max: 99 }),
    fc.integer({ min: 0, max: 99 }),
    fc.integer({ min: 0, max: 99 }),
    fc.integer({ min: 0, max: 999 }),
  )
  .map(
    ([y, mo, d, h, mi, s, ms]) =>
      `${pad(y, 4)}-${pad(mo, 2)}-${pad(d, 2)}T${pad(h, 2)}:${pad(mi, 2)}:${pad(s, 2)}.${pad(ms, 3)}Z`,
  );
/** Real instants from year 0000 to 9999. */
const instants = fc
  .integer({ min: -62_167_219_200_000, max: 253_402_300_799_999 })
  .map((ms) => new Date(ms).toISOString());

describe('parseTimestamp', () => {
  it('answers as the grammar + Date.parse + round trip did, for any string of the right shape', () => {
    fc.assert(
      fc.property(shaped, (s) => same(s)),
      { numRuns: 20_000 },
    );
  });
  it('returns the epoch ms of every real instant of four-digit years', () => {
    fc.assert(
      fc.property(instants, (s) => {
        same(s);
        assert.equal(parseTimestamp(s), Date.parse(s));
      }),
      { numRuns: 20_000 },
    );
  });
  it('refuses near misses of the shape', () => {
    const ok = '2024-02-29T23:59:59.999Z';
    same(ok);
    assert.equal(parseTimestamp(ok), Date.parse(ok));
    const variants = [...Array(ok.length).keys()].flatMap((i) =>
      ['0', '9', 'x', ' ', '-', ':', '.', 'Z', 'T', '\u0660'].map((c) => ok.slice(0, i) + c + ok.slice(i + 1)),
    );
    for (const s of [
      ...variants,
      '',
      ok.slice(1),
      ok + ' ',
      '2023-02-29T00:00:00.000Z',
      '1900-02-29T00:00:00.000Z',
      '2000-02-29T00:00:00.000Z',
      '0000-02-29T00:00:00.000Z',
      '2026-11-25T24:00:00.000Z',
      '+02026-11-25T00:00:00.000Z',
    ])
      same(s);
    fc.assert(
      fc.property(fc.string({ maxLength: 30 }), (s) => same(s)),
      { numRuns: 5_000 },
    );
  });
});
