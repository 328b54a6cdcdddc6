import type { Logger } from 'pino';
import type { RouterRegistry } from './records/router-registry.js';
import { ErrorCode, InvalidArgumentError, SvcError, problemOf } from '../errors.js';
import { LINEAGE_KEYS, type LineageKey } from '../schema/diagnosis.js';
import { refusedJson } from '../schema/json-duplicates.js';
import { requestsSubject, type RequestLookup } from '../schema/subjects.js';
import type { Bus, BusService } from '../streams/bus.js';
import { lookupActive, lookupHistory, lookupRequest } from './request-lookups.js';

/**
 * Largest request payload read. The largest valid one is `{"workbench_run_id": "<128
 * characters>"}` (about 160 bytes); 4 KiB leaves room for whitespace, not for a document.
 */
export const MAX_LOOKUP_REQUEST_BYTES = 4096;

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

/**
 * The `invalid_params` name of a fault in the payload as a whole, or in a member whose name is
 * not one of the lookup's (the caller's text is never echoed): the NATS counterpart of the
 * HTTP lookups' `query` (decision 0056).
 */
export const PAYLOAD_PARAM = 'payload';

/** Thrown: `name` (a member of ours, or PAYLOAD_PARAM) is wrong for the fixed `reason`. */
function reject(name: string, reason: string): never {
  throw new InvalidArgumentError(name, reason);
}

/**
 * The request payload as a plain object with exactly the members `allowed` accepts.
 * `emptyIsObject`: an empty payload reads as `{}` (the `active` lookup takes no members).
 * Thrown when: too large, not UTF-8 JSON, not an object, a member named twice or a prototype
 * name (InvalidArgumentError naming PAYLOAD_PARAM).
 */
export function parseLookupPayload(data: Uint8Array, emptyIsObject: boolean): Record<string, unknown> {
  if (data.byteLength > MAX_LOOKUP_REQUEST_BYTES)
    reject(PAYLOAD_PARAM, `must be at most ${MAX_LOOKUP_REQUEST_BYTES} bytes`);
  if (data.byteLength === 0 && emptyIsObject) return {};
  let text = '';
  let value: unknown;
  try {
    text = decoder.decode(data);
    value = JSON.parse(text);
  } catch {
    reject(PAYLOAD_PARAM, 'must be a UTF-8 JSON object');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    reject(PAYLOAD_PARAM, 'must be a UTF-8 JSON object');
  // A member named twice is refused, as on HTTP: JSON.parse would keep the last one silently.
  const refused = refusedJson(text, value);
  if (refused === 'duplicate') reject(PAYLOAD_PARAM, 'must name each member at most once');
  if (refused === 'prototype') reject(PAYLOAD_PARAM, 'must not name a prototype member');
  return value as Record<string, unknown>;
}

/** The member `name` of `o` as a string. Thrown when: it is there but not a string (InvalidArgumentError naming it). */
function stringMember(o: Record<string, unknown>, name: string): string {
  const v = o[name];
  return typeof v === 'string' ? v : reject(name, 'must be a string');
}

/**
 * `{id}` exactly, a string (its grammar is lookupRequest's, which names `id` too).
 * Thrown when: anything else (InvalidArgumentError naming `id`, or PAYLOAD_PARAM).
 */
export function parseGetRequest(data: Uint8Array): string {
  const o = parseLookupPayload(data, false);
  if (Object.keys(o).some((k) => k !== 'id')) reject(PAYLOAD_PARAM, 'must have only the member id');
  if (!('id' in o)) reject('id', 'required');
  return stringMember(o, 'id');
}

const LINEAGE_LIST = LINEAGE_KEYS.join(', ');

/**
 * Exactly one of `{session_id}`, `{task_id}`, `{workbench_run_id}`, a string (CONTRACT.md
 * names `{session_id}`; the other two are this project's extension, docs/api.md); its grammar
 * is lookupHistory's, which names the key too.
 * Thrown when: anything else (InvalidArgumentError naming the key at fault, or PAYLOAD_PARAM).
 */
export function parseSessionRequest(data: Uint8Array): { key: LineageKey; value: string } {
  const o = parseLookupPayload(data, false);
  const names = Object.keys(o);
  if (names.some((k) => !(LINEAGE_KEYS as readonly string[]).includes(k)))
    reject(PAYLOAD_PARAM, `must have only one of ${LINEAGE_LIST}`);
  const keys = LINEAGE_KEYS.filter((k) => k in o);
  if (keys.length === 0) reject(PAYLOAD_PARAM, `must have exactly one of ${LINEAGE_LIST}`);
  // The HTTP history lookup's phrase for the same fault (router-routes.ts).
  if (keys.length > 1) reject(keys[1]!, `must not come with another of ${LINEAGE_LIST}`);
  const key = keys[0]!;
  return { key, value: stringMember(o, key) };
}

/** `{}` or an empty payload. Thrown when: any member (InvalidArgumentError naming PAYLOAD_PARAM). */
export function parseActiveRequest(data: Uint8Array): void {
  if (Object.keys(parseLookupPayload(data, true)).length !== 0) reject(PAYLOAD_PARAM, 'must be {} or empty');
}

/**
 * Serves the router's request lookups on the host's requests subjects (schema/subjects.ts;
 * only the host's own user may serve them, deploy/nats.conf). Each
 * reply is exactly the body the HTTP lookup answers (the same functions make both), or the
 * fixed problem the HTTP route would send (400 invalid input naming the member at fault in
 * `invalid_params`, 404 not found). Who may ask is NATS's permission (deploy/nats.conf: the fleet's user and the host's
 * own); the fleet and controller check their callers' `requests:read` before they ask. A reply
 * over what the bus carries (a server with a small `max_payload`) is the 503 problem: a
 * reply that cannot be sent would read as an unreachable router.
 */
export function serveRequestLookups(bus: Bus, host: string, registry: RouterRegistry, logger?: Logger): BusService {
  const serve = (lookup: RequestLookup, answer: (data: Uint8Array) => Promise<unknown> | unknown): BusService =>
    bus.serve(requestsSubject(host, lookup), async (data) => {
      try {
        const reply = encoder.encode(JSON.stringify(await answer(data)));
        if (reply.byteLength > bus.maxPayload) throw new SvcError(ErrorCode.UNAVAILABLE);
        return reply;
      } catch (err) {
        const known = err instanceof SvcError ? err : new SvcError(ErrorCode.INTERNAL);
        if (known.code === ErrorCode.INTERNAL) logger?.error({ err, lookup }, 'request lookup over the bus failed');
        // The problem the HTTP lookup would send, its invalid_params included (errors.ts problemOf).
        return encoder.encode(JSON.stringify(problemOf(known)));
      }
    });
  const services = [
    serve('get', (data) => lookupRequest(registry, parseGetRequest(data))),
    serve('session', (data) => {
      const { key, value } = parseSessionRequest(data);
      return lookupHistory(registry, key, value);
    }),
    serve('active', (data) => {
      parseActiveRequest(data);
      return lookupActive(registry);
    }),
  ];
  return {
    stop: () => {
      for (const s of services) s.stop();
    },
  };
}
