import {
  closeSync,
  constants,
  existsSync,
  fstatSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
} from 'node:fs';
import { makeDirs, openRegularFile } from '../../config/safe-files.js';
import { WriteFailed } from '../../errors.js';
import { dirname } from 'node:path';
import type { TerminalRecord } from '../../schema/terminal-record.js';
import { flushAtExit, forgetAtExit } from './exit-flush.js';
import { LossMarks } from './loss-marks.js';

/** The log is opened to append (`a+`); never a FIFO or a device, which could block every write. */
const APPEND_FLAGS = constants.O_RDWR | constants.O_APPEND | constants.O_CREAT;

/** How long a finished record may wait in memory for the next grouped write (ms). */
export const DEFAULT_FLUSH_DELAY_MS = 20;
/** Records kept queued for another try after failed writes, at most (the oldest beyond are dropped, and the log marked). */
const MAX_RETAINED_LINES = 20_000;
/** After a failed write, the next try (ms). */
const RETRY_MS = 1_000;
/** After a failed rotation, the next try (ms). */
const ROTATE_RETRY_MS = 10_000;
/** Shortest spacing of write-failure reports (ms). */
const REPORT_MS = 10_000;
/** Size of the reused write buffer, and the largest one kept after a burst. */
const OUT_BYTES = 64 * 1024;
const MAX_KEPT_OUT_BYTES = 4 * 1024 * 1024;
/** `fd` of a closed log: nothing more is written or retried. */
const CLOSED = -2;

/**
 * Rotated JSONL of terminal records (`server.decision_log_path`). Finished records are
 * queued and written together, with one synchronous write at most `flushDelayMs` later (a
 * write costs the same fixed system time whether it carries one record or a hundred); every
 * read (`retainedFiles`), every caller that can hand a record out (`flush()` before a lookup), a
 * close and the process's exit write what is queued first. So a record is in the file (the
 * kernel's page cache) before any lookup can return it, and a record any lookup returned
 * survives `kill -9` of the router; a `kill -9` can lose at most the last `flushDelayMs` of
 * records that nothing had handed out yet. Files: `path` (current), `path.1` ... older.
 */
export class DecisionLog {
  private fd = -1;
  private size = 0;
  private pending: string[] = [];
  /**
   * Where queued lines are encoded for one write, reused between flushes: joining them into
   * one string and encoding that was most of a record's cost in the router's profile.
   */
  private out = Buffer.allocUnsafe(OUT_BYTES);
  private timer: NodeJS.Timeout | undefined;
  /** The file may end in the middle of a line (a failed write): the next write starts with a newline. */
  private torn = false;
  /** Rotation failed (a read-only folder): the current file grows past its bound until then. */
  private rotateBlockedUntil = 0;
  private lastReport = Number.NEGATIVE_INFINITY;
  /** After a failed write: no quiet retry before this time (ms). */
  private retryAt = 0;
  /** What is known to be lost from this log, kept beside it across restarts (see LossMarks). */
  private readonly marks: LossMarks;
  /** Rotation may have deleted records (here, or by an earlier process): a search of the retained files cannot say nothing else matched. */
  /** The last write failed and no write has worked since (the router's `/readyz` reports it). */
  writeFailing = false;

  get recordsDeleted(): boolean {
    return this.marks.deleted;
  }
  /** A router on this log once stopped without writing every record: some requests may have none. */
  get recordsMayBeMissing(): boolean {
    return this.marks.uncleanAtMs !== undefined;
  }
  /** When records were last known to be missing (the `.unclean` mark's time), or undefined. */
  get uncleanAtMs(): number | undefined {
    return this.marks.uncleanAtMs;
  }
  /** Called after the file was found removed or replaced and made again (the router re-takes its lock). */
  onReopened: (() => void) | undefined;
  /** Called after a rotation deleted records (the router rewrites its in-flight journal). */
  onRotated: (() => void) | undefined;

  /**
   * @param onWriteError called when a deferred write fails with the number of records that
   *   stay in memory only (the caller logs it; nothing about the records themselves).
   */
  constructor(
    readonly path: string,
    private readonly maxBytes: number,
    private readonly maxFiles: number,
    private readonly onWriteError?: (err: unknown, records: number) => void,
    private readonly flushDelayMs = DEFAULT_FLUSH_DELAY_MS,
  ) {
    this.marks = new LossMarks(path);
  }

  /** Opens (creating the folder); a torn last line from a crash is closed off first. */
  open(): void {
    makeDirs(dirname(this.path), 0o700);
    this.fd = openRegularFile(this.path, APPEND_FLAGS, 0o600);
    this.size = fstatSync(this.fd).size;
    // Every file slot in use (with one file: any content): an earlier process's rotation may
    // already have deleted records.
    if (this.maxFiles > 1 ? existsSync(`${this.path}.${this.maxFiles - 1}`) : this.size > 0) this.marks.markDeleted();
    this.marks.read();
    if (this.size > 0) {
      const last = Buffer.alloc(1);
      readSync(this.fd, last, 0, 1, this.size - 1);
      if (last[0] !== 0x0a) this.write('\n');
    }
  }

  /** Notes, for good, that a router on this log stopped without writing every record (see recordsMayBeMissing). */
  markUnclean(): void {
    this.marks.markUnclean();
  }

  /** Queues one decision; it is written within `flushDelayMs`, or sooner by flush(). */
  append(gid: string, record: TerminalRecord): void {
    this.appendJson(gid, JSON.stringify(record));
  }

  /** append() with the record already serialized (`json`: `JSON.stringify(record)`). */
  appendJson(gid: string, json: string): void {
    if (this.fd === CLOSED) {
      // Finished after the log was closed (a stop's last moments): not written, and said so.
      this.markUnclean();
      return;
    }
    // The gateway id joins the record's own members (a `req_` + hex id: nothing to escape).
    this.pending.push(`${json.slice(0, -1)},"gateway_request_id":${JSON.stringify(gid)}}\n`);
    if (this.timer === undefined) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.flushQuietly();
      }, this.flushDelayMs);
      this.timer.unref();
      flushAtExit(this);
    }
  }

  /**
   * Writes every queued decision, rotating between records as needed. Thrown when: a write
   * fails; the records not written stay queued (up to MAX_RETAINED_LINES) for the next flush,
   * and they are in router memory either way.
   */
  flush(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    forgetAtExit(this);
    if (this.pending.length === 0) return;
    const lines = this.pending;
    this.pending = [];
    // lines[0, from) are in the file; a chunk is lines[from, i), encoded in this.out[0, end)
    // after a leading newline when the file may end mid-line (`lead`: 0 or 1 byte).
    let from = 0;
    try {
      this.ensureCurrent();
      let lead = this.startChunk();
      let end = lead;
      for (let i = 0; i < lines.length; i++) {
        const at = end;
        end = this.encode(lines[i]!, at);
        const bytes = end - at;
        const chunkBytes = at - lead;
        if (
          this.size + chunkBytes > 0 &&
          this.size + chunkBytes + bytes > this.maxBytes &&
          Date.now() >= this.rotateBlockedUntil
        ) {
          if (i > from) this.writeChunk(lines, from, i, lead, at);
          from = i;
          if (this.size > 0) this.tryRotate();
          // This line begins the next chunk (after a newline, when the file is torn now).
          const next = this.torn ? 1 : 0;
          this.out.copyWithin(next, at, end);
          lead = this.startChunk();
          end = lead + bytes;
        }
      }
      if (lines.length > from) this.writeChunk(lines, from, lines.length, lead, end);
    } catch (err) {
      const written = err instanceof WriteFailed ? err.lines : 0;
      this.retain(lines.slice(from + written));
      throw err instanceof WriteFailed ? err.cause : err;
    } finally {
      // A burst (records retried after a failure) grew the buffer: it is not kept.
      if (this.out.length > MAX_KEPT_OUT_BYTES) this.out = Buffer.allocUnsafe(OUT_BYTES);
    }
  }

  /** Starts a chunk in `out`: a newline first when the file may end mid-line. Returns its length (0 or 1). */
  private startChunk(): number {
    if (!this.torn) return 0;
    this.out[0] = 0x0a;
    return 1;
  }

  /** Encodes one line into `out` at `at` (growing it as needed); returns where it ends. */
  private encode(line: string, at: number): number {
    const worst = at + line.length * 3;
    if (worst > this.out.length) {
      const bigger = Buffer.allocUnsafe(Math.max(worst, this.out.length * 2));
      this.out.copy(bigger, 0, 0, at);
      this.out = bigger;
    }
    return at + this.out.write(line, at);
  }

  /**
   * Flushes, reporting a failure through `onWriteError` (at most once per REPORT_MS, with the
   * records still waiting) instead of throwing, and trying again RETRY_MS later.
   */
  flushQuietly(force = false): void {
    // After a failure, lookups and reads do not try again before the retry is due: each try
    // rebuilds and rewrites what is queued (up to MAX_RETAINED_LINES), on the event loop.
    if (!force && this.pending.length > 0 && Date.now() < this.retryAt) {
      this.scheduleRetry();
      return;
    }
    try {
      this.flush();
      this.writeFailing = false;
    } catch (err) {
      this.writeFailing = true;
      this.retryAt = Date.now() + RETRY_MS;
      this.report(err, this.pending.length);
      this.scheduleRetry();
    }
  }

  /** Reports a write or rotation failure through `onWriteError`, at most once per REPORT_MS. */
  private report(err: unknown, waiting: number): void {
    const t = Date.now();
    if (t - this.lastReport < REPORT_MS) return;
    this.lastReport = t;
    this.onWriteError?.(err, waiting);
  }

  /** One timer for the next try when it is due (none when nothing waits or the log is closed). */
  private scheduleRetry(): void {
    if (this.timer !== undefined || this.fd === CLOSED || this.pending.length === 0) return;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        this.flushQuietly(true);
      },
      Math.max(0, this.retryAt - Date.now()),
    );
    this.timer.unref();
    flushAtExit(this);
  }

  /** Writes what is queued, then closes the file. Records that cannot be written mark the log (they are lost to it). */
  close(): void {
    if (this.pending.length > 0) this.flushQuietly(true);
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    forgetAtExit(this);
    if (this.pending.length > 0) {
      this.pending = [];
      this.markUnclean();
    }
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = CLOSED;
  }

  /** Keeps lines that were not written for the next flush, the newest MAX_RETAINED_LINES at most. */
  private retain(lines: string[]): void {
    this.pending = lines.concat(this.pending);
    if (this.pending.length > MAX_RETAINED_LINES) {
      // Dropped from the queue for good: a search of the files can no longer be complete.
      this.pending.splice(0, this.pending.length - MAX_RETAINED_LINES);
      this.markUnclean();
    }
  }

  /**
   * Makes sure the open file is still the one at `path`: a file removed or replaced under the
   * router (its folder deleted, an operator's `rm`) is reopened (folder made again), and the log
   * is marked, since what the old file held is gone. Opens it when no file is open.
   */
  private ensureCurrent(): void {
    if (this.fd === CLOSED) throw new Error('decision log closed');
    if (this.fd >= 0) {
      let same = false;
      try {
        const onDisk = statSync(this.path);
        const open = fstatSync(this.fd);
        same = onDisk.ino === open.ino && onDisk.dev === open.dev;
      } catch {
        same = false;
      }
      if (same) return;
      try {
        closeSync(this.fd);
      } catch {
        // already unusable
      }
      this.fd = -1;
      this.reopen();
      this.markUnclean();
      this.onReopened?.();
      return;
    }
    // No file open (reopening after a failed rotation failed): made again now, lock too.
    this.reopen();
    this.onReopened?.();
  }

  private reopen(): void {
    makeDirs(dirname(this.path), 0o700);
    this.fd = openRegularFile(this.path, APPEND_FLAGS, 0o600);
    this.size = fstatSync(this.fd).size;
    // Whatever the file ends with, the next record starts on a line of its own.
    this.torn = this.size > 0;
  }

  /** The retained files, newest first, once what is queued is written (read by decision-lines.ts). */
  retainedFiles(): string[] {
    this.flushQuietly();
    const files = [this.path];
    for (let i = 1; i < this.maxFiles; i++) files.push(`${this.path}.${i}`);
    return files.filter((f) => existsSync(f));
  }

  private write(s: string): void {
    const buf = Buffer.from(s, 'utf8');
    let off = 0;
    while (off < buf.byteLength) off += writeSync(this.fd, buf, off);
    this.size += buf.byteLength;
  }

  /**
   * Writes out[0, end), which holds `lead` bytes (a newline or nothing) and then lines[from, to),
   * with one write. Thrown when: it fails (WriteFailed, with how many of the lines are whole in
   * the file; a line cut short is ended by the next write's newline).
   */
  private writeChunk(lines: readonly string[], from: number, to: number, lead: number, end: number): void {
    let off = 0;
    try {
      while (off < end) off += writeSync(this.fd, this.out, off, end - off);
    } catch (err) {
      this.size += off;
      if (off > 0) this.torn = true;
      // A line whose JSON is all in the file counts as written even when its newline is not
      // (the next write's leading newline ends it): written again, it would be there twice.
      let whole = 0;
      let lineEnd = lead;
      for (let k = from; k < to; k++) {
        lineEnd += Buffer.byteLength(lines[k]!);
        if (lineEnd - 1 > off) break;
        whole++;
      }
      throw new WriteFailed(err, whole);
    }
    this.size += end;
    this.torn = false;
  }

  /** Rotates; when it cannot (a read-only folder), keeps writing to the current file and tries again ROTATE_RETRY_MS later. */
  private tryRotate(): void {
    try {
      this.rotate();
    } catch (err) {
      this.rotateBlockedUntil = Date.now() + ROTATE_RETRY_MS;
      this.report(err, 0);
      if (this.fd < 0) this.reopen();
    }
  }

  private rotate(): void {
    // Renamed first, closed after: a rename that fails leaves the current file open and in use.
    // With one file it is itself the oldest.
    const oldest = this.maxFiles > 1 ? `${this.path}.${this.maxFiles - 1}` : this.path;
    const deleted = existsSync(oldest);
    if (deleted) {
      rmSync(oldest);
      this.marks.markDeleted();
    }
    if (this.maxFiles > 1) {
      for (let i = this.maxFiles - 2; i >= 1; i--) {
        const from = `${this.path}.${i}`;
        if (existsSync(from)) renameSync(from, `${this.path}.${i + 1}`);
      }
      renameSync(this.path, `${this.path}.1`);
    }
    closeSync(this.fd);
    this.fd = -1;
    this.fd = openRegularFile(this.path, APPEND_FLAGS, 0o600);
    this.size = 0;
    this.torn = false;
    // Records are gone with the deleted file: whoever names their requests elsewhere is told.
    if (deleted) this.onRotated?.();
  }
}
