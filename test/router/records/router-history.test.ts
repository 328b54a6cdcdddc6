import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RouterRegistry, type ActiveRequest } from '../../../src/router/records/router-registry.js';
import { DecisionLog } from '../../../src/router/records/decision-log.js';
import { gid, rec } from '../../support/terminal-records.js';

const active = (n: number, over: Partial<ActiveRequest> = {}): ActiveRequest => ({
  gid: gid(n),
  requestId: gid(n),
  model: 'm',
  route: 'chat.completions',
  startedAt: Date.now(),
  phase: 'checking',
  phaseAt: Date.now(),
  lastUpstreamAt: null,
  admissionWaitMs: null,
  estimatedPromptTokens: null,
  estimatedCompletionTokens: 0,
  upstreamPromptTokens: null,
  upstreamCompletionTokens: null,
  sessionId: undefined,
  workbenchRunId: undefined,
  taskId: undefined,
  queuedAt: null,
  stop: undefined,
  ...over,
});

describe('router history by task or workbench run', () => {
  it("finds a task's records in memory and, once evicted, in the decision log; a longer id with the same start is another task", async () => {
    const log = new DecisionLog(join(mkdtempSync(join(tmpdir(), 'svc-hist-')), 'd.jsonl'), 1 << 20, 2);
    log.open();
    const reg = new RouterRegistry({ host: 'node-a', bufferSize: 2, log });
    const lineage = [
      { task_id: 'T' },
      { task_id: 'T2' },
      { task_id: 'T', workbench_run_id: 'W' },
      { workbench_run_id: 'W' },
    ];
    lineage.forEach((l, i) => {
      const n = i + 1;
      const at = new Date(Date.parse('2026-11-25T21:49:10.000Z') + n * 1000).toISOString();
      reg.begin(active(n));
      reg.finish(active(n), rec({ request_id: gid(n), started_at: at, finished_at: at, ...l }));
    });
    // The ring holds 3 and 4 only: 1 comes from the log, 3 from memory.
    const task = await reg.history('task_id', 'T');
    assert.deepEqual(
      task.requests.map((r) => r.request_id),
      [gid(3), gid(1)],
    );
    assert.deepEqual(task.truncation, { returned: 2, omitted: 0 });
    assert.deepEqual(
      (await reg.history('workbench_run_id', 'W')).requests.map((r) => r.request_id),
      [gid(4), gid(3)],
    );
    assert.deepEqual(
      (await reg.history('task_id', 'T2')).requests.map((r) => r.request_id),
      [gid(2)],
    );
    assert.equal((await reg.history('session_id', 'T')).requests.length, 0, 'a task id is not a session id');
    log.close();
  });
});

describe('router recent list (?recent=1)', () => {
  it('answers the buffer newest finish first, at most 50, counting the buffered rest; evicted records are not recent', () => {
    const reg = new RouterRegistry({ host: 'node-a', bufferSize: 60 });
    assert.deepEqual(reg.recent(), { requests: [], truncation: { returned: 0, omitted: 0 } });
    const base = Date.parse('2026-11-25T21:49:10.000Z');
    // 70 requests; each finishes a second after the one before, except that 61 and 62 are
    // buffered last although they finished first of all (a slow write, a late record), and
    // 69 and 70 finished at the same millisecond.
    const order = [...Array.from({ length: 70 }, (_, i) => i + 1).filter((n) => n !== 61 && n !== 62), 61, 62];
    const finishedAt = (n: number): number => (n === 61 || n === 62 ? base - n : base + Math.min(n, 69) * 1000);
    for (const n of order) {
      const at = new Date(finishedAt(n)).toISOString();
      reg.begin(active(n));
      reg.finish(active(n), rec({ request_id: gid(n), started_at: at, finished_at: at }));
    }
    const { requests, truncation } = reg.recent();
    // The ring holds the last 60 buffered (11..60, 63..70, 61, 62): the 50 newest of those,
    // of the two that finished together the one buffered later first; 61 and 62 are left out.
    assert.deepEqual(truncation, { returned: 50, omitted: 10 });
    assert.deepEqual(
      requests.map((r) => r.request_id),
      [70, 69, 68, 67, 66, 65, 64, 63, ...Array.from({ length: 42 }, (_, i) => 60 - i)].map(gid),
    );
    for (let i = 1; i < requests.length; i++)
      assert.ok(Date.parse(requests[i - 1]!.finished_at) >= Date.parse(requests[i]!.finished_at));
  });
});
