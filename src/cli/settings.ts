import { readSmallFile } from '../config/read-small-file.js';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S } from './http-read.js';
import { checkOrigin, type SafeOrigin } from '../auth/origin-policy.js';
import { UsageFailure } from './read-errors.js';
import { envVar } from '../config/env-var.js';

/** Marks parsers that report repeats to an OptionTracker (refuseRepeatedOptions leaves them be). */
export const TRACKED = Symbol('svc.trackedOption');
function tracked<F extends object>(fn: F): F {
  (fn as { [TRACKED]?: boolean })[TRACKED] = true;
  return fn;
}

/**
 * Commander lets the last of a repeated option win; SPEC.md wants repeats rejected. Each
 * option's argParser reports here when it already had a value (for valueless flags commander
 * also calls the parser, with `undefined`), and the action refuses the whole command line.
 */
export class OptionTracker {
  private repeated = false;

  /** An argParser that keeps the raw value and remembers a repeat. */
  value(): (raw: string, previous: unknown) => string {
    return tracked((raw: string, previous: unknown) => {
      if (previous !== undefined) this.repeated = true;
      return raw;
    });
  }

  /** The same for a valueless flag (`--active-only`, `--json`, `--active`). */
  flag(): (raw: unknown, previous: unknown) => boolean {
    return tracked((_raw: unknown, previous: unknown) => {
      if (previous !== undefined) this.repeated = true;
      return true;
    });
  }

  /** Thrown when: some option was given twice (UsageFailure 'duplicate'). */
  check(): void {
    if (this.repeated) throw new UsageFailure('duplicate');
  }
}

const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
// Printable ASCII without spaces: what a bearer credential can be without header injection.
const TOKEN_RE = /^[\x21-\x7e]{1,4096}$/;
export const DEFAULT_ROUTER_URL = 'http://127.0.0.1:8000';
export const DEFAULT_CREDENTIAL_ENV = 'SVC_ROUTER_TOKEN';
const MAX_FILE_BYTES = 64 * 1024;

/** Thrown when: `name` is not an environment variable name (UsageFailure 'authEnv'). */
export function checkEnvName(name: string): string {
  if (!ENV_NAME_RE.test(name)) throw new UsageFailure('authEnv');
  return name;
}

/**
 * The credential: surrounding whitespace trimmed (a value pasted with its newline still works).
 * Thrown when: unset or empty ('noCredential'), or not a bearer token ('badCredential').
 */
export function checkCredential(value: string | undefined): string {
  const v = value?.trim() ?? '';
  if (v === '') throw new UsageFailure('noCredential');
  if (!TOKEN_RE.test(v)) throw new UsageFailure('badCredential');
  return v;
}

/**
 * `--timeout` / `timeout`: decimal seconds, greater than 0 and at most 30.
 * Thrown when: anything else (UsageFailure 'timeout').
 */
export function parseTimeout(v: string | number): number {
  // Plain decimals as people write them: `5`, `0.5`, `.5`, `2.` (no sign, exponent or hex).
  const n =
    typeof v === 'number' ? v : /^(?:[0-9]{1,3}(?:\.[0-9]{0,20})?|\.[0-9]{1,20})$/.test(v) ? Number(v) : Number.NaN;
  if (!Number.isFinite(n) || n <= 0 || n > MAX_TIMEOUT_S) throw new UsageFailure('timeout');
  return n;
}

/** The settings file's members, all optional; any other key is an error. */
interface SettingsFile {
  router_url?: string;
  auth_env?: string;
  credential_env_file?: string;
  timeout?: number;
}

/** What `router diagnose` connects with. */
export interface DiagnoseSettings {
  readonly origin: SafeOrigin;
  readonly token: string;
  readonly timeoutS: number;
}

export interface DiagnoseOptions {
  readonly routerUrl?: string;
  readonly authEnv?: string;
  readonly timeout?: string;
  readonly config?: string;
}

/**
 * Resolves diagnosis settings, highest precedence first: explicit options, the process
 * environment (`SVC_ROUTER_URL`, `SVC_ROUTER_TOKEN`), the settings file, the defaults.
 * - origin: --router-url, SVC_ROUTER_URL, `router_url`, http://127.0.0.1:8000;
 * - credential variable: --auth-env; else SVC_ROUTER_TOKEN when set in the environment; else
 *   `auth_env`; else SVC_ROUTER_TOKEN. Its value comes from the process environment, or, only
 *   when the settings file declares `credential_env_file`, from that file;
 * - timeout: --timeout, `timeout`, 5 seconds.
 * An empty environment variable counts as unset. The default settings file may be absent;
 * an explicit --config must exist; any existing file must be valid.
 * Thrown when: any of that is invalid (UsageFailure; messages name no value).
 */
export function resolveDiagnoseSettings(opts: DiagnoseOptions, env: NodeJS.ProcessEnv): DiagnoseSettings {
  const { file, dir } = loadSettingsFile(opts.config, env);
  const envUrl = nonEmpty(env['SVC_ROUTER_URL']);
  const origin = checkOrigin(opts.routerUrl ?? envUrl ?? file.router_url ?? DEFAULT_ROUTER_URL);
  const timeoutS = opts.timeout !== undefined ? parseTimeout(opts.timeout) : (file.timeout ?? DEFAULT_TIMEOUT_S);
  let name: string;
  if (opts.authEnv !== undefined) name = checkEnvName(opts.authEnv);
  else if (nonEmpty(envVar(env, DEFAULT_CREDENTIAL_ENV)) !== undefined) name = DEFAULT_CREDENTIAL_ENV;
  else name = file.auth_env ?? DEFAULT_CREDENTIAL_ENV;
  let value = nonEmpty(envVar(env, name));
  if (value === undefined && file.credential_env_file !== undefined) {
    value = readCredentialFile(resolve(dir, file.credential_env_file)).get(name);
  }
  return { origin, token: checkCredential(value), timeoutS };
}

function nonEmpty(v: string | undefined): string | undefined {
  return v === undefined || v === '' ? undefined : v;
}

/** `$SVC_SERVING_HOME/router-diagnostics.toml`, else `~/.svc-serving/router-diagnostics.toml`. */
export function defaultSettingsPath(env: NodeJS.ProcessEnv): string {
  const home = nonEmpty(env['SVC_SERVING_HOME']) ?? join(homedir(), '.svc-serving');
  return join(home, 'router-diagnostics.toml');
}

function loadSettingsFile(explicit: string | undefined, env: NodeJS.ProcessEnv): { file: SettingsFile; dir: string } {
  const path = resolve(explicit ?? defaultSettingsPath(env));
  let text: string;
  try {
    text = readBounded(path);
  } catch (err) {
    // Only the default location may be missing; a declared file that is not there is a mistake.
    if (explicit === undefined && (err as { code?: unknown }).code === 'ENOENT')
      return { file: {}, dir: dirname(path) };
    throw new UsageFailure(explicit === undefined ? 'settingsInvalid' : 'settingsUnreadable');
  }
  let raw: Record<string, unknown>;
  try {
    raw = parseToml(text) as Record<string, unknown>;
  } catch {
    throw new UsageFailure('settingsInvalid');
  }
  return { file: checkSettings(raw), dir: dirname(path) };
}

function checkSettings(raw: Record<string, unknown>): SettingsFile {
  const out: SettingsFile = {};
  const str = (v: unknown): string => {
    if (typeof v !== 'string' || v.length === 0 || v.length > 4096) throw new UsageFailure('settingsInvalid');
    return v;
  };
  for (const [key, v] of Object.entries(raw)) {
    if (key === 'router_url') out.router_url = str(v);
    else if (key === 'auth_env') {
      if (!ENV_NAME_RE.test(str(v))) throw new UsageFailure('settingsInvalid');
      out.auth_env = v as string;
    } else if (key === 'credential_env_file') out.credential_env_file = str(v);
    else if (key === 'timeout') {
      if (typeof v !== 'number' && typeof v !== 'bigint') throw new UsageFailure('settingsInvalid');
      try {
        out.timeout = parseTimeout(Number(v));
      } catch {
        throw new UsageFailure('settingsInvalid');
      }
    } else throw new UsageFailure('settingsInvalid');
  }
  return out;
}

/**
 * A dotenv-style file: `KEY=VALUE` lines, optional `export `, `#` comments and blank lines;
 * a value wrapped in matching single or double quotes loses them (no escapes, no expansion).
 * Thrown when: unreadable, over 64 KiB or with any other line (UsageFailure 'credentialFile').
 */
export function readCredentialFile(path: string): Map<string, string> {
  let text: string;
  try {
    text = readBounded(path);
  } catch {
    throw new UsageFailure('credentialFile');
  }
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    const l = line.replace(/\r$/, '').trim();
    if (l === '' || l.startsWith('#')) continue;
    const m = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/.exec(l);
    if (!m) throw new UsageFailure('credentialFile');
    let v = m[2]!;
    if (v.length >= 2 && (v[0] === '"' || v[0] === "'") && v.endsWith(v[0])) v = v.slice(1, -1);
    out.set(m[1]!, v);
  }
  return out;
}

function readBounded(path: string): string {
  // Never blocks on a FIFO or reads a device without end: a regular file of 64 KiB at most.
  return readSmallFile(path, MAX_FILE_BYTES);
}
