import { closeSync, constants, fstatSync, readSync } from 'node:fs';
import { openRegularFile } from '../../config/safe-files.js';
import { GENERATED_ID_RE, checkTerminalRecord, type TerminalRecord } from '../../schema/terminal-record.js';
import { finishReasonOf } from './stream-observer.js';

/**
 * Reading the decision log: the bounded tail of a file, and one stored line back into the
 * current record shape (older versions' lines included). Writing is decision-log.ts.
 */

/** One retained decision: the public record plus the generated id it answers to. */
export interface Decision {
  readonly gid: string | undefined;
  readonly record: TerminalRecord;
}

/** The last `max` bytes of a file (all of it when smaller); `cut`: bytes before them were left unread. */
export function readTail(file: string, max: number): { buf: Buffer; cut: boolean } {
  // Never waits on a FIFO put in a rotated file's place: a regular file or an error.
  const fd = openRegularFile(file, constants.O_RDONLY);
  try {
    const size = fstatSync(fd).size;
    const n = Math.min(size, max);
    const buf = Buffer.allocUnsafe(n);
    let got = 0;
    while (got < n) {
      const r = readSync(fd, buf, got, n - got, size - n + got);
      if (r === 0) break;
      got += r;
    }
    return { buf: got === n ? buf : buf.subarray(0, got), cut: size > n };
  } finally {
    closeSync(fd);
  }
}

const OPTIONAL_KEYS = ['session_id', 'workbench_run_id', 'task_id', 'routing_config_hash', 'package_version'] as const;
const REQUIRED_KEYS = [
  'request_id', 'model', 'route', 'outcome', 'status_code', 'started_at', 'finished_at', 'latency_ms', 'readiness_check_ms',
  'admission_wait_ms', 'upstream_duration_ms', 'time_to_first_content_ms', 'finish_reason', 'output_limit',
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
  for (const k of OPTIONAL_KEYS) if (typeof raw[k] === 'string') rec[k] = raw[k];
  if (!checkTerminalRecord.Check(rec)) return undefined;
  const g = raw['gateway_request_id'];
  const gid = typeof g === 'string' && GENERATED_ID_RE.test(g) ? g : GENERATED_ID_RE.test(rec['request_id'] as string) ? (rec['request_id'] as string) : undefined;
  return { gid, record: rec as TerminalRecord };
}

/**
 * Decisions newest first across `files` (newest file first), reading at most `budget` bytes.
 * Torn or foreign lines are skipped. `visit` returning true stops the scan. `truncated` says
 * the budget stopped it before the oldest file's start.
 */
export function scanDecisionFiles(files: readonly string[], visit: (d: Decision) => boolean | void, budget: number): { truncated: boolean } {
  let left = budget;
  for (const [n, file] of files.entries()) {
    let text: string;
    let cut = false;
    try {
      // Only the file's last `left` bytes are read: the budget bounds memory, not just parsing.
      const tail = readTail(file, left);
      cut = tail.cut;
      left -= tail.buf.byteLength;
      text = tail.buf.toString('utf8');
    } catch {
      continue; // rotated away while reading
    }
    const lines = text.split('\n');
    for (let i = lines.length - 1; i >= 0; i--) {
      const d = parseDecision(lines[i]!);
      if (d && visit(d) === true) return { truncated: false };
    }
    // Truncated only when something was left unread: this file's head or an older file.
    if (cut || (left === 0 && n < files.length - 1)) return { truncated: true };
  }
  return { truncated: false };
}
