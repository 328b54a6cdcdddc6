import type { Logger } from 'pino';
import { ErrorCode, SvcError, problemFor } from '../errors.js';
import type { NodeResult } from '../schema/envelopes.js';
import { parseFilterArgs, resolveFilters, type Filters } from '../schema/filters.js';
import type { Bus, BusHeaders, BusService } from '../streams/bus.js';
import { hasDuplicateKey } from '../schema/json-duplicates.js';
import { withPlainIntegers } from '../schema/json-numbers.js';
import { nodeResultJson } from '../schema/result-json.js';
import { workloadsSubject } from '../schema/subjects.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });
const MAX_REQUEST_BYTES = 16 * 1024;

/**
 * Serves `node_workloads` on the host's workloads subject (schema/subjects.ts): the request is the `arguments`
 * object as JSON (empty payload: no filters); the reply is the NodeResult, or a fixed
 * problem `{type, title, status}` for bad input. Who may ask is NATS's permission to decide.
 * A NodeResult over what the bus carries (a server's small `max_payload`) would never arrive,
 * and the node would read as unreachable: it is answered with fewer records instead (the
 * limit halved until it fits; what is left out is counted in `omitted`, status `partial`).
 */
export function serveNodeWorkloads(
  bus: Bus,
  host: string,
  query: (f: Filters) => NodeResult,
  logger?: Logger,
  /**
   * Called once per request with how it ended (the controller's read metrics), when it began
   * (epoch ms) and the request's headers (its asker's trace context, unchecked).
   */
  onRead?: (outcome: 'ok' | 'invalid' | 'error', startedMs: number, headers: BusHeaders | undefined) => void,
): BusService {
  return bus.serve(workloadsSubject(host), (data, _subject, headers) => {
    const startedMs = Date.now();
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
        // `1e2` or `100.0` for an integer is refused, as on HTTP and in the CLI.
        args = withPlainIntegers(text, args);
      }
      const f = resolveFilters(parseFilterArgs(args));
      let reply = encoder.encode(nodeResultJson(query(f)));
      for (let limit = f.limit; reply.byteLength > bus.maxPayload && limit > 0; ) {
        limit = Math.floor(limit / 2);
        reply = encoder.encode(nodeResultJson(query({ ...f, limit })));
      }
      // Not even the sources without records fit: the fixed problem (a few dozen bytes).
      if (reply.byteLength > bus.maxPayload) throw new SvcError(ErrorCode.UNAVAILABLE);
      onRead?.('ok', startedMs, headers);
      return reply;
    } catch (err) {
      const code = err instanceof SvcError ? err.code : ErrorCode.INTERNAL;
      onRead?.(code === ErrorCode.INVALID_INPUT ? 'invalid' : 'error', startedMs, headers);
      if (code === ErrorCode.INTERNAL) logger?.error({ err }, 'node_workloads failed');
      return encoder.encode(JSON.stringify(problemFor(code)));
    }
  });
}
