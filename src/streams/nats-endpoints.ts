/** How a failed NATS connection is told to an operator: where it was tried, and whether TLS was what failed. */

/** True for an error of TLS itself: the server offers none, or its certificate is not trusted (Node's codes, through causes). */
export function tlsFailure(err: unknown): boolean {
  for (
    let e = err, depth = 0;
    e !== undefined && e !== null && depth < 5;
    e = (e as { cause?: unknown }).cause, depth++
  ) {
    const { message, code } = e as { message?: unknown; code?: unknown };
    if (typeof message === 'string' && /\btls\b|certificate|ssl/i.test(message)) return true;
    if (typeof code === 'string' && /CERT|TLS|SSL|SELF_SIGNED|UNABLE_TO_VERIFY/.test(code)) return true;
  }
  return false;
}

/**
 * Where a connection was tried, for an operator's message: scheme, host and port of each
 * server, never a user, password, token, path or query (configurations refuse credentials in
 * the URL; this holds for any caller).
 */
export function endpoints(servers: string | readonly string[]): string {
  const list = typeof servers === 'string' ? [servers] : servers;
  return list.map(endpoint).join(', ');
}

function endpoint(s: string): string {
  const m = /^([a-z][a-z0-9+.-]*:\/\/)?(.*)$/is.exec(s)!;
  // Whatever comes before the last `@` may be a user, a password or a token (which may hold
  // `/`, `#` or a backslash, where a URL parser would end the authority): never looked at.
  const rest = m[2]!.slice(m[2]!.lastIndexOf('@') + 1);
  try {
    const u = new URL(`${m[1] ?? 'nats://'}${rest}`);
    if (u.username === '' && u.password === '' && u.host !== '') return `${u.protocol}//${u.host}`;
  } catch {
    // not a URL
  }
  return '(a server address that is not a URL)';
}
