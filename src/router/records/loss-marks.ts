import { existsSync, statSync } from 'node:fs';
import { writeNewFile } from '../../config/safe-files.js';

/**
 * What a decision log is known to have lost, kept in marker files beside it so that it stays
 * known across restarts: `<path>.rotated` (rotation deleted its oldest records; kept also
 * when `decision_log_max_files` grows later) and `<path>.unclean` (a router stopped without
 * writing every record; the file's time is when). A marker that cannot be written is known
 * to this process at least.
 */
export class LossMarks {
  deleted = false;
  uncleanAtMs: number | undefined;

  constructor(private readonly path: string) {}

  /** Reads the markers an earlier process left. */
  read(): void {
    if (existsSync(`${this.path}.rotated`)) this.deleted = true;
    if (!existsSync(`${this.path}.unclean`)) return;
    try {
      this.uncleanAtMs = statSync(`${this.path}.unclean`).mtimeMs;
    } catch {
      this.uncleanAtMs = Date.now();
    }
  }

  /** Rotation may have deleted records. */
  markDeleted(): void {
    if (this.deleted) return;
    this.deleted = true;
    write(`${this.path}.rotated`, 'rotation of this decision log has deleted its oldest records\n', true);
  }

  /** A router stopped (or failed a write) without writing every record, now. */
  markUnclean(): void {
    this.uncleanAtMs = Date.now();
    write(
      `${this.path}.unclean`,
      'a router using this decision log was killed; records of its last requests may be missing\n',
      false,
    );
  }
}

function write(path: string, text: string, once: boolean): void {
  try {
    if (!once || !existsSync(path)) writeNewFile(path, text);
  } catch {
    // in memory at least, for this process
  }
}
