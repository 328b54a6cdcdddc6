import { statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { Static, TSchema } from '@sinclair/typebox';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import { Value, ValueErrorType, type ValueError } from '@sinclair/typebox/value';
import { parse as parseToml } from 'smol-toml';
import { PolicyFile } from '../auth/policy.js';
import { envVar } from '../config/env-var.js';
import { FleetConfigSchema, fleetConfigFrom } from '../config/fleet-config.js';
import { MEMBER_HINTS, floatForInteger, parseListen, type ConfigReport } from '../config/load-toml.js';
import { NodeConfigSchema, nodeConfigFrom } from '../config/node-config.js';
import { readSmallFile } from '../config/read-small-file.js';
import { RouterConfigSchema, routerConfigFrom } from '../config/router-config.js';
import { readTlsPair } from '../config/tls-settings.js';
import { lineOfMember, memberName, pointerPath } from '../config/toml-lines.js';
import { ConfigError } from '../errors.js';
import { ManifestSchema, RecipeSchema, loadRecipeFile, manifestRules } from '../recipes/recipe-config.js';
import { directoryProblems } from './config-dirs.js';

/**
 * `svc-serving config check`: what each server would check at start, for every file at once,
 * as `file:line: key: reason` problems (docs/decisions/0070). A reason is fixed text, a
 * schema bound or the name of an environment variable: never a value from the file.
 */

export const CONFIG_KINDS = ['router', 'node', 'fleet', 'policy', 'recipe', 'manifest'] as const;
export type ConfigKind = (typeof CONFIG_KINDS)[number];

export interface Problem {
  /** 1-based line of the key (or of its table); 0 when it is not written anywhere. */
  readonly line: number;
  /** `server.listen`, `models[1].alias`; `-` for the file as a whole. */
  readonly key: string;
  readonly severity: 'error' | 'warning';
  readonly reason: string;
}

export interface FileReport {
  readonly file: string;
  /** What the file was recognized as, from its tables; null when it could not be. */
  readonly kind: ConfigKind | null;
  readonly problems: readonly Problem[];
}

interface KindRule {
  readonly kind: ConfigKind;
  readonly schema: TSchema;
  /** Top-level keys (tables) that say a file is of this kind. */
  readonly signals: readonly string[];
  /** The table most keys of a loader's message belong to. */
  readonly table?: string;
  /** The loader the server itself uses (what it checks of the file beyond the schema; the first fault). */
  readonly load?: (path: string) => unknown;
  /**
   * The server's own rules across members, run on the checked value with a collecting report:
   * every one it breaks, not only the first (the loader runs the same code and throws).
   */
  // biome-ignore lint/suspicious/noExplicitAny: each kind's builder takes its own schema's value, checked just before.
  readonly collect?: (value: any, dir: string, report: ConfigReport) => unknown;
}

const RULES: readonly KindRule[] = [
  {
    kind: 'router',
    schema: RouterConfigSchema,
    signals: ['server', 'models'],
    table: 'server',
    collect: routerConfigFrom,
  },
  { kind: 'node', schema: NodeConfigSchema, signals: ['node'], table: 'node', collect: nodeConfigFrom },
  { kind: 'fleet', schema: FleetConfigSchema, signals: ['fleet', 'nodes'], table: 'fleet', collect: fleetConfigFrom },
  { kind: 'policy', schema: PolicyFile, signals: ['clients'] },
  {
    kind: 'recipe',
    schema: RecipeSchema,
    signals: ['image', 'model', 'served_model_name', 'context_size', 'port', 'gpus', 'env', 'revision'],
    load: loadRecipeFile,
  },
  {
    kind: 'manifest',
    schema: ManifestSchema,
    signals: ['recipes', 'absent'],
    collect: (value, _dir, report) => manifestRules(value, report),
  },
];

const compiled = new Map<ConfigKind, TypeCheck<TSchema>>();
function checker(r: KindRule): TypeCheck<TSchema> {
  let c = compiled.get(r.kind);
  if (!c) compiled.set(r.kind, (c = TypeCompiler.Compile(r.schema)));
  return c;
}

/** Collects a file's problems; keeps one per key and line. */
class Findings {
  readonly list: Problem[] = [];
  private readonly seen = new Set<string>();
  constructor(private readonly text: string) {}

  add(path: readonly string[], reason: string, severity: Problem['severity'] = 'error'): void {
    const p = { line: lineOfMember(this.text, path), key: memberName(path), severity, reason };
    const id = `${p.line}\u0000${p.key}\u0000${severity}`;
    if (this.seen.has(id)) return;
    this.seen.add(id);
    this.list.push(p);
  }
}

/** The whole-file problem of a file that cannot be read (fixed words, never its content). */
function readProblem(path: string): string | undefined {
  try {
    if (statSync(path).isDirectory()) return 'is a directory';
  } catch (err) {
    return (err as { code?: unknown })?.code === 'ENOENT' ? 'does not exist' : 'is not readable';
  }
  return undefined;
}

/**
 * Checks one configuration file. `env` answers whether the variables named by `*_env` keys
 * are set (unset: a warning). Never throws for anything about the file.
 */
export function checkConfigFile(path: string, env: NodeJS.ProcessEnv): FileReport {
  const whole = (reason: string, line = 0): FileReport => ({
    file: path,
    kind: null,
    problems: [{ line, key: '-', severity: 'error', reason }],
  });
  const early = readProblem(path);
  if (early) return whole(early);
  let text: string;
  try {
    text = readSmallFile(path);
  } catch (err) {
    const code = (err as { code?: unknown })?.code;
    return whole(
      code === 'ENOTREG' ? 'is not a regular file' : code === 'EFBIG' ? 'is larger than 1 MiB' : 'is not readable',
    );
  }
  let raw: Record<string, unknown>;
  try {
    raw = parseToml(text, { integersAsBigInt: true }) as Record<string, unknown>;
  } catch (err) {
    // The parser's line only: its message quotes the text around the fault.
    const line = (err as { line?: unknown })?.line;
    return whole('not valid TOML', typeof line === 'number' && Number.isInteger(line) && line > 0 ? line : 0);
  }
  const kinds = RULES.filter((r) => r.signals.some((s) => Object.hasOwn(raw, s)));
  if (kinds.length === 0) return whole('none of the tables of a router, node, fleet, policy, recipe or manifest file');
  if (kinds.length > 1)
    return whole(
      `holds the tables of several kinds of file (${kinds.map((k) => k.kind).join(', ')}): one kind per file`,
    );
  const rule = kinds[0]!;
  const found = new Findings(text);
  const plain = toPlain(rule.schema, raw);
  const schemaOk = schemaProblems(rule, raw, plain, found);
  // Rules the loader checks only once the schema holds, reported beside the schema's problems.
  sectionProblems(rule, plain, found);
  const dir = dirname(resolve(path));
  if (schemaOk) {
    if (rule.load) loaderProblem(rule, path, plain, found);
    if (rule.collect) crossMemberProblems(rule, plain, dir, found);
    if (rule.kind === 'policy') policyProblems(plain as Static<typeof PolicyFile>, dir, found);
    referenceProblems(rule, plain, dir, env, found);
  }
  // Directories a key names, whatever else is wrong (a key of the wrong type is skipped).
  for (const d of directoryProblems(rule.kind, plain, dir)) found.add(d.at, d.reason, d.severity);
  envWarnings(plain, [], env, found);
  return { file: path, kind: rule.kind, problems: found.list.sort((a, b) => a.line - b.line) };
}

/** The parsed TOML as plain JSON with the schema's defaults (as the loaders see it). */
function toPlain(schema: TSchema, raw: unknown): Record<string, unknown> {
  return Value.Default(
    schema,
    JSON.parse(JSON.stringify(raw, (_k, v: unknown) => (typeof v === 'bigint' ? Number(v) : v))),
  ) as Record<string, unknown>;
}

/** Every schema problem, one per member. Returns true when there is none. */
function schemaProblems(rule: KindRule, raw: unknown, plain: unknown, found: Findings): boolean {
  let ok = true;
  const float = floatForInteger(rule.schema, raw, '');
  if (float !== undefined) {
    ok = false;
    found.add(pointerPath(float), 'must be an integer (no decimal point)');
  }
  const seen = new Set<string>();
  for (const e of checker(rule).Errors(plain)) {
    ok = false;
    if (seen.has(e.path)) continue;
    seen.add(e.path);
    found.add(pointerPath(e.path), schemaReason(e));
  }
  return ok;
}

/** A schema error in words: the schema's own terms and bounds, never the value. */
function schemaReason(e: ValueError): string {
  const name = e.path.slice(e.path.lastIndexOf('/') + 1);
  switch (e.type) {
    case ValueErrorType.ObjectAdditionalProperties:
      return 'unknown key (not allowed here)';
    case ValueErrorType.ObjectRequiredProperty:
      return 'is required';
    case ValueErrorType.StringPattern: {
      const hint = MEMBER_HINTS.get(name);
      return `does not have the expected form${hint ? ` (${hint})` : ''}`;
    }
    case ValueErrorType.Union: {
      const consts = ((e.schema as { anyOf?: { const?: unknown }[] }).anyOf ?? []).map((s) => s.const);
      return consts.length > 0 && consts.every((c) => typeof c === 'string')
        ? `must be one of: ${consts.join(', ')}`
        : 'has the wrong type or form';
    }
    default:
      // TypeBox's messages name the expected type and the schema's bound only.
      return e.message.charAt(0).toLowerCase() + e.message.slice(1);
  }
}

/** Where a builder's message says its member is, before the reason (quoted values already cut out). */
const WHERE_IN_MESSAGE = /^(?:upstreams?(?:\/\d+)?(?: of)? )?(?:\/models\/\d+ \(alias\) )?/;

/**
 * Every rule across members the server's own builder refuses (a name declared twice, a pair
 * half given, an upstream that is no URL, a `nats_url` listing a server twice), each placed on
 * the member it names.
 */
function crossMemberProblems(rule: KindRule, plain: Record<string, unknown>, dir: string, found: Findings): void {
  const report: ConfigReport = (err) => {
    const { at, reason } = placeMessage(err.message, rule, plain);
    if (err.member === undefined) return found.add(at, reason);
    // Placed by its member: the message's own words for where (`upstreams/1 of /models/3
    // (alias "m")`) are left out of the reason.
    found.add(pointerPath(err.member), reason.replace(WHERE_IN_MESSAGE, ''));
  };
  try {
    rule.collect!(plain, dir, report);
  } catch (err) {
    // A fault the builder did not expect of a value the schema passed: said, never thrown on.
    if (!(err instanceof ConfigError)) found.add([], 'cannot be checked');
    else report(err);
  }
}

/**
 * The first fault the server's own loader refuses beyond the schema (a recipe: its file's
 * size), placed on the key its message names.
 */
function loaderProblem(rule: KindRule, path: string, plain: Record<string, unknown>, found: Findings): void {
  try {
    rule.load!(path);
  } catch (err) {
    if (!(err instanceof ConfigError)) {
      found.add([], 'cannot be checked');
      return;
    }
    const { at, reason } = placeMessage(err.message, rule, plain);
    found.add(at, reason);
  }
}

/** The member a loader's message is about, and the message without any value it quotes. */
function placeMessage(
  message: string,
  rule: KindRule,
  plain: Record<string, unknown>,
): { at: string[]; reason: string } {
  const text = message.replace(/^[a-z]+ configuration:? /, '');
  const member = /^invalid member (\/\S*)(?: \((.*)\))?$/.exec(text);
  if (member) return { at: pointerPath(member[1]!), reason: member[2] ?? 'is invalid' };
  const reason = text.replace(/ of "[^"]*"/g, '').replace(/ "[^"]*"/g, '');
  // A named entry of [[models]] or [[nodes]]: the last one of that name (a repeat is the fault).
  const named = /"([^"]*)"/.exec(text)?.[1];
  for (const [list, id] of [
    ['models', 'alias'],
    ['nodes', 'host_id'],
  ] as const) {
    const items = plain[list];
    if (named === undefined || !Array.isArray(items)) continue;
    const i = items.map((x: Record<string, unknown>) => x?.[id]).lastIndexOf(named);
    if (i < 0) continue;
    const key = Object.keys(items[i] as object).find((k) => new RegExp(`\\b${k}\\b`).test(reason)) ?? id;
    return { at: [list, String(i), key], reason };
  }
  const words = text.match(/[a-z][a-z0-9_]*/g) ?? [];
  const table = rule.table
    ? (rule.schema as { properties?: Record<string, { properties?: object }> }).properties?.[rule.table]
    : undefined;
  const inTable = words.find((w) => Object.hasOwn(table?.properties ?? {}, w));
  if (inTable && rule.table) return { at: [rule.table, inTable], reason };
  const top = words.find((w) => Object.hasOwn((rule.schema as { properties?: object }).properties ?? {}, w));
  return { at: top ? [top] : [], reason };
}

/** `listen` and the TLS pair of a router, node or fleet section, whatever else is wrong. */
function sectionProblems(rule: KindRule, plain: Record<string, unknown>, found: Findings): void {
  const t = rule.table ? plain[rule.table] : undefined;
  if (!rule.table || !t || typeof t !== 'object') return;
  const s = t as Record<string, unknown>;
  if (typeof s['listen'] === 'string') {
    try {
      parseListen(s['listen'], rule.kind);
    } catch {
      found.add([rule.table, 'listen'], 'must be HOST:PORT (port 0 to 65535)');
    }
  }
  const cert = s['tls_cert_file'];
  const key = s['tls_key_file'];
  if ((cert === undefined) !== (key === undefined))
    found.add(
      [rule.table, cert === undefined ? 'tls_cert_file' : 'tls_key_file'],
      'is missing (tls_cert_file and tls_key_file go together)',
    );
}

/** The policy's rules across members, checked without reading any credential's value. */
function policyProblems(p: Static<typeof PolicyFile>, dir: string, found: Findings): void {
  const ids = new Set<string>();
  p.clients.forEach((c, i) => {
    const at = ['clients', String(i)];
    if (ids.has(c.id)) found.add([...at, 'id'], 'client is declared twice');
    ids.add(c.id);
    if ((c.credential_env === undefined) === (c.credential_file === undefined))
      found.add(at, 'needs exactly one of credential_env or credential_file');
    if (c.credential_file !== undefined) {
      const why = fileProblem(resolve(dir, c.credential_file), 64 * 1024);
      // A credential file that is not there yet is handed over at run time (systemd's
      // LoadCredential, a mounted secret), as an unset *_env variable is: a warning, not an
      // error, unless --strict. One that is there must be readable and not empty.
      if (why === 'names a file that does not exist')
        found.add([...at, 'credential_file'], 'names a file that does not exist here', 'warning');
      else if (why) found.add([...at, 'credential_file'], why);
    }
  });
}

/** Why a file a key names cannot be read, in fixed words; undefined when it can. */
function fileProblem(path: string, max?: number): string | undefined {
  const early = readProblem(path);
  if (early) return `names a file that ${early}`;
  try {
    const text = readSmallFile(path, max);
    if (text.trim() === '') return 'names a file that is empty';
  } catch (err) {
    const code = (err as { code?: unknown })?.code;
    return code === 'ENOTREG' ? 'names a file that is not a regular file' : 'names a file that is not readable';
  }
  return undefined;
}

/** Files a router, node or fleet names: its policy (readable and itself valid) and its TLS pair. */
function referenceProblems(
  rule: KindRule,
  plain: Record<string, unknown>,
  dir: string,
  env: NodeJS.ProcessEnv,
  found: Findings,
): void {
  if (!rule.table) return;
  const t = plain[rule.table] as Record<string, unknown> | undefined;
  if (!t) return;
  const policy = t['authorization_policy'];
  if (typeof policy === 'string') {
    const at = [rule.table, 'authorization_policy'];
    const file = resolve(dir, policy);
    const why = fileProblem(file);
    if (why) found.add(at, why);
    else {
      const report = checkConfigFile(file, env);
      if (report.kind !== 'policy' || report.problems.some((p) => p.severity === 'error'))
        found.add(at, 'names a file that is not a valid authorization policy (run config check on it)');
    }
  }
  const cert = t['tls_cert_file'];
  const key = t['tls_key_file'];
  if (typeof cert === 'string' && typeof key === 'string') {
    try {
      readTlsPair({ certFile: resolve(dir, cert), keyFile: resolve(dir, key) }, rule.kind);
    } catch (err) {
      const text = err instanceof ConfigError ? err.message.replace(/^[a-z]+ configuration: /, '') : 'is invalid';
      found.add([rule.table, text.startsWith('tls_key_file') ? 'tls_key_file' : 'tls_cert_file'], text);
    }
  }
}

/**
 * A warning for each `*_env` key whose variable is unset or empty here: a build machine or
 * a CI job lacks the runtime environment, so this is not an error unless `--strict`.
 */
function envWarnings(v: unknown, at: string[], env: NodeJS.ProcessEnv, found: Findings): void {
  if (Array.isArray(v)) {
    v.forEach((x, i) => envWarnings(x, [...at, String(i)], env, found));
    return;
  }
  if (!v || typeof v !== 'object') return;
  for (const [k, x] of Object.entries(v)) {
    if (k.endsWith('_env') && typeof x === 'string' && /^[A-Za-z_][A-Za-z0-9_]{0,127}$/.test(x)) {
      const value = envVar(env, x);
      if (!value?.trim())
        found.add(
          [...at, k],
          `environment variable ${x} is ${value === undefined ? 'not set' : 'empty'} here`,
          'warning',
        );
    } else envWarnings(x, [...at, k], env, found);
  }
}
