import type { Logger } from 'pino';
import { ErrorCode, SvcError, problemFor } from '../errors.js';
import type { NodeResult } from '../schema/envelopes.js';
import { parseFilterArgs, resolveFilters, type Filters } from '../schema/filters.js';
import type { Bus, BusService } from '../streams/bus.js';
import { hasDuplicateKey } from '../schema/json-duplicates.js';

/** The request/reply subject a node controller answers `node_workloads` on. */
export function workloadsSubject(host: string): string {
  return `svc.v1.${host}.workloads`;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });
const MAX_REQUEST_BYTES = 16 * 1024;

/**
 * Serves `node_workloads` on `svc.v1.<host>.workloads`: the request is the `arguments`
 * object as JSON (empty payload: no filters); the reply is the NodeResult, or a fixed
 * problem `{type, title, status}` for bad input. Who may ask is NATS's permission to decide.
 */
export function serveNodeWorkloads(bus: Bus, host: string, query: (f: Filters) => NodeResult, logger?: Logger): BusService {
  return bus.serve(workloadsSubject(host), (data) => {
    try {
      if (data.byteLength > MAX_REQUEST_BYTES) throw new SvcError(ErrorCode.INVALID_INPUT);
      let args: unknown;
      if (data.byteLength > 0) {
        let text: string;
        try {
          text = decoder.decode(data);
          args = JSON.parse(text);
        } catch {
          throw new SvcError(ErrorCode.INVALID_INPUT);
        }
        // A filter named twice is refused, as on HTTP: JSON.parse would keep the last one.
        if (hasDuplicateKey(text, args)) throw new SvcError(ErrorCode.INVALID_INPUT);
      }
      return encoder.encode(JSON.stringify(query(resolveFilters(parseFilterArgs(args)))));
    } catch (err) {
      const code = err instanceof SvcError ? err.code : ErrorCode.INTERNAL;
      if (code === ErrorCode.INTERNAL) logger?.error({ err: { name: (err as Error)?.name } }, 'node_workloads failed');
      return encoder.encode(JSON.stringify(problemFor(code)));
    }
  });
}
