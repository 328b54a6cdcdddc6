import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GpuSampler, type GpuTelemetry } from '../../src/telemetry/gpu-sampler.js';
import { fakeNvidiaSmi } from './support.js';

/** A stand-in nvidia-smi that answers as a real one does when it refuses the query: one line, exit 2. */
function refusingNvidiaSmi(): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-fake-smi-'));
  const path = join(dir, 'nvidia-smi');
  writeFileSync(path, '#!/bin/sh\necho \'Field "bogus.field" is not a valid field to query.\'\necho\nexit 2\n');
  chmodSync(path, 0o755);
  return path;
}

/** The first sample a sampler takes with `binary`. */
function firstSample(binary: string): Promise<GpuTelemetry> {
  const s = new GpuSampler({ binary, intervalMs: 60_000 });
  return new Promise((resolve) => {
    s.subscribe((t) => {
      s.stop();
      resolve(t);
    });
    s.start();
  });
}

describe('GPU sampler over nvidia-smi', () => {
  it('a real H200 recording is one sampled card with its history started', async () => {
    const t = await firstSample(fakeNvidiaSmi('h200-recorded.csv'));
    assert.equal(t.status, 'ok');
    assert.deepEqual(
      t.cards.map((c) => [c.uuid, c.name, c.memory_total_mib, c.power_w]),
      [['GPU-0ed127a3-aaaf-bd46-d58d-483944756ab2', 'NVIDIA H200', 143771, 125.56]],
    );
    assert.equal(t.series.length, 1);
    assert.equal(t.series[0]!.t.length, 1);
  });

  it('nvidia-smi refusing the query (exit 2, as a real driver does for an unknown field) is a failed run, never zero cards of data', async () => {
    const t = await firstSample(refusingNvidiaSmi());
    assert.equal(t.status, 'failed');
    assert.deepEqual(t.cards, []);
    assert.equal(t.aggregate.cards_counted, 0);
  });

  it('a missing binary is "absent" (no GPU telemetry), not a failure', async () => {
    const t = await firstSample(join(mkdtempSync(join(tmpdir(), 'svc-no-smi-')), 'nvidia-smi'));
    assert.equal(t.status, 'absent');
  });

  it('a run that ignores SIGTERM is over at the 5 s timeout: failed, and it and what it started are killed', {
    timeout: 20_000,
  }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-hung-smi-'));
    const path = join(dir, 'nvidia-smi');
    const pidFile = join(dir, 'child.pid');
    // Ignores SIGTERM and leaves a child of its own running, as a wedged tool can.
    writeFileSync(path, `#!/bin/sh\ntrap '' TERM\nsleep 1000 &\necho $! > ${pidFile}\nwait\n`);
    chmodSync(path, 0o755);
    const started = Date.now();
    const t = await firstSample(path);
    const took = Date.now() - started;
    assert.equal(t.status, 'failed');
    assert.deepEqual(t.cards, []);
    assert.ok(took >= 4_500 && took < 9_000, `over at the timeout (${took} ms)`);
    const childPid = Number(readFileSync(pidFile, 'utf8'));
    // Gone: no such process, or a zombie waiting for init to reap it (killed all the same).
    const alive = (pid: number): boolean => {
      try {
        return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
      } catch {
        return false;
      }
    };
    for (let i = 0; i < 50 && alive(childPid); i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(alive(childPid), false, 'the child it started is gone too');
  });
});
