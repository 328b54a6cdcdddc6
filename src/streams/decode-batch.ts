import { checkBatch, type ObservationBatch } from '../schema/envelopes.js';
import { parseTimestamp } from '../schema/primitives.js';
import { canonicalRecord, recordRuleViolation } from '../schema/record.js';
import { parseSubject, subjectHost } from '../schema/subjects.js';

/** Messages over this size are dropped (CONTRACT.md: 1 MiB). */
export const MAX_BATCH_BYTES = 1024 * 1024;

export type DropReason = 'oversized' | 'malformed' | 'wrong_host';
export type Decoded = { ok: true; batch: ObservationBatch } | { ok: false; reason: DropReason };

const decoder = new TextDecoder('utf-8', { fatal: true });

/**
 * Decodes one message received on an observation subject (schema/subjects.ts) for the node `host`. Pure.
 * A batch whose host is not the node's or not the subject's, over the size cap, or failing
 * the schema or a record rule is dropped, never folded. Records come back in canonical order.
 */
export function decodeBatch(host: string, subject: string, data: Uint8Array, maxBytes = MAX_BATCH_BYTES): Decoded {
  if (data.byteLength > maxBytes) return { ok: false, reason: 'oversized' };
  let value: unknown;
  try {
    value = JSON.parse(decoder.decode(data));
  } catch {
    return { ok: false, reason: 'malformed' };
  }
  if (!checkBatch.Check(value)) return { ok: false, reason: 'malformed' };
  const batch = value;
  // The grammar admits dates that name no instant (Feb 30, hour 24): the batch is malformed,
  // or its NaN date would pass every freshness and order comparison (CONTRACT.md). Each
  // record's three dates are checked by recordRuleViolation below.
  if (Number.isNaN(parseTimestamp(batch.source_timestamp))) return { ok: false, reason: 'malformed' };
  if (batch.host !== host || subjectHost(subject) !== host) return { ok: false, reason: 'wrong_host' };
  const on = parseSubject(subject);
  if (on?.kind !== 'obs' || on.owner !== batch.owner) return { ok: false, reason: 'malformed' };
  if (batch.snapshot && (!batch.full || batch.snapshot.part > batch.snapshot.parts))
    return { ok: false, reason: 'malformed' };
  const upserts = new Array(batch.upserts.length);
  for (let i = 0; i < batch.upserts.length; i++) {
    const r = batch.upserts[i]!;
    if (r.host !== host) return { ok: false, reason: 'wrong_host' };
    if (r.owner !== batch.owner || recordRuleViolation(r) !== null) return { ok: false, reason: 'malformed' };
    upserts[i] = canonicalRecord(r);
  }
  return { ok: true, batch: { ...batch, upserts } };
}
