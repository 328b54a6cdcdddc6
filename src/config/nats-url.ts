import { ConfigError } from '../errors.js';

/**
 * One server: `nats://HOST[:PORT]` or `tls://HOST[:PORT]`, a host name or address (IPv6 in
 * brackets) and a port of 1-65535, nothing else (no credentials, path or query): one that
 * could never be reached is a configuration error, not an unreachable server.
 */
const ONE_URL =
  '(nats|tls)://(\\[[0-9A-Fa-f:.]+\\]|[A-Za-z0-9._-]+)(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}))?';

/** The most servers one `nats_url` may list: a cluster's seed list, not an inventory. */
export const MAX_NATS_SERVERS = 16;

/** A single server URL (the grammar above), anchored. */
export const NATS_URL_PATTERN = `^${ONE_URL}$`;

/**
 * `nats_url`: one server URL, or several separated by commas (spaces around a comma allowed),
 * as the NATS CLI's `--server` and `NATS_URL` write a cluster's seed list.
 */
export const NATS_SERVERS_PATTERN = `^${ONE_URL}( *, *${ONE_URL}){0,${MAX_NATS_SERVERS - 1}}$`;

const SERVERS_RE = new RegExp(NATS_SERVERS_PATTERN);

/**
 * The servers of a `nats_url` value, in the order written (the client still shuffles them, as
 * NATS clients do, so that a cluster's clients spread over its members).
 * Thrown when: the value breaks the grammar, lists a server twice (a typo that would leave
 * one meant server out) or mixes `tls://` with `nats://` (TLS would then be required of every
 * server, which is not what a mixed list reads as); ConfigError naming `what`, never the value.
 */
export function parseNatsServers(value: string, what = 'nats_url'): string[] {
  if (!SERVERS_RE.test(value))
    throw new ConfigError(
      `${what} must be nats://HOST[:PORT] or tls://HOST[:PORT], or several of them separated by commas`,
    );
  const servers = value.split(',').map((s) => s.trim());
  const seen = new Set<string>();
  for (const s of servers) {
    const key = s.toLowerCase();
    if (seen.has(key)) throw new ConfigError(`${what} lists the same server twice`);
    seen.add(key);
  }
  const schemes = new Set(servers.map((s) => s.slice(0, s.indexOf(':')).toLowerCase()));
  if (schemes.size > 1)
    throw new ConfigError(`${what} mixes tls:// and nats:// servers (write tls:// for all of them, or for none)`);
  return servers;
}
