import { closeSync, constants, fstatSync, readSync } from 'node:fs';
import { openRegularFile } from '../../config/safe-files.js';
import { GENERATED_ID_RE, checkTerminalRecord, type TerminalRecord } from '../../schema/terminal-record.js';
import { finishReasonOf } from '../stream-observer.js';

/**
 * Reading the decision log: the bounded tail of a file, and one stored line back into the
 * current record shape (older versions' lines included). Writing is decision-log.ts.
 */

/** One retained decision: the public record plus the generated id it answers to. */
export interface Decision {
  readonly gid: string | undefined;
  readonly record: TerminalRecord;
}

const OPTIONAL_KEYS = ['session_id', 'workbench_run_id', 'task_id', 'routing_config_hash', 'package_version'] as const;
const REQUIRED_KEYS = [
  'request_id',
  'model',
  'route',
  'outcome',
  'status_code',
  'started_at',
  'finished_at',
  'latency_ms',
  'readiness_check_ms',
  'admission_wait_ms',
  'upstream_duration_ms',
  'time_to_first_content_ms',
  'finish_reason',
  'output_limit',
] as const;

/** One JSONL line as a plain object, or undefined for a torn, empty or non-object line. */
export function jsonObjectLine(line: string): Record<string, unknown> | undefined {
  if (line.length < 2) return undefined;
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    return undefined;
  }
  return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}

/**
 * Reads one stored line into the current record shape, or undefined when it is torn or not a
 * decision. Only allowlisted members are copied; a record without usage provenance (an
 * older version) reads as `unknown` provenance.
 */
export function parseDecision(line: string): Decision | undefined {
  const raw = jsonObjectLine(line);
  if (!raw) return undefined;
  const rec: Record<string, unknown> = {};
  for (const k of REQUIRED_KEYS) rec[k] = k in raw ? raw[k] : null;
  const u = (raw['usage'] ?? {}) as Record<string, unknown>;
  rec['usage'] = {
    prompt_tokens: u['prompt_tokens'] ?? null,
    completion_tokens: u['completion_tokens'] ?? null,
    prompt_source: u['prompt_source'] ?? 'unknown',
    completion_source: u['completion_source'] ?? 'unknown',
  };
  if (!('admission_wait_ms' in raw)) rec['admission_wait_ms'] = null;
  // An older line may hold a provider's own spelling: normalized, never dropped or kept as free text.
  rec['finish_reason'] = finishReasonOf(rec['finish_reason']);
  // Revision 2 (absent from older lines: unknown). The schema check below bounds them.
  if ('upstream_replica' in raw) rec['upstream_replica'] = raw['upstream_replica'];
  if ('attempts' in raw) rec['attempts'] = raw['attempts'];
  for (const k of OPTIONAL_KEYS) if (typeof raw[k] === 'string') rec[k] = raw[k];
  if (!checkTerminalRecord.Check(rec)) return undefined;
  const g = raw['gateway_request_id'];
  const gid =
    typeof g === 'string' && GENERATED_ID_RE.test(g)
      ? g
      : GENERATED_ID_RE.test(rec['request_id'] as string)
        ? (rec['request_id'] as string)
        : undefined;
  return { gid, record: rec as TerminalRecord };
}

/** Total bytes one scan may read from a log's retained files. */
export const DEFAULT_READ_BUDGET = 64 * 1024 * 1024;
/** `budget`: bytes read at most (DEFAULT_READ_BUDGET); `needle`: only lines holding it are parsed. */
export interface ScanOptions {
  readonly budget?: number;
  readonly needle?: string;
}

/** Bytes read from a file at a time, from its end backwards. */
const BLOCK_BYTES = 1024 * 1024;
/** A line longer than this (no record is) is skipped unread, not gathered. */
const MAX_LINE_BYTES = 1024 * 1024;
const LF = 0x0a;

/**
 * Decisions newest first across `files` (newest file first), reading at most `budget` bytes.
 * Torn or foreign lines are skipped. `visit` returning true stops the scan. `truncated` says
 * the budget stopped it before the oldest file's start.
 *
 * Files are read backwards a block at a time (memory stays at about one block, however large
 * the budget). With `needle`, only lines holding it are parsed: a lookup by id or session
 * (written literally, as JSON leaves these characters) costs a byte search of what it reads,
 * not a parse and a check of every line, on the thread that relays requests.
 */
export function scanDecisionFiles(
  files: readonly string[],
  visit: (d: Decision) => boolean | undefined,
  o: ScanOptions = {},
): { truncated: boolean } {
  const steps = scanSteps(files, visit, o.budget ?? DEFAULT_READ_BUDGET, o.needle);
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/**
 * scanDecisionFiles that hands the thread back after each block it reads: a lookup through
 * 64 MiB of log (a session whose every line matches is parsed whole) never holds up the
 * requests the router relays meanwhile for more than one block's work.
 */
export async function scanDecisionFilesAsync(
  files: readonly string[],
  visit: (d: Decision) => boolean | undefined,
  o: ScanOptions = {},
): Promise<{ truncated: boolean }> {
  const steps = scanSteps(files, visit, o.budget ?? DEFAULT_READ_BUDGET, o.needle);
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** The scan, pausing (yield) after each block read. */
function* scanSteps(
  files: readonly string[],
  visit: (d: Decision) => boolean | undefined,
  budget: number,
  needle: string | undefined,
): Generator<void, { truncated: boolean }> {
  const pattern = needle === undefined || needle.length === 0 ? undefined : Buffer.from(needle, 'utf8');
  // Every file is opened before the first pause: a rotation while the scan is paused renames
  // them, but what is read is what they held (a name opened later could be a file read twice).
  const fds = files.map((file): number | undefined => {
    try {
      // Never waits on a FIFO put in a rotated file's place: a regular file or an error.
      return openRegularFile(file, constants.O_RDONLY);
    } catch {
      return undefined; // rotated away
    }
  });
  try {
    let left = budget;
    for (const [n, fd] of fds.entries()) {
      if (fd === undefined) continue;
      const size = fstatSync(fd).size;
      const start = size - Math.min(size, left);
      left -= size - start;
      const outcome = yield* scanBackwards(fd, start, size, pattern, (line) => {
        const d = parseDecision(line.toString('utf8'));
        return d !== undefined && visit(d) === true;
      });
      if (outcome === 'stopped') return { truncated: false };
      if (outcome === 'failed') continue; // failed while reading: as if rotated away
      // Truncated only when something was left unread: this file's head or an older file.
      if (start > 0 || (left === 0 && n < files.length - 1)) return { truncated: true };
    }
    return { truncated: false };
  } finally {
    for (const fd of fds) if (fd !== undefined) closeSync(fd);
  }
}

/**
 * Hands the lines of `fd` between `start` and `end` to `onLine`, last first (with `pattern`,
 * only the lines holding it): `stopped` once `onLine` returned true, `failed` when the file
 * could not be read. A line cut by `start` is handed over as it is (torn: its parse fails).
 */
function* scanBackwards(
  fd: number,
  start: number,
  end: number,
  pattern: Buffer | undefined,
  onLine: (line: Buffer) => boolean,
): Generator<void, 'stopped' | 'ended' | 'failed'> {
  // The head of the block read last: the end of a line that begins in an earlier block.
  let carry: Buffer | undefined;
  let pos = end;
  while (pos > start) {
    const n = Math.min(BLOCK_BYTES, pos - start);
    pos -= n;
    const block = Buffer.allocUnsafe(n);
    let got = 0;
    try {
      while (got < n) {
        const r = readSync(fd, block, got, n - got, pos + got);
        if (r === 0) return 'failed'; // shrank while read
        got += r;
      }
    } catch {
      return 'failed';
    }
    const buf = carry === undefined ? block : Buffer.concat([block, carry]);
    // Lines that begin in this block: those after its first LF (all of it at the start).
    const first = pos > start ? buf.indexOf(LF) : -1;
    if (pos > start && first < 0) {
      // One line across the whole block: gathered on, unless longer than any record.
      carry = buf.byteLength > MAX_LINE_BYTES ? Buffer.alloc(0) : buf;
      continue;
    }
    const lo = first + 1;
    if (eachLine(buf, lo, pattern, onLine)) return 'stopped';
    carry = lo > 0 ? Buffer.from(buf.subarray(0, lo - 1)) : undefined;
    yield;
  }
  return 'ended';
}

/** The lines of `buf` from `lo` on, last first (with `pattern`, those holding it); true once `onLine` did. */
function eachLine(buf: Buffer, lo: number, pattern: Buffer | undefined, onLine: (line: Buffer) => boolean): boolean {
  let end = buf.byteLength;
  if (pattern === undefined) {
    while (end > lo) {
      const nl = buf.lastIndexOf(LF, end - 1);
      const from = nl < lo ? lo : nl + 1;
      if (end > from && onLine(buf.subarray(from, end))) return true;
      end = from - 1;
    }
    return false;
  }
  // (A negative offset would count from the buffer's end: no room is no match.)
  let at = end - pattern.byteLength < lo ? -1 : buf.lastIndexOf(pattern, end - pattern.byteLength);
  while (at >= lo) {
    const nl = buf.lastIndexOf(LF, at);
    const from = nl < lo ? lo : nl + 1;
    let to = buf.indexOf(LF, at);
    if (to < 0 || to > end) to = end;
    if (onLine(buf.subarray(from, to))) return true;
    // The next match ends before this line: a pattern holds no LF.
    if (from - 1 - pattern.byteLength < lo) return false;
    at = buf.lastIndexOf(pattern, from - 1 - pattern.byteLength);
    end = from - 1;
  }
  return false;
}
