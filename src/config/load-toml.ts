import { dirname, resolve } from 'node:path';
import type { TSchema, Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { Value } from '@sinclair/typebox/value';
import { parse as parseToml } from 'smol-toml';
import { ConfigError } from '../errors.js';
import { MAX_NATS_SERVERS } from './nats-url.js';
import { readSmallFile } from './read-small-file.js';

/** What a member must look like, for members whose grammar a reader cannot guess (never the value). */
export const MEMBER_HINTS: ReadonlyMap<string, string> = new Map([
  [
    'upstream',
    'an http:// or https:// URL with no spaces and no user:password@; an engine key goes in upstream_api_key_env',
  ],
  [
    'nats_url',
    `nats://HOST[:PORT] or tls://HOST[:PORT], or up to ${MAX_NATS_SERVERS} of them separated by commas; no credentials, path or query (the password goes in nats_password_env)`,
  ],
]);

/**
 * Where a loader's rules across members go: thrown, the first one (a server's start: the
 * default), or each one collected while the loader goes on (`config check` reports them all).
 */
export type ConfigReport = (problem: ConfigError) => void;

/** The ConfigReport of a server's start: the first problem is thrown. */
export const throwProblem: ConfigReport = (problem) => {
  throw problem;
};

/**
 * `make()`, or undefined once the ConfigError it threw went to `report` (with throwProblem,
 * thrown again: a caller may then take the result as made).
 */
export function reported<T>(report: ConfigReport, make: () => T): T | undefined {
  try {
    return make();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    report(err);
    return undefined;
  }
}

/**
 * Config as a pipeline: TOML file -> plain object -> defaults -> schema check -> frozen.
 * Thrown when: the file is unreadable, not TOML, or breaks the schema (ConfigError naming the
 * member path, never its value).
 */
export function loadTomlConfig<T extends TSchema>(
  path: string,
  schema: T,
  what: string,
): { value: Static<T>; dir: string } {
  let text: string;
  try {
    text = readSmallFile(path);
  } catch {
    throw new ConfigError(`${what} configuration file is not readable`);
  }
  let raw: unknown;
  try {
    // Integers as BigInt: a TOML float (`2.0`) stays apart from an integer (`2`), and an
    // integer past 2^53 is read, not refused as a file that is not TOML.
    raw = parseToml(text, { integersAsBigInt: true });
  } catch {
    throw new ConfigError(`${what} configuration is not valid TOML`);
  }
  const float = floatForInteger(schema, raw, '');
  if (float !== undefined)
    throw new ConfigError(`${what} configuration: invalid member ${float || '/'} (an integer is expected)`);
  // smol-toml returns prototype-less objects and TOML dates; a JSON round trip makes them plain
  // (integers as numbers again: one past 2^53 is past every bound the schemas set).
  const plain = Value.Default(
    schema,
    JSON.parse(JSON.stringify(raw, (_k, v: unknown) => (typeof v === 'bigint' ? Number(v) : v))),
  );
  const check = TypeCompiler.Compile(schema);
  if (!check.Check(plain)) {
    const first = [...check.Errors(plain)][0];
    // A Map: a member named `constructor` finds no hint (an object's prototype would answer).
    const hint = MEMBER_HINTS.get(first?.path.slice(first.path.lastIndexOf('/') + 1) ?? '');
    throw new ConfigError(
      `${what} configuration: invalid member ${first?.path || '/'}${hint === undefined ? '' : ` (${hint})`}`,
    );
  }
  return { value: deepFreeze(plain as Static<T>), dir: dirname(resolve(path)) };
}

/**
 * The path of the first TOML float (a JS number: integers are BigInt here) where the schema
 * takes integers only, or undefined. TypeBox's integer check alone would take `2.0`.
 */
export function floatForInteger(schema: TSchema, v: unknown, path: string): string | undefined {
  const s = schema as { type?: unknown; anyOf?: TSchema[]; properties?: Record<string, TSchema>; items?: TSchema };
  if (typeof v === 'number') {
    const types = s.anyOf ? s.anyOf.map((x) => (x as { type?: unknown }).type) : [s.type];
    return types.includes('integer') && !types.includes('number') ? path : undefined;
  }
  if (Array.isArray(v)) {
    const items = s.items ?? s.anyOf?.find((x) => (x as { type?: unknown }).type === 'array')?.items;
    if (!items) return undefined;
    for (let i = 0; i < v.length; i++) {
      const f = floatForInteger(items as TSchema, v[i], `${path}/${i}`);
      if (f !== undefined) return f;
    }
    return undefined;
  }
  if (v && typeof v === 'object') {
    const props = s.properties ?? s.anyOf?.find((x) => (x as { type?: unknown }).type === 'object')?.properties;
    if (!props) return undefined;
    for (const [k, x] of Object.entries(v)) {
      const p = props[k];
      if (p === undefined) continue;
      const f = floatForInteger(p, x, `${path}/${k}`);
      if (f !== undefined) return f;
    }
  }
  return undefined;
}

function deepFreeze<T>(v: T): T {
  if (v && typeof v === 'object') {
    for (const x of Object.values(v)) deepFreeze(x);
    Object.freeze(v);
  }
  return v;
}

/** `HOST:PORT` (IPv6 in brackets); port 0 picks a free port. Thrown when: malformed (ConfigError). */
export function parseListen(listen: string, what: string): { host: string; port: number } {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+)):([0-9]{1,5})$/.exec(listen);
  const port = m ? Number(m[3]) : Number.NaN;
  if (!m || port > 65535) throw new ConfigError(`${what} configuration: listen must be HOST:PORT`);
  return { host: m[1] ?? m[2]!, port };
}
