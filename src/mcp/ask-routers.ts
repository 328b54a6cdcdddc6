import type { LineageKey } from '../schema/diagnosis.js';
import {
  composeHistoryDiagnosis,
  composeRequestDiagnosis,
  type AskedNode,
  type FleetDiagnosis,
} from '../schema/diagnosis-search.js';
import type { Bus } from '../streams/bus.js';
import { requestsSubject, type RequestLookup } from '../schema/subjects.js';
import type { RequestAsker } from './request-tools.js';

/** A node the search asks (a fleet's declared node; the controller's own host). */
export interface SearchedNode {
  readonly hostId: string;
  readonly sleeping?: boolean;
}

const encoder = new TextEncoder();

/**
 * Asks every node's router at once (parallel fan-out, one timeout for all, like
 * fleet_workloads); a sleeping node is not asked. No responder, a timeout, a refused or closed
 * connection: that node could not be asked (never read as "not found").
 */
export async function askRouters(
  bus: Bus,
  nodes: readonly SearchedNode[],
  lookup: RequestLookup,
  payload: unknown,
  timeoutMs: number,
): Promise<AskedNode[]> {
  const data = encoder.encode(JSON.stringify(payload));
  return Promise.all(
    nodes.map(async (n): Promise<AskedNode> => {
      if (n.sleeping) return { host: n.hostId, answer: { kind: 'sleeping' } };
      try {
        return {
          host: n.hostId,
          answer: { kind: 'reply', data: await bus.request(requestsSubject(n.hostId, lookup), data, { timeoutMs }) },
        };
      } catch {
        return { host: n.hostId, answer: { kind: 'unreachable' } };
      }
    }),
  );
}

/**
 * The request diagnosis over the bus for a set of nodes: the fleet's declared nodes, or the
 * controller's own host (its router on the same bus, in-process under `svc-serving up`).
 * Composition is pure (src/schema/diagnosis-search.ts); this only does the I/O.
 */
export function busRequestAsker(bus: Bus, nodes: readonly SearchedNode[], timeoutMs: number): RequestAsker {
  return {
    async request(id: string): Promise<FleetDiagnosis> {
      return composeRequestDiagnosis(id, await askRouters(bus, nodes, 'get', { id }, timeoutMs));
    },
    async history(key: LineageKey, value: string): Promise<FleetDiagnosis> {
      return composeHistoryDiagnosis(key, value, await askRouters(bus, nodes, 'session', { [key]: value }, timeoutMs));
    },
  };
}
