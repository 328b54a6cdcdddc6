import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RECIPE_ERRORS } from '../../src/cli/recipe-command.js';
import { looksLikeStackTrace, runCli } from '../cli/run-cli.js';
import { RECIPE_CONFIG, startFakeDocker, type FakeDocker } from './fake-docker.js';

const RECIPES = join(RECIPE_CONFIG, 'recipes');
const err = (key: keyof typeof RECIPE_ERRORS): string => `svc-serving: error: ${RECIPE_ERRORS[key]}\n`;

describe('`svc-serving recipe status` (built CLI) with a recorded Docker Engine API on a unix socket', () => {
  let fake: FakeDocker;
  let shm: string;
  before(async () => {
    fake = await startFakeDocker();
    shm = mkdtempSync(join(tmpdir(), 'svc-shm-'));
    writeFileSync(join(shm, 'svc.whisper-small.cache'), Buffer.alloc(2048));
  });
  after(async () => {
    await fake.close();
  });
  const status = (name: string, ...extra: string[]) =>
    runCli([
      'recipe',
      'status',
      name,
      '--recipes-dir',
      RECIPES,
      '--container-socket',
      fake.socketPath,
      '--shm-dir',
      shm,
      ...extra,
    ]);

  it('--json prints the status object', async () => {
    const r = await status('qwen-7b', '--json');
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stderr, '');
    const s = JSON.parse(r.stdout) as Record<string, unknown>;
    assert.deepEqual(Object.keys(s), [
      'recipe',
      'state',
      'observation_quality',
      'baseline_equal',
      'revision',
      'image_digest',
      'recipe_digest',
      'registry_digest',
      'context_size',
      'serve_mode',
      'router',
      'shared_memory',
    ]);
    assert.equal(s['state'], 'running');
    assert.equal(s['observation_quality'], 'observed-running');
    assert.equal(s['baseline_equal'], true);
    assert.equal(s['context_size'], 32768);
    assert.deepEqual(s['router'], { state: 'absent' });
    for (const secret of [fake.socketPath, RECIPES, shm, 'canary']) assert.ok(!r.stdout.includes(secret), secret);
  });

  it('prints a readable status without --json', async () => {
    const r = await status('whisper-small');
    assert.equal(r.code, 0, r.stderr);
    for (const line of [
      'recipe whisper-small',
      'state              configured (configured)',
      'baseline equal     no',
      'unresolved         container-not-running, recipe-digest-mismatch',
      'gpu owner          none',
      'files              svc.whisper-small.cache',
      'reclaimable bytes  2048',
    ])
      assert.ok(r.stdout.includes(line), line);
    assert.ok(!r.stdout.includes(shm));
  });

  it('an unknown recipe exits 2 with a fixed message', async () => {
    const r = await status('no-such-recipe');
    assert.equal(r.code, 2);
    assert.equal(r.stderr, err('unknown'));
    assert.equal(r.stdout, '');
  });

  it('a malformed name exits 2 and echoes nothing', async () => {
    const r = await status('../canary/etc');
    assert.equal(r.code, 2);
    assert.equal(r.stderr, err('name'));
  });

  it('an unreadable recipes directory exits 2 without naming it', async () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'svc-canary-')), 'missing');
    const r = await runCli([
      'recipe',
      'status',
      'qwen-7b',
      '--recipes-dir',
      dir,
      '--container-socket',
      fake.socketPath,
    ]);
    assert.equal(r.code, 2);
    assert.equal(r.stderr, err('dirUnreadable'));
  });

  it('a recipe defined twice exits 2', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-recipes-'));
    copyFileSync(join(RECIPES, 'qwen-7b.toml'), join(dir, 'a.toml'));
    copyFileSync(join(RECIPES, 'qwen-7b.toml'), join(dir, 'b.toml'));
    const r = await runCli([
      'recipe',
      'status',
      'qwen-7b',
      '--recipes-dir',
      dir,
      '--container-socket',
      fake.socketPath,
    ]);
    assert.equal(r.code, 2);
    assert.equal(r.stderr, err('duplicate'));
  });

  it('an unreachable runtime exits 4 with a fixed message, never the socket path', async () => {
    const sock = join(mkdtempSync(join(tmpdir(), 'svc-canary-')), 'docker.sock');
    const r = await runCli([
      'recipe',
      'status',
      'qwen-7b',
      '--recipes-dir',
      RECIPES,
      '--container-socket',
      sock,
      '--json',
    ]);
    assert.equal(r.code, 4);
    assert.equal(r.stderr, err('runtime'));
    assert.equal(r.stdout, '');
    assert.ok(!looksLikeStackTrace(r.stderr));
  });

  it('usage errors keep the operand-free messages', async () => {
    const r = await runCli(['recipe', 'status', 'qwen-7b', '--canary-flag']);
    assert.equal(r.code, 2);
    assert.ok(!r.stderr.includes('canary'));
    const missing = await runCli(['recipe', 'status']);
    assert.equal(missing.code, 2);
  });
});
