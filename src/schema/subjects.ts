import { InvalidInputError } from '../errors.js';
import { OWNERS, type Owner } from './enums.js';
import { isHostId } from './primitives.js';

/*
 * Every NATS subject of the contract (CONTRACT.md, NATS subjects), built and parsed here
 * only. Each lives under its host, `svc.v1.<host>.`, so that a deployment's permissions can
 * let a node's user publish only under its own host; the host is a host ID (SPEC.md rule 1),
 * which has no `.`, `*`, `>` or whitespace, so it is always exactly one subject token.
 */

const ROOT = 'svc.v1.';

/** The three lookups a router serves over request/reply (CONTRACT.md, NATS subjects). */
export const REQUEST_LOOKUPS = ['get', 'session', 'active'] as const;
export type RequestLookup = (typeof REQUEST_LOOKUPS)[number];

/** A subject of the contract, parsed. */
export type ContractSubject =
  | { readonly kind: 'obs'; readonly host: string; readonly owner: Owner }
  | { readonly kind: 'workloads'; readonly host: string }
  | { readonly kind: 'resync'; readonly host: string }
  | { readonly kind: 'requests'; readonly host: string; readonly lookup: RequestLookup };

/** `svc.v1.<host>.`. Thrown when: `host` is not a host ID (InvalidInputError). */
function under(host: string): string {
  if (!isHostId(host)) throw new InvalidInputError();
  return `${ROOT}${host}.`;
}

/** `svc.v1.<host>.obs.<owner>`: where `owner`'s actor on `host` publishes its ObservationBatches. Thrown when: not a host ID or an owner (InvalidInputError). */
export function observationSubject(host: string, owner: Owner): string {
  if (!OWNERS.includes(owner)) throw new InvalidInputError();
  return `${under(host)}obs.${owner}`;
}

/** `svc.v1.<host>.obs.*`: every owner's observations of `host` (what its node fold subscribes to). Thrown when: not a host ID (InvalidInputError). */
export function observationPattern(host: string): string {
  return `${under(host)}obs.*`;
}

/** `svc.v1.<host>.workloads`: `node_workloads` by request/reply, served by the node controller. Thrown when: not a host ID (InvalidInputError). */
export function workloadsSubject(host: string): string {
  return `${under(host)}workloads`;
}

/** `svc.v1.<host>.resync`: where a node asks its actors for full windows. Thrown when: not a host ID (InvalidInputError). */
export function resyncSubject(host: string): string {
  return `${under(host)}resync`;
}

/** `svc.v1.<host>.requests.<lookup>`: a router's request lookup by request/reply. Thrown when: not a host ID or a lookup (InvalidInputError). */
export function requestsSubject(host: string, lookup: RequestLookup): string {
  if (!REQUEST_LOOKUPS.includes(lookup)) throw new InvalidInputError();
  return `${under(host)}requests.${lookup}`;
}

/**
 * The host token of a subject under `svc.v1.<token>.` (whatever follows it), or undefined
 * when the subject is not under one. The token is returned as written, host ID or not.
 */
export function subjectHost(subject: string): string | undefined {
  if (!subject.startsWith(ROOT)) return undefined;
  const dot = subject.indexOf('.', ROOT.length);
  return dot < 0 ? undefined : subject.slice(ROOT.length, dot);
}

/** Parses a subject of the contract: exactly one of the shapes above, with a host ID; undefined for anything else. */
export function parseSubject(subject: string): ContractSubject | undefined {
  const host = subjectHost(subject);
  if (host === undefined || !isHostId(host)) return undefined;
  const rest = subject.slice(ROOT.length + host.length + 1);
  if (rest === 'workloads') return { kind: 'workloads', host };
  if (rest === 'resync') return { kind: 'resync', host };
  if (rest.startsWith('obs.')) {
    const owner = OWNERS.find((o) => o === rest.slice(4));
    return owner === undefined ? undefined : { kind: 'obs', host, owner };
  }
  if (rest.startsWith('requests.')) {
    const lookup = REQUEST_LOOKUPS.find((l) => l === rest.slice(9));
    return lookup === undefined ? undefined : { kind: 'requests', host, lookup };
  }
  return undefined;
}
