import { isIPv4 } from 'node:net';
import { UsageFailure } from '../errors.js';

/** A URL that passed the policy: only an origin, and one we may send a credential to. */
export interface SafeOrigin {
  /** `scheme://host[:port]` as the WHATWG parser serializes it (host normalized). */
  readonly origin: string;
  readonly secure: boolean;
}

// Scheme, then an authority with no userinfo, path, query, fragment, backslash or whitespace,
// then at most one `/`. Checked on the raw text because the WHATWG parser silently drops or
// rewrites some of these (tabs, `\`, an empty `?`), and we want to refuse, not repair.
const ORIGIN_RE = /^(https?):\/\/([^/?#@\\\s]+)\/?$/i;
const MAX_URL_LENGTH = 2048;

/**
 * Checks a router or controller URL. Returns the normalized origin.
 * Thrown when: it is not a bare origin (UsageFailure 'origin'), or it is plain HTTP to a host
 * that is not a loopback or private IP literal (UsageFailure 'plainHttp'). Neither message
 * contains the URL.
 */
export function checkOrigin(raw: string): SafeOrigin {
  if (raw.length > MAX_URL_LENGTH || !ORIGIN_RE.test(raw)) throw new UsageFailure('origin');
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new UsageFailure('origin');
  }
  // Belt and braces after the regex: the parsed URL must really be an origin.
  if (url.username !== '' || url.password !== '' || url.pathname !== '/' || url.search !== '' || url.hash !== '') {
    throw new UsageFailure('origin');
  }
  // `http://host:` (an empty port) and port 0 name no server: a usage error, not a failed read.
  const authority = raw.slice(raw.indexOf('//') + 2).replace(/\/$/, '');
  if (authority.endsWith(':') || url.port === '0') throw new UsageFailure('origin');
  const secure = url.protocol === 'https:';
  if (!secure && !isPrivateIpLiteral(url.hostname)) throw new UsageFailure('plainHttp');
  return { origin: url.origin, secure };
}

/**
 * True for a WHATWG-serialized hostname that is a loopback or private IP literal: IPv4
 * 127/8, 10/8, 172.16/12, 192.168/16; IPv6 ::1, fc00::/7 and IPv4-mapped forms of the IPv4
 * ranges. The parser has already turned `0x7f.1`, `2130706433` or `[::ffff:127.0.0.1]` into
 * `127.0.0.1` and `[::ffff:7f00:1]`, so only canonical spellings reach this function.
 */
export function isPrivateIpLiteral(hostname: string): boolean {
  if (isIPv4(hostname)) return isPrivateIPv4(hostname.split('.').map(Number));
  if (!hostname.startsWith('[') || !hostname.endsWith(']')) return false; // a DNS name
  const groups = expandIPv6(hostname.slice(1, -1));
  if (!groups) return false;
  const [g0, g1, g2, g3, g4, g5, g6, g7] = groups as [number, number, number, number, number, number, number, number];
  if (g0 === 0 && g1 === 0 && g2 === 0 && g3 === 0 && g4 === 0 && g5 === 0 && g6 === 0 && g7 === 1) return true; // ::1
  if ((g0 & 0xfe00) === 0xfc00) return true; // fc00::/7 unique local
  if (g0 === 0 && g1 === 0 && g2 === 0 && g3 === 0 && g4 === 0 && g5 === 0xffff) {
    return isPrivateIPv4([g6 >> 8, g6 & 0xff, g7 >> 8, g7 & 0xff]); // ::ffff:a.b.c.d
  }
  return false;
}

function isPrivateIPv4(o: number[]): boolean {
  const [a, b] = o as [number, number];
  return a === 127 || a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168);
}

/** Eight 16-bit groups of an IPv6 literal, or null when malformed. Accepts a dotted tail. */
function expandIPv6(text: string): number[] | null {
  if (text.includes('%')) return null; // zone ids are not origins
  let s = text;
  const dotted = /:(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (dotted) {
    if (!isIPv4(dotted[1]!)) return null;
    const o = dotted[1]!.split('.').map(Number) as [number, number, number, number];
    s = `${s.slice(0, dotted.index)}:${((o[0] << 8) | o[1]).toString(16)}:${((o[2] << 8) | o[3]).toString(16)}`;
  }
  const halves = s.split('::');
  if (halves.length > 2) return null;
  const part = (h: string): string[] => (h === '' ? [] : h.split(':'));
  const head = part(halves[0]!);
  const tail = halves.length === 2 ? part(halves[1]!) : [];
  const missing = 8 - head.length - tail.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return null;
  const all = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill('0'), ...tail];
  if (!all.every((g) => /^[0-9a-fA-F]{1,4}$/.test(g))) return null;
  return all.map((g) => parseInt(g, 16));
}
