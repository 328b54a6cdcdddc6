import type { Logger } from 'pino';
import type { RouterRegistry } from './records/router-registry.js';
import { ErrorCode, InvalidInputError, SvcError, problemFor } from '../errors.js';
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
 * The request payload as a plain object with exactly the members `allowed` accepts.
 * `emptyIsObject`: an empty payload reads as `{}` (the `active` lookup takes no members).
 * Thrown when: too large, not UTF-8 JSON, not an object, a member named twice or a prototype
 * name, a member `allowed` refuses (InvalidInputError).
 */
export function parseLookupPayload(data: Uint8Array, emptyIsObject: boolean): Record<string, unknown> {
  if (data.byteLength > MAX_LOOKUP_REQUEST_BYTES) throw new InvalidInputError();
  if (data.byteLength === 0 && emptyIsObject) return {};
  let text: string;
  let value: unknown;
  try {
    text = decoder.decode(data);
    value = JSON.parse(text);
  } catch {
    throw new InvalidInputError();
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidInputError();
  // A member named twice is refused, as on HTTP: JSON.parse would keep the last one silently.
  if (refusedJson(text, value) !== undefined) throw new InvalidInputError();
  return value as Record<string, unknown>;
}

/** `{id}` exactly, a string. Thrown when: anything else (InvalidInputError). */
export function parseGetRequest(data: Uint8Array): string {
  const o = parseLookupPayload(data, false);
  const keys = Object.keys(o);
  if (keys.length !== 1 || keys[0] !== 'id' || typeof o['id'] !== 'string') throw new InvalidInputError();
  return o['id'];
}

/**
 * Exactly one of `{session_id}`, `{task_id}`, `{workbench_run_id}`, a string (CONTRACT.md
 * names `{session_id}`; the other two are this project's extension, docs/api.md).
 * Thrown when: anything else (InvalidInputError).
 */
export function parseSessionRequest(data: Uint8Array): { key: LineageKey; value: string } {
  const o = parseLookupPayload(data, false);
  const keys = Object.keys(o);
  const key = LINEAGE_KEYS.find((k) => k === keys[0]);
  if (keys.length !== 1 || key === undefined || typeof o[key] !== 'string') throw new InvalidInputError();
  return { key, value: o[key] };
}

/** `{}` or an empty payload. Thrown when: any member (InvalidInputError). */
export function parseActiveRequest(data: Uint8Array): void {
  if (Object.keys(parseLookupPayload(data, true)).length !== 0) throw new InvalidInputError();
}

/**
 * Serves the router's request lookups on the host's requests subjects (schema/subjects.ts;
 * only the host's own user may serve them, deploy/nats.conf). Each
 * reply is exactly the body the HTTP lookup answers (the same functions make both), or the
 * fixed problem `{type, title, status}` the HTTP route would send (400 invalid input, 404 not
 * found). Who may ask is NATS's permission (deploy/nats.conf: the fleet's user and the host's
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
        const code = err instanceof SvcError ? err.code : ErrorCode.INTERNAL;
        if (code === ErrorCode.INTERNAL) logger?.error({ err, lookup }, 'request lookup over the bus failed');
        return encoder.encode(JSON.stringify(problemFor(code)));
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
