import type { ActiveSummary, RouterRegistry } from '../../actors/router-registry.js';
import { InvalidInputError, NotFoundError } from '../../errors.js';
import type { LineageKey } from '../../schema/diagnosis.js';
import type { Truncation } from '../../schema/envelopes.js';
import { GENERATED_ID_RE, LEGACY_ID_RE, OPAQUE_ID_RE, type TerminalRecord } from '../../schema/terminal-record.js';

/**
 * The router's three request lookups, one implementation for both ways in: the HTTP routes
 * (`/v1/requests...`, router-routes.ts) and NATS request/reply (`svc.v1.<host>.requests.*`,
 * requests-responder.ts). Each returns the exact body the caller gets, or throws the coded
 * error whose problem both answer with, so the two can never drift apart.
 */

/** `{"request": TerminalRecord}` for a generated or legacy id. Thrown when: the id is malformed (InvalidInputError); no record (NotFoundError). */
export async function lookupRequest(registry: RouterRegistry, id: string): Promise<{ request: TerminalRecord }> {
  if (!GENERATED_ID_RE.test(id) && !LEGACY_ID_RE.test(id)) throw new InvalidInputError();
  const record = await registry.lookup(id);
  if (!record) throw new NotFoundError();
  return { request: record };
}

/**
 * `{"requests": [...], "truncation": ...}`: the retained records whose session, task or
 * workbench run is `value`, newest first (an empty list is an answer, not a 404).
 * Thrown when: the value is not an opaque id (InvalidInputError).
 */
export function lookupHistory(registry: RouterRegistry, key: LineageKey, value: string): Promise<{ requests: TerminalRecord[]; truncation: Truncation }> {
  if (!OPAQUE_ID_RE.test(value)) throw new InvalidInputError();
  return registry.history(key, value);
}

/** `{"requests": [...], "truncation": ...}`: the requests in flight, oldest first, at most 50. */
export function lookupActive(registry: RouterRegistry): { requests: ActiveSummary[]; truncation: Truncation } {
  return registry.activeSummaries();
}
