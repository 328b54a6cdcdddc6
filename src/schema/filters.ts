import { Type, type Static } from '@sinclair/typebox';
import { InvalidArgumentError } from '../errors.js';
import { KINDS, OWNERS, STATES, type Kind, type Owner, type State } from './enums.js';
import { HostId, isHostId, literalUnion } from './primitives.js';
import { splitQuery } from './query-string.js';

export const RECENT_SECONDS = { min: 1, max: 86_400, default: 3_600 } as const;
export const LIMIT = { min: 1, max: 1_000, default: 200 } as const;

/** The seven filters as they travel: only the present ones (no nulls for absent options). */
export const FilterArgs = Type.Object(
  {
    owner: Type.Optional(literalUnion(OWNERS)),
    kind: Type.Optional(literalUnion(KINDS)),
    state: Type.Optional(literalUnion(STATES)),
    host: Type.Optional(HostId),
    active_only: Type.Optional(Type.Boolean()),
    recent_seconds: Type.Optional(Type.Integer({ minimum: RECENT_SECONDS.min, maximum: RECENT_SECONDS.max })),
    limit: Type.Optional(Type.Integer({ minimum: LIMIT.min, maximum: LIMIT.max })),
  },
  { additionalProperties: false },
);
export type FilterArgs = Static<typeof FilterArgs>;

/** Filters with SPEC.md's defaults applied; what the query reads. */
export interface Filters {
  readonly owner?: Owner;
  readonly kind?: Kind;
  readonly state?: State;
  readonly host?: string;
  readonly active_only: boolean;
  readonly recent_seconds: number;
  readonly limit: number;
}

export const FILTER_NAMES = ['owner', 'kind', 'state', 'host', 'active_only', 'recent_seconds', 'limit'] as const;
type FilterName = (typeof FILTER_NAMES)[number];
const FILTER_NAME_SET: ReadonlySet<string> = new Set(FILTER_NAMES);
const OWNER_SET: ReadonlySet<string> = new Set(OWNERS);
const KIND_SET: ReadonlySet<string> = new Set(KINDS);
const STATE_SET: ReadonlySet<string> = new Set(STATES);
// Plain decimal digits, no sign, no leading zeros, short enough to be exact.
const DECIMAL_RE = /^(?:0|[1-9][0-9]{0,8})$/;

/** Thrown: the filter `name` is wrong, for the fixed `reason` (never the value sent). */
function reject(name: string, reason: string): never {
  throw new InvalidArgumentError(name, reason);
}

function boundedInt(name: FilterName, n: number, min: number, max: number): number {
  if (!Number.isSafeInteger(n) || n < min || n > max) reject(name, `must be an integer from ${min} to ${max}`);
  return n;
}

/** The `arguments` object, or an unknown member of it (whose name is the caller's and is not repeated). */
const ARGUMENTS_REASON = 'must be an object of known filters only';

/** Validates one filter value already typed by its carrier; returns it or throws. */
function checkValue(name: FilterName, v: unknown): FilterArgs[FilterName] {
  switch (name) {
    case 'owner':
      return typeof v === 'string' && OWNER_SET.has(v) ? (v as Owner) : reject(name, 'must be one of the owners');
    case 'kind':
      return typeof v === 'string' && KIND_SET.has(v) ? (v as Kind) : reject(name, 'must be one of the kinds');
    case 'state':
      return typeof v === 'string' && STATE_SET.has(v) ? (v as State) : reject(name, 'must be one of the states');
    case 'host':
      return isHostId(v) ? v : reject(name, 'must be a host ID');
    case 'active_only':
      return typeof v === 'boolean' ? v : reject(name, 'must be true or false');
    case 'recent_seconds':
      return typeof v === 'number'
        ? boundedInt(name, v, RECENT_SECONDS.min, RECENT_SECONDS.max)
        : reject(name, 'must be an integer');
    case 'limit':
      return typeof v === 'number' ? boundedInt(name, v, LIMIT.min, LIMIT.max) : reject(name, 'must be an integer');
  }
}

/**
 * Parses the raw HTTP query string (without `?`), split by splitQuery (repeated, unknown,
 * empty, abbreviated or differently cased members refused); non-decimal or out-of-range
 * values are rejected too, before anything is read.
 * Thrown when: any member is not exactly a filter with a valid value (InvalidInputError).
 */
export function parseFilterQuery(rawQuery: string): FilterArgs {
  const out: Record<string, unknown> = {};
  for (const [name, raw] of splitQuery(rawQuery, FILTER_NAMES)) {
    let typed: unknown = raw;
    if (name === 'active_only')
      typed = raw === 'true' ? true : raw === 'false' ? false : reject(name, 'must be true or false');
    else if (name === 'recent_seconds' || name === 'limit')
      typed = DECIMAL_RE.test(raw) ? Number(raw) : reject(name, 'must be plain decimal digits');
    out[name] = checkValue(name, typed);
  }
  return out as FilterArgs;
}

/**
 * Validates an `arguments` object (from /tools/call, MCP or NATS): a plain object whose
 * members are only present filters of the right JSON types.
 * Thrown when: it is not such an object (InvalidInputError).
 */
export function parseFilterArgs(args: unknown): FilterArgs {
  if (args === undefined) return {};
  if (typeof args !== 'object' || args === null || Array.isArray(args)) reject('arguments', ARGUMENTS_REASON);
  const proto = Object.getPrototypeOf(args);
  if (proto !== Object.prototype && proto !== null) reject('arguments', ARGUMENTS_REASON);
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(args)) {
    if (!FILTER_NAME_SET.has(key)) reject('arguments', ARGUMENTS_REASON);
    out[key] = checkValue(key as FilterName, v);
  }
  return out as FilterArgs;
}

/** Applies SPEC.md's defaults. */
export function resolveFilters(args: FilterArgs): Filters {
  return {
    ...args,
    active_only: args.active_only ?? false,
    recent_seconds: args.recent_seconds ?? RECENT_SECONDS.default,
    limit: args.limit ?? LIMIT.default,
  };
}
