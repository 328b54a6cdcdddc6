import { ACTIVE_STATES, type ResultStatus, type SourceReason } from '../schema/enums.js';
import { parseTimestamp } from '../schema/primitives.js';
import type { WorkloadRecord } from '../schema/record.js';

/** What an owner actor reads from its authority, already mapped to canonical records. */
export interface OwnerReading {
  readonly status: ResultStatus;
  readonly reason?: SourceReason;
  readonly records: readonly WorkloadRecord[];
  /** The owner itself knows it left records out, without knowing how many. */
  readonly countUnknown?: boolean;
  /** Window records the owner already left out before handing them over (an exact count). */
  readonly omittedBefore?: number;
  /**
   * The owner already bounded the records as boundWindow would (only window records, live
   * work first, at most the cap): they are published as handed over, without a re-sort.
   */
  readonly bounded?: boolean;
}

/** Default cap of an owner's published window (CONTRACT.md). */
export const DEFAULT_WINDOW_CAP = 2_000;
/** Terminal work stays in the window this long: the largest `recent_seconds`. */
export const WINDOW_TERMINAL_MS = 86_400_000;

export interface Window {
  readonly records: WorkloadRecord[];
  /** Window records the cap left out (null: unknown). */
  readonly omitted: number | null;
}

/**
 * Pure: the records some query could return (active work, terminal work updated within the
 * last 86,400 s, current configured/absent/unavailable/unsupported records), newest first,
 * capped at `cap` with the excess counted.
 */
export function boundWindow(reading: OwnerReading, now: number, cap = DEFAULT_WINDOW_CAP): Window {
  if (reading.bounded && reading.records.length <= cap) {
    return {
      records: reading.records as WorkloadRecord[],
      omitted: reading.countUnknown ? null : (reading.omittedBefore ?? 0),
    };
  }
  const inWindow: { r: WorkloadRecord; t: number }[] = [];
  for (const r of reading.records) {
    const t = parseTimestamp(r.updated_at);
    if (r.state === 'terminal' && now - t > WINDOW_TERMINAL_MS) continue;
    inWindow.push({ r, t });
  }
  // Active and current records first so the cap never drops live work for old history.
  inWindow.sort((a, b) => rank(a.r) - rank(b.r) || b.t - a.t || (a.r.id < b.r.id ? -1 : 1));
  const kept = inWindow.slice(0, cap).map((x) => x.r);
  const excess = inWindow.length - kept.length;
  return { records: kept, omitted: reading.countUnknown ? null : excess + (reading.omittedBefore ?? 0) };
}

function rank(r: WorkloadRecord): number {
  return r.state === 'terminal' ? 1 : ACTIVE_STATES.has(r.state) ? 0 : 0;
}
