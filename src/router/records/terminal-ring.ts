import {
  FINISH_REASONS,
  REQUEST_OUTCOMES,
  ROUTES,
  USAGE_SOURCES,
  type TerminalRecord,
} from '../../schema/terminal-record.js';
import type { WorkloadRecord } from '../../schema/record.js';

/** The measured record fields the router's metrics take quantiles of. */
export const SAMPLED = [
  'latency_ms',
  'time_to_first_content_ms',
  'upstream_duration_ms',
  'readiness_check_ms',
  'admission_wait_ms',
] as const;
export type SampledField = (typeof SAMPLED)[number];

/**
 * What the metrics read of one buffered record. One object is reused for every slot of a
 * pass (`forEachSummary`): read it, do not keep it.
 */
export interface RecordSummary {
  /** Null: refused before routing (no alias). */
  model: string | null;
  route: TerminalRecord['route'];
  outcome: TerminalRecord['outcome'];
  finish: TerminalRecord['finish_reason'];
  promptSource: TerminalRecord['usage']['prompt_source'];
  completionSource: TerminalRecord['usage']['completion_source'];
  promptTokens: number | null;
  completionTokens: number | null;
  /** Indexed like SAMPLED; null when not measured. */
  readonly samples: (number | null)[];
}

/** A record that left the ring to make room. */
export interface Evicted {
  readonly gid: string;
  readonly finishedMs: number;
}

const FIRST_BYTES = 64 * 1024;
/**
 * Above this size the text buffer grows by half instead of doubling: at `buffer_size`
 * 1,000,000 its records' text is most of a gigabyte, and the old and new buffers coexist
 * while the live records are copied.
 */
const LARGE_BYTES = 64 * 1024 * 1024;

function codes<T extends string>(values: readonly T[]): Map<string, number> {
  return new Map(values.map((v, i) => [v, i]));
}
const ROUTE_CODE = codes(ROUTES);
const OUTCOME_CODE = codes(REQUEST_OUTCOMES);
const FINISH_CODE = codes(FINISH_REASONS);
const SOURCE_CODE = codes(USAGE_SOURCES);
/** Finish code of a null finish reason. */
const NO_FINISH = 255;

const nan = (v: number | null): number => (v === null ? Number.NaN : v);
const orNull = (v: number): number | null => (Number.isNaN(v) ? null : v);

/**
 * The router's bounded buffer of terminal records, newest replacing oldest, kept out of the
 * JavaScript heap as far as it can be: each record's JSON text lives in one byte buffer (a
 * queue of bytes that grows when it must), its identifiers in plain arrays, and what the
 * metrics read of it in typed columns. A busy router puts thousands of records a second in
 * here, each kept for the next `capacity` requests: as objects, every one of them was copied
 * by the young-generation collector and promoted, which cost more CPU per request than
 * building and writing it (8-11% of the router's, measured with bench/router-ab.ts).
 * A record is parsed again only when something reads it whole (a lookup, a window).
 */
export class TerminalRing {
  readonly capacity: number;
  private count = 0;
  /** The slot the next record goes to (the oldest one when the ring is full). */
  private head = 0;
  private readonly byGid = new Map<string, number>();
  private readonly gids: string[];
  private readonly requestIds: string[];
  private readonly sessionIds: (string | undefined)[];
  private readonly finished: Float64Array;
  private readonly workloads: (WorkloadRecord | undefined)[];
  // The JSON text of each slot's record: bytes [off, off + len) of `bytes`.
  private bytes: Buffer;
  private byteHead = 0;
  /** Bytes of the records held (the rest of `bytes` is free or waste at its end). */
  private liveBytes = 0;
  private readonly off: Uint32Array;
  private readonly len: Uint32Array;
  // Metrics columns.
  private readonly models: (string | null)[];
  private readonly internedModels = new Map<string, string>();
  private readonly route: Uint8Array;
  private readonly outcome: Uint8Array;
  private readonly finish: Uint8Array;
  private readonly promptSource: Uint8Array;
  private readonly completionSource: Uint8Array;
  private readonly promptTokens: Float64Array;
  private readonly completionTokens: Float64Array;
  private readonly samples: Float64Array[];

  constructor(capacity: number) {
    if (!Number.isSafeInteger(capacity) || capacity < 1)
      throw new RangeError('ring capacity must be a positive integer');
    this.capacity = capacity;
    this.gids = new Array<string>(capacity);
    this.requestIds = new Array<string>(capacity);
    this.sessionIds = new Array<string | undefined>(capacity);
    this.finished = new Float64Array(capacity);
    this.workloads = new Array<WorkloadRecord | undefined>(capacity);
    this.bytes = Buffer.allocUnsafe(FIRST_BYTES);
    this.off = new Uint32Array(capacity);
    this.len = new Uint32Array(capacity);
    this.models = new Array<string | null>(capacity);
    this.route = new Uint8Array(capacity);
    this.outcome = new Uint8Array(capacity);
    this.finish = new Uint8Array(capacity);
    this.promptSource = new Uint8Array(capacity);
    this.completionSource = new Uint8Array(capacity);
    this.promptTokens = new Float64Array(capacity);
    this.completionTokens = new Float64Array(capacity);
    this.samples = SAMPLED.map(() => new Float64Array(capacity));
  }

  get size(): number {
    return this.count;
  }

  /** Bytes held for record texts (the buffer, not just what is in use). */
  get byteCapacity(): number {
    return this.bytes.length;
  }

  /**
   * Adds a record, newest; `json` is its JSON text (`JSON.stringify(record)`). Returns the
   * record it pushed out when the ring was full.
   */
  push(gid: string, record: TerminalRecord, json: string, finishedMs: number): Evicted | undefined {
    let evicted: Evicted | undefined;
    const slot = this.head;
    if (this.count === this.capacity) {
      const old = this.gids[slot]!;
      evicted = { gid: old, finishedMs: this.finished[slot]! };
      if (this.byGid.get(old) === slot) this.byGid.delete(old);
      this.count--;
      this.liveBytes -= this.len[slot]!;
    }
    const n = Buffer.byteLength(json);
    const at = this.place(n);
    this.bytes.write(json, at, n, 'utf8');
    this.byteHead = at + n;
    this.liveBytes += n;
    this.off[slot] = at;
    this.len[slot] = n;
    this.gids[slot] = gid;
    this.requestIds[slot] = record.request_id;
    this.sessionIds[slot] = record.session_id;
    this.finished[slot] = finishedMs;
    this.workloads[slot] = undefined;
    this.models[slot] = record.model === null ? null : this.intern(record.model);
    this.route[slot] = ROUTE_CODE.get(record.route) ?? 0;
    this.outcome[slot] = OUTCOME_CODE.get(record.outcome) ?? OUTCOME_CODE.get('error')!;
    this.finish[slot] =
      record.finish_reason === null
        ? NO_FINISH
        : (FINISH_CODE.get(record.finish_reason) ?? FINISH_CODE.get('unknown')!);
    this.promptSource[slot] = SOURCE_CODE.get(record.usage.prompt_source) ?? SOURCE_CODE.get('unknown')!;
    this.completionSource[slot] = SOURCE_CODE.get(record.usage.completion_source) ?? SOURCE_CODE.get('unknown')!;
    this.promptTokens[slot] = nan(record.usage.prompt_tokens);
    this.completionTokens[slot] = nan(record.usage.completion_tokens);
    for (let k = 0; k < SAMPLED.length; k++) this.samples[k]![slot] = nan(record[SAMPLED[k]!]);
    this.byGid.set(gid, slot);
    this.head = (slot + 1) % this.capacity;
    this.count++;
    return evicted;
  }

  /**
   * Where `n` bytes of the next record go: after the newest record's, or at the start of the
   * buffer when the end is short and the start is free; else the buffer grows (live records
   * copied, oldest first, to the start of a larger one). When the writing wraps to the start
   * of a buffer that is mostly free (a burst of large records has left it), the buffer
   * shrinks to twice what it holds: it stays bounded by what the ring holds now.
   */
  private place(n: number): number {
    if (this.count === 0) {
      if (n > this.bytes.length) this.bytes = Buffer.allocUnsafe(Math.max(n, this.bytes.length * 2));
      return 0;
    }
    const tail = this.off[this.oldestSlot()]!;
    const headAt = this.byteHead;
    if (headAt >= tail) {
      if (headAt + n <= this.bytes.length) return headAt;
      if (n < tail) {
        const want = Math.max(FIRST_BYTES, (this.liveBytes + n) * 2);
        if (want * 2 > this.bytes.length) return 0;
        this.resize(want);
        return this.byteHead;
      }
    } else if (headAt + n < tail) return headAt;
    const need = this.liveBytes + n;
    this.resize(Math.max(this.bytes.length + n, Math.ceil(need * (this.bytes.length >= LARGE_BYTES ? 1.5 : 2))));
    return this.byteHead;
  }

  /** Copies the live records, oldest first, to the start of a new buffer of `size` bytes. */
  private resize(size: number): void {
    const bigger = Buffer.allocUnsafe(size);
    let at = 0;
    for (let i = 0, s = this.oldestSlot(); i < this.count; i++, s = (s + 1) % this.capacity) {
      const o = this.off[s]!;
      const l = this.len[s]!;
      this.bytes.copy(bigger, at, o, o + l);
      this.off[s] = at;
      at += l;
    }
    this.bytes = bigger;
    this.byteHead = at;
  }

  private oldestSlot(): number {
    return (this.head - this.count + this.capacity) % this.capacity;
  }

  /** The slot that holds the record of a generated id, or undefined. */
  slotOf(gid: string): number | undefined {
    return this.byGid.get(gid);
  }

  /** Slots, newest first. */
  *newestFirst(): Generator<number> {
    for (let i = 1; i <= this.count; i++) yield (this.head - i + this.capacity) % this.capacity;
  }

  /**
   * The slots of the `n` records that finished last, newest `finished_at` first (of equal
   * ones, the one buffered later first). One pass over the finish column: records are
   * buffered nearly in finish order, so past the first `n` most slots cost one comparison.
   */
  latestFinished(n: number): number[] {
    const top: number[] = [];
    if (n < 1) return top;
    for (let i = 1; i <= this.count; i++) {
      const slot = (this.head - i + this.capacity) % this.capacity;
      const ms = this.finished[slot]!;
      if (top.length === n && ms <= this.finished[top[n - 1]!]!) continue;
      // After every slot finished at the same time or later (those were buffered later).
      let at = top.length;
      while (at > 0 && this.finished[top[at - 1]!]! < ms) at--;
      top.splice(at, 0, slot);
      if (top.length > n) top.pop();
    }
    return top;
  }

  /** The record of a slot, parsed from its text (a new object each time). */
  record(slot: number): TerminalRecord {
    const o = this.off[slot]!;
    return JSON.parse(this.bytes.toString('utf8', o, o + this.len[slot]!)) as TerminalRecord;
  }

  /** Whether the slot's record text holds `needle` (bytes), without parsing it. */
  textIncludes(slot: number, needle: Buffer): boolean {
    const o = this.off[slot]!;
    // A view of the slot's bytes: the search never runs past its record.
    return this.bytes.subarray(o, o + this.len[slot]!).includes(needle);
  }

  gid(slot: number): string {
    return this.gids[slot]!;
  }

  requestId(slot: number): string {
    return this.requestIds[slot]!;
  }

  sessionId(slot: number): string | undefined {
    return this.sessionIds[slot];
  }

  finishedMs(slot: number): number {
    return this.finished[slot]!;
  }

  /** The slot's workload record, built once by `map` and kept while the slot holds the record. */
  workload(slot: number, map: (gid: string, record: TerminalRecord) => WorkloadRecord): WorkloadRecord {
    return (this.workloads[slot] ??= map(this.gids[slot]!, this.record(slot)));
  }

  /** Calls `visit` with a summary of every record (newest first); the summary object is reused. */
  forEachSummary(visit: (s: Readonly<RecordSummary>) => void): void {
    const s: RecordSummary = {
      model: '',
      route: ROUTES[0],
      outcome: REQUEST_OUTCOMES[0],
      finish: null,
      promptSource: 'unknown',
      completionSource: 'unknown',
      promptTokens: null,
      completionTokens: null,
      samples: SAMPLED.map(() => null),
    };
    for (const slot of this.newestFirst()) {
      s.model = this.models[slot]!;
      s.route = ROUTES[this.route[slot]!]!;
      s.outcome = REQUEST_OUTCOMES[this.outcome[slot]!]!;
      const f = this.finish[slot]!;
      s.finish = f === NO_FINISH ? null : FINISH_REASONS[f]!;
      s.promptSource = USAGE_SOURCES[this.promptSource[slot]!]!;
      s.completionSource = USAGE_SOURCES[this.completionSource[slot]!]!;
      s.promptTokens = orNull(this.promptTokens[slot]!);
      s.completionTokens = orNull(this.completionTokens[slot]!);
      for (let k = 0; k < SAMPLED.length; k++) s.samples[k] = orNull(this.samples[k]![slot]!);
      visit(s);
    }
  }

  /** One string per model name, however many records name it (restored records parse their own copies). */
  private intern(model: string): string {
    let m = this.internedModels.get(model);
    if (m === undefined) {
      // Bounded by the models the ring can hold; cleared when it outgrows that.
      if (this.internedModels.size >= this.capacity) this.internedModels.clear();
      this.internedModels.set(model, (m = model));
    }
    return m;
  }
}
