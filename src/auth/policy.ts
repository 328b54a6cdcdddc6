import { createHash, timingSafeEqual } from 'node:crypto';
import { readSmallFile } from '../config/read-small-file.js';
import { resolve } from 'node:path';
import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { parse as parseToml } from 'smol-toml';
import { ConfigError, ForbiddenError, UnauthenticatedError } from '../errors.js';
import { HOST_ID_PATTERN, literalUnion } from '../schema/primitives.js';
import { envVar } from '../config/env-var.js';

/** Every grant this project knows; an unknown one is a start-up error. */
export const GRANTS = [
  'workloads:read',
  'requests:read',
  'node-admin:lifecycle',
  'node-admin:bootstrap',
  'media:submit',
] as const;
export type Grant = (typeof GRANTS)[number];

export const MAX_CLIENTS = 256;
const ENV_NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_]{0,127}$';

const ClientEntry = Type.Object(
  {
    id: Type.String({ pattern: HOST_ID_PATTERN }),
    grants: Type.Array(literalUnion(GRANTS), { maxItems: GRANTS.length, uniqueItems: true }),
    credential_env: Type.Optional(Type.String({ pattern: ENV_NAME_PATTERN })),
    credential_file: Type.Optional(Type.String({ minLength: 1, maxLength: 4096 })),
  },
  { additionalProperties: false },
);
/** The authorization policy file (TOML): its clients and their grants. */
export const PolicyFile = Type.Object(
  { clients: Type.Array(ClientEntry, { maxItems: MAX_CLIENTS }) },
  { additionalProperties: false },
);
type PolicyFile = Static<typeof PolicyFile>;
const checkPolicy = TypeCompiler.Compile(PolicyFile);

/** A client of the policy, as the server sees it: no credential, only its digest. */
export interface Client {
  readonly id: string;
  readonly grants: ReadonlySet<Grant>;
}

interface Entry extends Client {
  readonly digest: Buffer;
}

const MAX_TOKEN_LENGTH = 4096;
const digest = (token: string): Buffer => createHash('sha256').update(token, 'utf8').digest();

/**
 * The bounded authorization policy (CONTRACT.md). Credentials are resolved once at start from
 * environment variables or files and kept only as SHA-256 digests; lookups compare digests in
 * constant time against every client.
 */
export class AuthorizationPolicy {
  private constructor(private readonly entries: readonly Entry[]) {}

  /** Thrown when: the file is unreadable or invalid, or a client's credential is missing (ConfigError naming the client and variable, never a value). */
  static load(path: string, env: NodeJS.ProcessEnv = process.env): AuthorizationPolicy {
    let text: string;
    try {
      text = readSmallFile(path);
    } catch (cause) {
      throw new ConfigError('authorization policy file is not readable', { cause });
    }
    let raw: unknown;
    try {
      raw = parseToml(text);
    } catch {
      throw new ConfigError('authorization policy is not valid TOML');
    }
    return AuthorizationPolicy.fromObject(raw, env, resolve(path, '..'));
  }

  /** Thrown when: see load(). */
  static fromObject(raw: unknown, env: NodeJS.ProcessEnv, baseDir: string): AuthorizationPolicy {
    const plain = JSON.parse(JSON.stringify(raw ?? {}));
    if (!checkPolicy.Check(plain)) {
      const first = [...checkPolicy.Errors(plain)][0];
      const path = first?.path || '/';
      // A member of a client is named with that client's id when the id itself is valid (the
      // id is the operator's own name for it; a credential value is never shown).
      const at = /^\/clients\/(\d+)\/(.+)$/.exec(path);
      const id = at ? (plain as { clients?: Array<{ id?: unknown }> }).clients?.[Number(at[1])]?.id : undefined;
      if (at && typeof id === 'string' && new RegExp(HOST_ID_PATTERN).test(id) && !at[2]!.startsWith('id')) {
        throw new ConfigError(`authorization policy: client "${id}": invalid member ${at[2]}`);
      }
      throw new ConfigError(`authorization policy: invalid member ${path}`);
    }
    const seenIds = new Set<string>();
    const seenDigests = new Map<string, string>();
    const entries = (plain as PolicyFile).clients.map((c): Entry => {
      if (seenIds.has(c.id)) throw new ConfigError(`authorization policy: client "${c.id}" is declared twice`);
      seenIds.add(c.id);
      const token = resolveCredential(c, env, baseDir);
      const d = digest(token);
      const dup = seenDigests.get(d.toString('hex'));
      if (dup) throw new ConfigError(`authorization policy: clients "${dup}" and "${c.id}" share one credential`);
      seenDigests.set(d.toString('hex'), c.id);
      return { id: c.id, grants: new Set(c.grants), digest: d };
    });
    return new AuthorizationPolicy(entries);
  }

  /** The client whose credential equals `token`, compared in constant time against all. */
  authenticate(token: string): Client | undefined {
    const d = digest(token);
    let found: Entry | undefined;
    for (const e of this.entries) if (timingSafeEqual(e.digest, d) && !found) found = e;
    return found;
  }

  /** The client an Authorization header names. Thrown when: missing, malformed or unknown (UnauthenticatedError). */
  identify(header: string | string[] | undefined): Client {
    const token = bearerToken(header);
    const client = token === undefined ? undefined : this.authenticate(token);
    if (!client) throw new UnauthenticatedError();
    return client;
  }

  /**
   * Checks an Authorization header for `grant`.
   * Thrown when: the header is missing, malformed or names no client (UnauthenticatedError);
   * the client lacks the grant (ForbiddenError).
   */
  authorize(header: string | string[] | undefined, grant: Grant): Client {
    const client = this.identify(header);
    if (!client.grants.has(grant)) throw new ForbiddenError();
    return client;
  }

  /** Each client's credential digest (SHA-256, hex) with its id: for lookups where constant time does not matter. */
  clientsByDigest(): ReadonlyMap<string, string> {
    return new Map(this.entries.map((e) => [e.digest.toString('hex'), e.id]));
  }

  get size(): number {
    return this.entries.length;
  }
}

/** The token of an `Authorization: Bearer <token>` header, or undefined when absent or malformed. */
export function bearerToken(header: string | string[] | undefined): string | undefined {
  if (typeof header !== 'string' || header.length > MAX_TOKEN_LENGTH + 16) return undefined;
  const m = /^Bearer +([\x21-\x7e]+) *$/i.exec(header);
  return m?.[1];
}

function resolveCredential(c: PolicyFile['clients'][number], env: NodeJS.ProcessEnv, baseDir: string): string {
  const hasEnv = c.credential_env !== undefined;
  const hasFile = c.credential_file !== undefined;
  if (hasEnv === hasFile)
    throw new ConfigError(
      `authorization policy: client "${c.id}" needs exactly one of credential_env or credential_file`,
    );
  let token: string | undefined;
  if (hasEnv) {
    token = envVar(env, c.credential_env!);
    if (!token?.trim())
      throw new ConfigError(
        `authorization policy: client "${c.id}": environment variable ${c.credential_env} ${token === undefined ? 'is not set' : 'is empty'}`,
      );
  } else {
    const file = resolve(baseDir, c.credential_file!);
    try {
      token = readSmallFile(file, 64 * 1024).trim();
    } catch (err) {
      // What is wrong with the file is named (the client is, too; the path is in its policy).
      const code = (err as { code?: unknown })?.code;
      const why =
        code === 'ENOTREG' || code === 'EISDIR'
          ? 'is not a regular file'
          : code === 'ENOENT'
            ? 'does not exist'
            : 'is not readable';
      throw new ConfigError(`authorization policy: client "${c.id}": credential_file ${why}`);
    }
    if (!token) throw new ConfigError(`authorization policy: client "${c.id}": credential file is empty`);
  }
  token = token.trim();
  if (token.length > MAX_TOKEN_LENGTH || !/^[\x21-\x7e]+$/.test(token)) {
    throw new ConfigError(
      `authorization policy: client "${c.id}": credential must be 1-4096 printable ASCII characters`,
    );
  }
  return token;
}
