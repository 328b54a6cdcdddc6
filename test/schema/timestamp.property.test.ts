import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { parseTimestamp } from '../../src/schema/primitives.js';

/**
 * An oracle written from the calendar, not from Date: a timestamp in the contract's grammar
 * names a real instant exactly when its month is 1-12, its day exists in that month of that
 * (proleptic Gregorian) year, the hour is 0-23, minute and second 0-59, and the offset is Z.
 */
function namesInstant(y: number, mo: number, d: number, h: number, mi: number, s: number, offset: string): boolean {
  const leap = (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
  return offset === 'Z' && mo >= 1 && mo <= 12 && d >= 1 && d <= days[mo - 1]! && h <= 23 && mi <= 59 && s <= 59;
}

const pad = (n: number, w: number): string => String(n).padStart(w, '0');
const text = (y: number, mo: number, d: number, h: number, mi: number, s: number, ms: number, offset: string): string =>
  `${pad(y, 4)}-${pad(mo, 2)}-${pad(d, 2)}T${pad(h, 2)}:${pad(mi, 2)}:${pad(s, 2)}.${pad(ms, 3)}${offset}`;

describe('contract timestamps: the grammar and the calendar', () => {
  it('a timestamp parses to a number exactly when it names a real instant (days 0/29/30/31 of every month, leap years, hour 24, minute and second 60, year 0000, other offsets)', () => {
    fc.assert(
      fc.property(
        // Years around the edges of the leap rule (1900, 2000, 2100, 0000, 9999) and any other.
        fc.oneof(
          fc.constantFrom(0, 4, 100, 400, 1900, 1999, 2000, 2024, 2026, 2100, 2400, 9999),
          fc.integer({ min: 0, max: 9999 }),
        ),
        fc.integer({ min: 0, max: 13 }),
        fc.oneof(fc.constantFrom(0, 1, 28, 29, 30, 31), fc.integer({ min: 0, max: 32 })),
        fc.oneof(fc.constantFrom(0, 23, 24), fc.integer({ min: 0, max: 25 })),
        fc.oneof(fc.constantFrom(0, 59, 60), fc.integer({ min: 0, max: 61 })),
        fc.oneof(fc.constantFrom(0, 59, 60), fc.integer({ min: 0, max: 61 })),
        fc.integer({ min: 0, max: 999 }),
        fc.constantFrom('Z', 'z', '+00:00', '-00:00', '+01:00', ''),
        (y, mo, d, h, mi, s, ms, offset) => {
          const t = text(y, mo, d, h, mi, s, ms, offset);
          const parsed = parseTimestamp(t);
          if (namesInstant(y, mo, d, h, mi, s, offset)) {
            assert.ok(Number.isFinite(parsed), `${t} names an instant`);
            assert.equal(new Date(parsed).toISOString(), t, 'and parses to that very instant');
          } else {
            assert.ok(Number.isNaN(parsed), `${t} names no instant`);
          }
        },
      ),
      { numRuns: 3000 },
    );
  });

  it('every day that does not exist is refused, month by month, in leap and common years', () => {
    for (const y of [1900, 2000, 2024, 2026]) {
      for (let mo = 1; mo <= 12; mo++) {
        for (const d of [0, 28, 29, 30, 31, 32]) {
          const t = text(y, mo, d, 12, 0, 0, 0, 'Z');
          assert.equal(Number.isFinite(parseTimestamp(t)), namesInstant(y, mo, d, 12, 0, 0, 'Z'), t);
        }
      }
    }
    assert.ok(Number.isNaN(parseTimestamp('2026-02-30T00:00:00.000Z')));
    assert.ok(Number.isNaN(parseTimestamp('2026-01-01T24:00:00.000Z')));
    assert.ok(Number.isNaN(parseTimestamp('2026-12-31T23:59:60.000Z')), 'a leap second names no instant on this clock');
    assert.ok(Number.isFinite(parseTimestamp('0000-01-01T00:00:00.000Z')), 'year 0000 is a real (very old) instant');
  });

  it('a refused text stays refused when asked again (the parse cache never turns NaN into a date)', () => {
    for (let i = 0; i < 3; i++) assert.ok(Number.isNaN(parseTimestamp('2026-02-29T00:00:00.000Z')));
    assert.ok(Number.isFinite(parseTimestamp('2024-02-29T00:00:00.000Z')));
  });
});
