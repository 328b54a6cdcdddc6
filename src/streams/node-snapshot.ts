import type { Owner, ResultStatus, SourceReason } from '../schema/enums.js';
import type { ObservationBatch } from '../schema/envelopes.js';
import type { WorkloadRecord } from '../schema/record.js';

/** One record in a mirror, with the parsed numbers the query sorts and ages by. */
export interface MirrorEntry {
  readonly rec: WorkloadRecord;
  readonly updatedMs: number;
  readonly sourceMs: number;
  /**
   * What freshness is judged by: `sourceMs`, but never later than the moment the node folded
   * it. A record dated ahead of the node's clock (within the allowed skew) is as fresh as a
   * record dated now, not fresh until its date.
   */
  readonly freshMs: number;
}

/** What the node knows of one owner: its window as last reported, and how far to trust it. */
export interface SourceMirror {
  readonly owner: Owner;
  /** A batch was ever folded. */
  heard: boolean;
  /** `seq` of the last folded batch (0 before any). */
  lastSeq: number;
  /** A `seq` gap (or a first batch that was not full) since the last complete full batch. */
  gap: boolean;
  /** `source_timestamp` (epoch ms) of the newest folded batch; NaN before any. */
  lastObservedMs: number;
  /** The same, but never later than when the node folded it: what the source's age is judged by. */
  freshMs: number;
  ownerStatus: ResultStatus;
  ownerReason: SourceReason | undefined;
  /** The owner's own count of window records its cap left out (null: unknown). */
  ownerOmitted: number | null;
  /** The mirror's cap evicted records since the last full batch. */
  overflow: boolean;
  readonly records: Map<string, MirrorEntry>;
  /** A full window arriving in parts (CONTRACT.md `snapshot`). */
  pending: { id: string; parts: number; got: Map<number, ObservationBatch> } | undefined;
}

export interface DropCounts {
  oversized: number;
  malformed: number;
  wrong_host: number;
  out_of_order: number;
  /** Dated more than MAX_FUTURE_SKEW_MS ahead of the node's clock (a publisher whose clock is wrong, or a forged date). */
  clock_ahead: number;
}

/** Every drop reason, in the order the counts are reported. */
export const DROP_REASONS = [
  'oversized',
  'malformed',
  'wrong_host',
  'out_of_order',
  'clock_ahead',
] as const satisfies readonly (keyof DropCounts)[];

/** Counts of a fold that has dropped nothing yet. */
export function noDrops(): DropCounts {
  return { oversized: 0, malformed: 0, wrong_host: 0, out_of_order: 0, clock_ahead: 0 };
}

/**
 * The node fold's state. The fold owns it and updates it in place (see fold-node.ts for why);
 * readers treat it as read-only and pass `now` explicitly.
 */
export interface NodeSnapshot {
  readonly host: string;
  /** Records kept per owner; beyond it the oldest are evicted and counts become unknown. */
  readonly mirrorCap: number;
  readonly sources: Readonly<Record<Owner, SourceMirror>>;
  readonly dropped: DropCounts;
  /**
   * What became of the batch of the last event: folded, or dropped and why; undefined after
   * a tick. Read after each event by whoever counts batches per owner (the controller's metrics).
   */
  lastFold: FoldOutcome | undefined;
  /** Bumped on every change, so that pushers can skip unchanged snapshots. */
  version: number;
}

/** The owner of one batch (`unknown` when it could not be read) and whether it was folded or why not. */
export interface FoldOutcome {
  readonly owner: Owner | 'unknown';
  readonly result: 'folded' | keyof DropCounts;
}

export const DEFAULT_MIRROR_CAP = 20_000;

function emptyMirror(owner: Owner): SourceMirror {
  return {
    owner,
    heard: false,
    lastSeq: 0,
    gap: false,
    lastObservedMs: Number.NaN,
    freshMs: Number.NaN,
    ownerStatus: 'unavailable',
    ownerReason: undefined,
    ownerOmitted: null,
    overflow: false,
    records: new Map(),
    pending: undefined,
  };
}

/** A node that has heard from nobody yet: every source reads `unavailable` (no-observation). */
export function createNodeSnapshot(host: string, mirrorCap = DEFAULT_MIRROR_CAP): NodeSnapshot {
  return {
    host,
    mirrorCap,
    sources: {
      router: emptyMirror('router'),
      controller: emptyMirror('controller'),
      benchmark: emptyMirror('benchmark'),
      media: emptyMirror('media'),
      recipe: emptyMirror('recipe'),
      manifest: emptyMirror('manifest'),
    },
    lastFold: undefined,
    dropped: noDrops(),
    version: 0,
  };
}
