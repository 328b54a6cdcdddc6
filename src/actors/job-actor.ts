import { statSync } from 'node:fs';
import type { Logger } from 'pino';
import type { Bus } from '../streams/bus.js';
import type { WorkloadRecord } from '../schema/record.js';
import { JobStore } from '../stores/job-store.js';
import { DEFAULT_WINDOW_CAP, WINDOW_TERMINAL_MS } from './window.js';
import { NATIVE_TERMINAL, mapJob, type JobOwner } from './job-mapping.js';
import { OwnerActor } from './owner-actor.js';

/**
 * The actor of a job-store owner (controller operations, benchmark jobs, media jobs): reads
 * the store through its own read-only handle and publishes the mapped window. A store that
 * cannot be read makes the source unavailable (inspection-error), never empty.
 */
export function createJobActor(o: {
  host: string;
  owner: JobOwner;
  storePath: string;
  bus: Bus;
  staleAfterMs: number;
  logger?: Logger;
}): OwnerActor & { closeStore(): void } {
  let store: JobStore | undefined;
  let opened: { dev: number; ino: number } | undefined;
  const actor = new OwnerActor({
    host: o.host,
    owner: o.owner,
    bus: o.bus,
    staleAfterMs: o.staleAfterMs,
    pollMs: 1000,
    minIntervalMs: 100,
    ...(o.logger ? { logger: o.logger } : {}),
    read: () => {
      // The store file removed or replaced under the controller (its state_dir deleted): what
      // the open handle still sees is gone from disk, so the source is unavailable, not current.
      const now = statSync(o.storePath);
      if (opened !== undefined && (now.ino !== opened.ino || now.dev !== opened.dev))
        throw new Error('job store replaced');
      if (store === undefined) {
        store = JobStore.openReadOnly(o.storePath);
        opened = { dev: now.dev, ino: now.ino };
      }
      const rows = store.window(Date.now() - WINDOW_TERMINAL_MS, NATIVE_TERMINAL, DEFAULT_WINDOW_CAP + 1);
      // One more row than the cap says "more than the cap": the exact excess is not counted here.
      const records: WorkloadRecord[] = [];
      let unmapped = false;
      for (const row of rows.slice(0, DEFAULT_WINDOW_CAP)) {
        try {
          records.push(mapJob(o.owner, o.host, row));
        } catch {
          // A row no record can be made of (a time outside what a timestamp can say, edited
          // by hand): left out, and the answer says records are missing (the actor's rule
          // for a malformed record), rather than the whole store read as unreadable.
          unmapped = true;
        }
      }
      if (unmapped) return { status: 'partial', reason: 'malformed', records, countUnknown: true };
      return { status: 'complete', records, ...(rows.length > DEFAULT_WINDOW_CAP ? { countUnknown: true } : {}) };
    },
  });
  return Object.assign(actor, {
    closeStore() {
      store?.close();
      store = undefined;
      opened = undefined;
    },
  });
}
