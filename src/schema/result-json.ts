import type { NodeResult } from './envelopes.js';
import type { WorkloadRecord } from './record.js';

/**
 * The JSON text of each record served, kept while the record object lives. Records are never
 * changed once built (the fold replaces them, a stale label makes a copy), so the text of a
 * record served again is the text it had: most of a node's answer, query after query.
 */
const recordText = new WeakMap<WorkloadRecord, string>();

function textOf(r: WorkloadRecord): string {
  let t = recordText.get(r);
  if (t === undefined) recordText.set(r, (t = JSON.stringify(r)));
  return t;
}

/** Stands in for a source's records while the envelope is serialized (no served string holds a NUL). */
const HOLE = '\u0000records\u0000';
const HOLE_JSON = /"\\u0000records\\u0000"/g;

/**
 * `JSON.stringify(result)`, byte for byte, with each record's text reused from the last time
 * that record was served: serializing a thousand records was most of the cost of the widest
 * `node_workloads` answer. Used where a NodeResult is sent as text (HTTP and NATS; the MCP SDK
 * serializes its own messages).
 */
export function nodeResultJson(result: NodeResult): string {
  const lists: string[] = [];
  const shell = {
    ...result,
    sources: result.sources.map((s) => {
      let list = '';
      for (let i = 0; i < s.records.length; i++) list += (i === 0 ? '' : ',') + textOf(s.records[i]!);
      lists.push(list);
      return { ...s, records: HOLE };
    }),
  };
  let next = 0;
  return JSON.stringify(shell).replace(HOLE_JSON, () => `[${lists[next++]!}]`);
}
