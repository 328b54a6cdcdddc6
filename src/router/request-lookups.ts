import type { ActiveSummary, RouterRegistry } from './records/router-registry.js';
import { ErrorCode, InvalidArgumentError, NotFoundError, SvcError } from '../errors.js';
import type { LineageKey } from '../schema/diagnosis.js';
import type { Truncation } from '../schema/envelopes.js';
import { GENERATED_ID_RE, LEGACY_ID_RE, OPAQUE_ID_RE, type TerminalRecord } from '../schema/terminal-record.js';

/**
 * The router's request lookups, one implementation for both ways in: the HTTP routes
 * (`/v1/requests...`, router-routes.ts) and NATS request/reply (the host's requests subjects
 * of schema/subjects.ts, requests-responder.ts; the recent list is HTTP only, decision 0090).
 * Each returns the exact body the caller gets, or throws the coded error whose problem both
 * answer with, so the two can never drift apart.
 */

/**
 * Lookups that may read the decision log (get and history), at most this many at once per
 * router, HTTP and NATS together, and at most MAX_LOOKUP_WAITING more waiting their turn.
 * Each scans up to 64 MiB of retained files and holds every match: unbounded, a flood of 200
 * session lookups took a router to 4 GB and starved its data plane. One more than that is
 * refused at once with the fixed 503 (SVC_ERR_UNAVAILABLE).
 */
export const MAX_LOOKUP_SCANS = 4;
export const MAX_LOOKUP_WAITING = 64;
interface Gate {
  running: number;
  readonly waiting: Array<() => void>;
}
const gates = new WeakMap<RouterRegistry, Gate>();

/** Runs `scan` in its turn among the lookups of `registry`. Thrown when: MAX_LOOKUP_WAITING wait already (SvcError SVC_ERR_UNAVAILABLE). */
async function bounded<T>(registry: RouterRegistry, scan: () => Promise<T>): Promise<T> {
  let gate = gates.get(registry);
  if (gate === undefined) gates.set(registry, (gate = { running: 0, waiting: [] }));
  if (gate.running >= MAX_LOOKUP_SCANS) {
    if (gate.waiting.length >= MAX_LOOKUP_WAITING) throw new SvcError(ErrorCode.UNAVAILABLE);
    // The slot is handed over by the lookup that ends (running stays counted).
    await new Promise<void>((resolve) => gate.waiting.push(resolve));
  } else gate.running++;
  try {
    return await scan();
  } finally {
    const next = gate.waiting.shift();
    if (next) next();
    else gate.running--;
  }
}

/** Why an id or a lineage key's value is refused (the request id and lineage headers' grammar). */
export const ID_REASON = 'must be 1 to 128 letters, digits or ._:@/+=- characters';

/** `{"request": TerminalRecord}` for a generated or legacy id. Thrown when: the id is malformed (InvalidArgumentError naming `id`); no record (NotFoundError); too many lookups waiting (SVC_ERR_UNAVAILABLE). */
export async function lookupRequest(registry: RouterRegistry, id: string): Promise<{ request: TerminalRecord }> {
  if (!GENERATED_ID_RE.test(id) && !LEGACY_ID_RE.test(id)) throw new InvalidArgumentError('id', ID_REASON);
  const record = await bounded(registry, () => registry.lookup(id));
  if (!record) throw new NotFoundError();
  return { request: record };
}

/**
 * `{"requests": [...], "truncation": ...}`: the retained records whose session, task or
 * workbench run is `value`, newest first (an empty list is an answer, not a 404).
 * Thrown when: the value is not an opaque id (InvalidArgumentError naming `key`); too many lookups
 * waiting (SVC_ERR_UNAVAILABLE).
 */
export function lookupHistory(
  registry: RouterRegistry,
  key: LineageKey,
  value: string,
): Promise<{ requests: TerminalRecord[]; truncation: Truncation }> {
  if (!OPAQUE_ID_RE.test(value)) throw new InvalidArgumentError(key, ID_REASON);
  return bounded(registry, () => registry.history(key, value));
}

/**
 * `{"requests": [...], "truncation": ...}`: the terminal records the router finished last,
 * newest first, at most 50 (decision 0090). Memory only and synchronous, so not through the
 * lookup gate: nothing of it waits, and it costs one pass over the buffer's finish times.
 */
export function lookupRecent(registry: RouterRegistry): { requests: TerminalRecord[]; truncation: Truncation } {
  return registry.recent();
}

/** `{"requests": [...], "truncation": ...}`: the requests in flight, oldest first, at most 50. */
export function lookupActive(registry: RouterRegistry): { requests: ActiveSummary[]; truncation: Truncation } {
  return registry.activeSummaries();
}
