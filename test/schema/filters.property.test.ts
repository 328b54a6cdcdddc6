import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { ErrorCode, SvcError } from '../../src/errors.js';

/** Every refusal of a filter is the invalid-input error (naming the filter where it can). */
const invalidInput = (e: unknown): boolean => e instanceof SvcError && e.code === ErrorCode.INVALID_INPUT;
import { KINDS, OWNERS, STATES } from '../../src/schema/enums.js';
import {
  FILTER_NAMES,
  LIMIT,
  RECENT_SECONDS,
  parseFilterArgs,
  parseFilterQuery,
  type FilterArgs,
} from '../../src/schema/filters.js';

type Name = (typeof FILTER_NAMES)[number];
/** One query member: its wire spelling and the typed value it must parse to. */
interface Member {
  readonly name: Name;
  readonly raw: string;
  readonly typed: FilterArgs[Name];
}

const RUNS = { numRuns: 200 };
const NAME_SET: ReadonlySet<string> = new Set(FILTER_NAMES);

const hostArb = fc.stringMatching(/^[A-Za-z][A-Za-z0-9_-]{0,63}$/);

/** A valid value for each filter, as wire text plus its typed twin. */
const VALID: Record<Name, fc.Arbitrary<Member>> = {
  owner: fc.constantFrom(...OWNERS).map((v) => ({ name: 'owner', raw: v, typed: v })),
  kind: fc.constantFrom(...KINDS).map((v) => ({ name: 'kind', raw: v, typed: v })),
  state: fc.constantFrom(...STATES).map((v) => ({ name: 'state', raw: v, typed: v })),
  host: hostArb.map((v) => ({ name: 'host', raw: v, typed: v })),
  active_only: fc.boolean().map((v) => ({ name: 'active_only', raw: String(v), typed: v })),
  recent_seconds: boundedInt(RECENT_SECONDS.min, RECENT_SECONDS.max).map((v) => ({
    name: 'recent_seconds',
    raw: String(v),
    typed: v,
  })),
  limit: boundedInt(LIMIT.min, LIMIT.max).map((v) => ({ name: 'limit', raw: String(v), typed: v })),
};

/** Integers in range, biased to the bounds where off-by-one mistakes live. */
function boundedInt(min: number, max: number): fc.Arbitrary<number> {
  return fc.oneof(fc.constantFrom(min, min + 1, max - 1, max), fc.integer({ min, max }));
}

/** A set of valid members with unique names, in any order. */
const validMembers: fc.Arbitrary<Member[]> = fc
  .shuffledSubarray([...FILTER_NAMES])
  .chain((names) => (names.length === 0 ? fc.constant([] as Member[]) : fc.tuple(...names.map((n) => VALID[n]))))
  .chain((ms) => fc.shuffledSubarray(ms, { minLength: ms.length, maxLength: ms.length }));

const query = (ms: readonly { name: string; raw: string }[]): string =>
  ms.map((m) => `${encodeURIComponent(m.name)}=${encodeURIComponent(m.raw)}`).join('&');

const typedOf = (ms: readonly Member[]): Record<string, unknown> =>
  Object.fromEntries(ms.map((m) => [m.name, m.typed]));

/** A casing of `s` that differs from it (needs at least one letter). */
function recased(s: string): fc.Arbitrary<string> {
  return fc
    .array(fc.boolean(), { minLength: s.length, maxLength: s.length })
    .map((flips) =>
      [...s].map((c, i) => (flips[i] ? (c === c.toUpperCase() ? c.toLowerCase() : c.toUpperCase()) : c)).join(''),
    )
    .filter((t) => t !== s);
}

/** Values that are not plain in-range decimal digits for an integer filter. */
function badInt(min: number, max: number): fc.Arbitrary<string> {
  return fc.oneof(
    fc.constantFrom(
      String(min - 1),
      String(max + 1),
      '-1',
      '+5',
      '5.0',
      '1e2',
      '0x10',
      ' 5',
      '5 ',
      '010',
      '00',
      'NaN',
      'Infinity',
      '\uFF15',
      '٣',
    ),
    fc.integer({ min: max + 1, max: Number.MAX_SAFE_INTEGER }).map(String),
    fc.bigInt({ min: 10n ** 16n, max: 10n ** 40n }).map(String),
    fc.integer({ min: -1_000_000, max: 0 }).map(String),
    fc.integer({ min, max }).map((n) => `0${n}`),
    fc.integer({ min, max }).map((n) => `${n}.0`),
  );
}

/** One bad member of each kind the contract rejects: [label, name, raw]. */
const badMember: fc.Arbitrary<{ label: string; name: string; raw: string; clashes?: Name }> = fc.oneof(
  // unknown names, including abbreviations and near misses
  fc
    .oneof(
      fc.string({ minLength: 1, maxLength: 20 }),
      fc
        .constantFrom(...FILTER_NAMES)
        .chain((n) => fc.integer({ min: 1, max: n.length - 1 }).map((k) => n.slice(0, k))),
      fc.constantFrom(...FILTER_NAMES).map((n) => `${n}s`),
      fc.constantFrom(
        'activeOnly',
        'active-only',
        'recent',
        'owners',
        'host_id',
        'filter',
        '__proto__',
        'constructor',
        'toString',
      ),
    )
    .filter((n) => !NAME_SET.has(n))
    .chain((name) => fc.constantFrom('router', 'true', '5').map((raw) => ({ label: 'unknown name', name, raw }))),
  // wrongly cased names, with a value that would be valid for the real name
  fc
    .constantFrom(...FILTER_NAMES)
    .chain((n) => fc.tuple(recased(n), VALID[n]).map(([name, m]) => ({ label: 'cased name', name, raw: m.raw }))),
  // wrongly cased enum and boolean values (host IDs are case-sensitive and stay valid, so not here)
  fc
    .constantFrom('owner', 'kind', 'state', 'active_only' as const)
    .chain((n) =>
      VALID[n].chain((m) => recased(m.raw).map((raw) => ({ label: 'cased value', name: n, raw, clashes: n }))),
    ),
  // empty values
  fc.constantFrom(...FILTER_NAMES).map((n) => ({ label: 'empty value', name: n, raw: '', clashes: n })),
  // values outside the vocabulary
  fc.constantFrom('owner', 'kind', 'state' as const).chain((n) =>
    fc
      .oneof(fc.string({ minLength: 1 }), fc.constantFrom('null', 'undefined', 'all', '*', 'rout', 'media-job,recipe'))
      .filter(
        (v) =>
          !(
            n === 'owner'
              ? (OWNERS as readonly string[])
              : n === 'kind'
                ? (KINDS as readonly string[])
                : (STATES as readonly string[])
          ).includes(v),
      )
      .map((raw) => ({ label: 'unknown value', name: n, raw, clashes: n })),
  ),
  fc
    .oneof(fc.string({ minLength: 1 }), fc.constantFrom('1', '0', 'yes', 'on', 'null'))
    .filter((v) => v !== 'true' && v !== 'false')
    .map((raw) => ({ label: 'bad boolean', name: 'active_only', raw, clashes: 'active_only' as const })),
  fc
    .oneof(fc.string({ minLength: 1, maxLength: 70 }), fc.constantFrom('1node', '-a', 'a.b', 'a b', 'x'.repeat(65)))
    .filter((v) => !/^[A-Za-z][A-Za-z0-9_-]{0,63}$/.test(v))
    .map((raw) => ({ label: 'bad host', name: 'host', raw, clashes: 'host' as const })),
  // out-of-range and non-decimal integers
  badInt(RECENT_SECONDS.min, RECENT_SECONDS.max).map((raw) => ({
    label: 'bad integer',
    name: 'recent_seconds',
    raw,
    clashes: 'recent_seconds' as const,
  })),
  badInt(LIMIT.min, LIMIT.max).map((raw) => ({ label: 'bad integer', name: 'limit', raw, clashes: 'limit' as const })),
);

const isInvalidInput = invalidInput;

function assertRejected(qs: string, why: string): void {
  assert.throws(() => parseFilterQuery(qs), isInvalidInput, `${why}: ${JSON.stringify(qs)}`);
}

describe('filters - raw query string properties', () => {
  it('valid members with unique names, in any order, parse to the typed values parseFilterArgs gives', () => {
    fc.assert(
      fc.property(validMembers, (ms) => {
        const parsed = parseFilterQuery(query(ms));
        const typed = typedOf(ms);
        assert.deepEqual({ ...parsed }, typed);
        assert.deepEqual({ ...parsed }, { ...parseFilterArgs(typed) });
      }),
      RUNS,
    );
  });

  it('a repeated member is rejected, whether the repeat agrees or not', () => {
    fc.assert(
      fc.property(
        validMembers.filter((ms) => ms.length > 0),
        fc.record(VALID),
        fc.nat(),
        fc.nat(),
        fc.boolean(),
        (ms, alt, pick, at, same) => {
          const victim = ms[pick % ms.length]!;
          // The repeat either repeats the member verbatim or carries another valid value.
          const repeat = same ? victim : alt[victim.name];
          const all = [...ms];
          all.splice(at % (all.length + 1), 0, repeat);
          assertRejected(query(all), 'repeated');
        },
      ),
      RUNS,
    );
  });

  it('an unknown, wrongly cased, empty, out-of-range or non-decimal member is rejected among valid ones', () => {
    fc.assert(
      fc.property(validMembers, badMember, fc.nat(), (ms, bad, at) => {
        // Keep the other members valid and unique so that only `bad` can be the cause.
        const others = bad.clashes === undefined ? ms : ms.filter((m) => m.name !== bad.clashes);
        const all: { name: string; raw: string }[] = [...others];
        all.splice(at % (all.length + 1), 0, bad);
        assertRejected(query(all), bad.label);
      }),
      { numRuns: 300 },
    );
  });

  it('a bare name, an empty segment or a name-less member is rejected', () => {
    fc.assert(
      fc.property(
        validMembers,
        fc.constantFrom('act', 'owner', 'limit', '', '=router', '=', 'active_only'),
        fc.nat(),
        (ms, seg, at) => {
          const parts = ms.map((m) => `${m.name}=${encodeURIComponent(m.raw)}`);
          parts.splice(at % (parts.length + 1), 0, seg);
          const qs = parts.join('&');
          if (qs === '') return; // the empty query is the default query, not a member
          assertRejected(qs, 'malformed segment');
        },
      ),
      RUNS,
    );
  });
});

describe('filters - arguments object properties', () => {
  /** Either a result with only filter keys, or InvalidInputError: nothing else may escape. */
  function checkTotal(v: unknown): void {
    let out: FilterArgs;
    try {
      out = parseFilterArgs(v);
    } catch (e) {
      assert.ok(invalidInput(e), `threw ${String(e)} for ${JSON.stringify(v)}`);
      return;
    }
    // Only a plain object (or nothing at all) is an `arguments` object: `[]` is not `{}`.
    assert.ok(
      v === undefined || (typeof v === 'object' && v !== null && !Array.isArray(v)),
      `accepted ${JSON.stringify(v)}`,
    );
    for (const k of Object.keys(out)) assert.ok(NAME_SET.has(k), `returned key ${k}`);
    // What it accepts must be exactly what it was given, and stable under a second pass.
    if (v !== undefined) assert.deepEqual({ ...out }, { ...(v as object) });
    assert.deepEqual({ ...parseFilterArgs(out) }, { ...out });
  }

  it('arbitrary JSON values either parse to known filters or throw InvalidInputError', () => {
    // Empty containers and falsy scalars are rare at the top level of fc.jsonValue(): add them.
    const edge = fc.constantFrom<unknown>([], [{}], {}, '', 0, -0, false, null, 'owner=router');
    fc.assert(fc.property(fc.oneof(fc.jsonValue(), edge), checkTotal), { numRuns: 300 });
  });

  it('arbitrary objects either parse to known filters or throw InvalidInputError', () => {
    fc.assert(fc.property(fc.object(), checkTotal), { numRuns: 300 });
  });

  it('objects keyed mostly by filter names with arbitrary JSON values are handled totally', () => {
    const key = fc.oneof(
      { weight: 4, arbitrary: fc.constantFrom(...FILTER_NAMES) },
      { weight: 1, arbitrary: fc.string() },
    );
    // Values near the valid ones, so that both acceptance and every rejection path are reached.
    const value = fc.oneof(
      fc.constantFrom<unknown>(...OWNERS, ...KINDS, ...STATES, 'node-a', 'Router', '', null, '5', 'true'),
      fc.boolean(),
      fc.integer({ min: -5, max: 90_000 }),
      fc.double(),
      fc.jsonValue(),
    );
    fc.assert(fc.property(fc.dictionary(key, value, { maxKeys: 8 }), checkTotal), { numRuns: 300 });
  });

  it('valid typed objects are accepted as given; a null member or a wire-typed value is rejected', () => {
    fc.assert(
      fc.property(
        validMembers.filter((ms) => ms.length > 0),
        fc.nat(),
        fc.boolean(),
        (ms, pick, useNull) => {
          const typed = typedOf(ms);
          assert.deepEqual({ ...parseFilterArgs(typed) }, typed);
          const victim = ms[pick % ms.length]!;
          // Over JSON the types are native: the query string's text form is not accepted here,
          // except for the string-valued filters, where text is the native type.
          if (!useNull && typeof victim.typed === 'string') return;
          const broken = { ...typed, [victim.name]: useNull ? null : victim.raw };
          assert.throws(() => parseFilterArgs(broken), isInvalidInput, JSON.stringify(broken));
        },
      ),
      RUNS,
    );
  });
});
