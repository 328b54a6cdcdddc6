import { hash } from 'node:crypto';
import { ConfigError } from '../errors.js';
import { bearerToken } from '../auth/policy.js';
import { envVar } from '../config/env-var.js';

/**
 * The router's data-plane keys (`[server] api_keys_env`, comma-separated), kept only as
 * SHA-256 digests. Looking up a digest in a set reveals nothing about a key's bytes.
 */
export class DataPlaneKeys {
  private constructor(private readonly digests: ReadonlySet<string>) {}

  /** Thrown when: the variable is unset or holds no key (ConfigError naming the variable). */
  static fromEnv(name: string, env: NodeJS.ProcessEnv): DataPlaneKeys {
    const raw = envVar(env, name);
    const keys = (raw ?? '')
      .split(',')
      .map((k) => k.trim())
      .filter((k) => k.length > 0);
    if (keys.length === 0)
      throw new ConfigError(
        `router configuration: environment variable ${name} ${raw === undefined ? 'is not set' : 'holds no data-plane key'}`,
      );
    // A key no Authorization header can carry would authenticate nobody.
    if (!keys.every(isCredentialText))
      throw new ConfigError(
        `router configuration: environment variable ${name} holds a key that is not 1-4096 printable ASCII characters without spaces`,
      );
    return new DataPlaneKeys(new Set(keys.map(digest)));
  }

  /** The keys' digests (SHA-256, hex). */
  digestsHex(): string[] {
    return [...this.digests];
  }

  /** True when the Authorization header carries one of the keys. */
  accepts(header: string | string[] | undefined): boolean {
    const t = bearerToken(header);
    return t !== undefined && this.digests.has(digest(t));
  }
}

/** A credential a header can carry: 1-4096 printable ASCII characters, no space (as policy credentials). */
export function isCredentialText(v: string): boolean {
  return /^[\x21-\x7e]{1,4096}$/.test(v);
}

/** SHA-256 of a token, hex: what `digestsHex` holds. */
export function digest(token: string): string {
  // One-shot (UTF-8 in): this runs for every inference request.
  return hash('sha256', token, 'hex');
}
