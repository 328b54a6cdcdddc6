import { dirname, resolve } from 'node:path';
import type { TSchema, Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { Value } from '@sinclair/typebox/value';
import { parse as parseToml } from 'smol-toml';
import { ConfigError } from '../errors.js';
import { readSmallFile } from './read-small-file.js';

/**
 * Config as a pipeline: TOML file -> plain object -> defaults -> schema check -> frozen.
 * Thrown when: the file is unreadable, not TOML, or breaks the schema (ConfigError naming the
 * member path, never its value).
 */
export function loadTomlConfig<T extends TSchema>(path: string, schema: T, what: string): { value: Static<T>; dir: string } {
  let text: string;
  try {
    text = readSmallFile(path);
  } catch {
    throw new ConfigError(`${what} configuration file is not readable`);
  }
  let raw: unknown;
  try {
    raw = parseToml(text);
  } catch {
    throw new ConfigError(`${what} configuration is not valid TOML`);
  }
  // smol-toml returns prototype-less objects and TOML dates; a JSON round trip makes them plain.
  const plain = Value.Default(schema, JSON.parse(JSON.stringify(raw)));
  const check = TypeCompiler.Compile(schema);
  if (!check.Check(plain)) {
    const first = [...check.Errors(plain)][0];
    throw new ConfigError(`${what} configuration: invalid member ${first?.path || '/'}`);
  }
  return { value: deepFreeze(plain as Static<T>), dir: dirname(resolve(path)) };
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
