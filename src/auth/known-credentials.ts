import { envVar } from '../config/env-var.js';
import type { NatsConnection } from '../config/node-config.js';
import { digest } from './api-keys.js';
import type { AuthorizationPolicy } from './policy.js';

/**
 * Whether a value is a credential a controller or the fleet knows: a policy client's token,
 * its NATS password or token, or one of `secrets` (a key it sends), compared by digest as the
 * router compares its own. What holds one is never exported or passed on (a `tracestate`).
 */
export function knownCredential(
  policy: AuthorizationPolicy,
  nats: NatsConnection | undefined,
  env: NodeJS.ProcessEnv,
  ...secrets: (string | undefined)[]
): (value: string) => boolean {
  const digests = new Set(policy.clientsByDigest().keys());
  const natsSecrets = [nats?.passwordEnv, nats?.tokenEnv].map((name) =>
    name === undefined ? undefined : envVar(env, name),
  );
  for (const v of [...natsSecrets, ...secrets]) if (v) digests.add(digest(v));
  return (value) => digests.has(digest(value));
}
