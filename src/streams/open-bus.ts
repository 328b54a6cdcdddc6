import type { Logger } from 'pino';
import type { NatsConnection } from '../config/node-config.js';
import { ConfigError } from '../errors.js';
import type { Bus } from './bus.js';
import { InProcessBus } from './in-process-bus.js';
import { connectNatsBus } from './nats-bus.js';
import { envVar } from '../config/env-var.js';

/** A user name that is one plain subject token (usable in an inbox prefix). */
const USER_TOKEN_RE = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * The bus a process runs on: NATS when configured, else a fresh in-process bus. Secrets come
 * from the environment variables the configuration names, never from the file itself.
 * Thrown when: a named variable is unset (ConfigError naming the variable) or NATS refuses.
 */
export async function openBus(
  nats: NatsConnection | undefined,
  env: NodeJS.ProcessEnv,
  logger: Logger,
  name: string,
): Promise<Bus> {
  if (!nats) return new InProcessBus();
  const secret = (v: string | undefined): string | undefined => {
    if (v === undefined) return undefined;
    const value = envVar(env, v);
    if (!value) throw new ConfigError(`environment variable ${v} ${value === undefined ? 'is not set' : 'is empty'}`);
    return value;
  };
  return connectNatsBus({
    servers: [...nats.servers],
    ...(nats.user ? { user: nats.user } : {}),
    // Replies to this user's requests arrive under its own prefix (deploy/nats.conf lets each
    // user read only `_INBOX_<user>.>`, so no node can read the fleet's or another node's).
    ...(nats.user && USER_TOKEN_RE.test(nats.user) ? { inboxPrefix: `_INBOX_${nats.user}` } : {}),
    ...(nats.passwordEnv ? { pass: secret(nats.passwordEnv)! } : {}),
    ...(nats.tokenEnv ? { token: secret(nats.tokenEnv)! } : {}),
    name,
    logger,
  });
}
