import { makeDirs } from '../config/safe-files.js';
import { StoreGoneError } from '../errors.js';
import { statSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';

export { StoreGoneError } from '../errors.js';

/** One job or operation as its owner stores it: native vocabulary, counts, times in epoch ms. */
export interface JobRow {
  readonly id: string;
  readonly kind: string;
  readonly native_state: string;
  readonly outcome: string | null;
  readonly progress_completed: number | null;
  readonly progress_total: number | null;
  readonly created_at: number;
  readonly updated_at: number;
  /** The owner's last sign of life for this job (runners beat while they work). */
  readonly heartbeat_at: number;
  /** Bounded JSON summary (counts and timings only). */
  readonly summary: string | null;
}

export type JobPatch = Partial<
  Pick<JobRow, 'native_state' | 'outcome' | 'progress_completed' | 'progress_total' | 'summary'>
>;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  kind TEXT NOT NULL,
  native_state TEXT NOT NULL,
  outcome TEXT,
  progress_completed INTEGER,
  progress_total INTEGER,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  heartbeat_at INTEGER NOT NULL,
  summary TEXT
);
CREATE INDEX IF NOT EXISTS jobs_updated ON jobs (updated_at);
`;

/**
 * An owner's job store on embedded SQLite (WAL). The owner writes; its actor reads through
 * a separate read-only handle, so a reader can never rewrite `created_at`, `updated_at` or
 * the heartbeat.
 */
export class JobStore {
  private constructor(
    private readonly db: Database.Database,
    readonly readonly: boolean,
    /** The writer's file, as opened: its path and identity (`dev`/`ino`). */
    private readonly file?: { readonly path: string; readonly dev: number; readonly ino: number },
  ) {}

  /** Opens (creating) the store for writing. Thrown when: the file cannot be opened. */
  static openForOwner(path: string): JobStore {
    makeDirs(dirname(path), 0o700);
    const db = new Database(path);
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.exec(SCHEMA);
    const st = statSync(path);
    return new JobStore(db, false, { path, dev: st.dev, ino: st.ino });
  }

  /** Opens an existing store read-only (the actor's view). Thrown when: missing or unreadable. */
  static openReadOnly(path: string): JobStore {
    const db = new Database(path, { readonly: true, fileMustExist: true });
    return new JobStore(db, true);
  }

  /**
   * Before each write: the file still at the store's path is the one it writes. A store file
   * removed or replaced (its `state_dir` deleted) would take writes into a file nobody can
   * read again, and each would be lost: refused instead (StoreGoneError, like a full disk).
   */
  private attached(): void {
    if (!this.file) return;
    const st = statSync(this.file.path, { throwIfNoEntry: false });
    if (!st || st.dev !== this.file.dev || st.ino !== this.file.ino) throw new StoreGoneError();
  }

  insert(row: JobRow): void {
    this.attached();
    this.db
      .prepare(`INSERT INTO jobs (id, kind, native_state, outcome, progress_completed, progress_total, created_at, updated_at, heartbeat_at, summary)
                VALUES (@id, @kind, @native_state, @outcome, @progress_completed, @progress_total, @created_at, @updated_at, @heartbeat_at, @summary)`)
      .run(row);
  }

  /** Changes a job; `updated_at` and the heartbeat move to `now`. */
  update(id: string, patch: JobPatch, now: number): void {
    this.attached();
    const sets = Object.keys(patch).map((k) => `${k} = @${k}`);
    sets.push('updated_at = @now', 'heartbeat_at = @now');
    this.db.prepare(`UPDATE jobs SET ${sets.join(', ')} WHERE id = @id`).run({ ...patch, id, now });
  }

  /** A sign of life without a change of state. */
  heartbeat(id: string, now: number): void {
    this.heartbeatAll([id], now);
  }

  /** Beats many jobs' heartbeats in one transaction (one write, however many). */
  heartbeatAll(ids: readonly string[], now: number): void {
    this.attached();
    const beat = this.db.prepare('UPDATE jobs SET heartbeat_at = ? WHERE id = ?');
    this.db.transaction(() => {
      for (const id of ids) beat.run(now, id);
    })();
  }

  get(id: string): JobRow | undefined {
    return this.db.prepare('SELECT * FROM jobs WHERE id = ?').get(id) as JobRow | undefined;
  }

  /** Jobs some query could return: not terminal, or updated since `since`; newest first, bounded. */
  window(since: number, terminalStates: readonly string[], limit: number): JobRow[] {
    const marks = terminalStates.map(() => '?').join(',');
    return this.db
      .prepare(
        `SELECT * FROM jobs WHERE native_state NOT IN (${marks}) OR updated_at >= ? ORDER BY updated_at DESC LIMIT ?`,
      )
      .all(...terminalStates, since, limit) as JobRow[];
  }

  /** Jobs in any of `states` (start-up reconciliation). */
  inStates(states: readonly string[]): JobRow[] {
    const marks = states.map(() => '?').join(',');
    return this.db.prepare(`SELECT * FROM jobs WHERE native_state IN (${marks})`).all(...states) as JobRow[];
  }

  count(): number {
    return (this.db.prepare('SELECT count(*) AS n FROM jobs').get() as { n: number }).n;
  }

  close(): void {
    this.db.close();
  }
}
