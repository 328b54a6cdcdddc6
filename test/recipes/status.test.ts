import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadRecipeDir } from '../../src/recipes/config-dir.js';
import { DockerEngineClient } from '../../src/recipes/docker-api.js';
import { ContainerInspector, type ManagedContainer } from '../../src/recipes/inspector.js';
import type { LoadedRecipe } from '../../src/recipes/recipe-config.js';
import { buildRecipeStatus, collectRecipeStatus, registryDigest, shmUse } from '../../src/recipes/recipe-status.js';
import { scanSharedMemory } from '../../src/recipes/shared-memory.js';
import { RECIPE_CONFIG, startFakeDocker, type FakeDocker } from './fake-docker.js';

const VLLM_IMAGE = 'sha256:af7b4bcd0bed8fe384e836293d7dfdc4cfe36167af45bda8e8ae448d0e58d91b';
const VLLM_REGISTRY = 'sha256:c1459257b41e4cb90e816fed74f313eb5caa869e165a7b0fb3342ea3cd137239';
const recipes = loadRecipeDir(join(RECIPE_CONFIG, 'recipes')).entries;
const loaded = (name: string): LoadedRecipe => recipes.get(name)!;

describe('recipe status with a recorded Docker Engine API on a unix socket', () => {
  let fake: FakeDocker;
  let api: DockerEngineClient;
  let inspector: ContainerInspector;
  let shm: string;
  before(async () => {
    fake = await startFakeDocker();
    api = new DockerEngineClient(fake.socketPath);
    inspector = new ContainerInspector(api);
    shm = mkdtempSync(join(tmpdir(), 'svc-shm-'));
    writeFileSync(join(shm, 'svc.qwen-7b.nccl-0'), Buffer.alloc(4096));
    writeFileSync(join(shm, 'svc.whisper-small.cache'), Buffer.alloc(1000));
    writeFileSync(join(shm, 'svc.whisper-small.ring'), Buffer.alloc(24));
    writeFileSync(join(shm, 'svc.qwen-7b-extra.x'), Buffer.alloc(10)); // another recipe's name prefix
    writeFileSync(join(shm, 'nccl-shared'), Buffer.alloc(10));
  });
  after(async () => {
    await api.close();
    await fake.close();
  });

  it('a running container equal to its baseline', async () => {
    const s = await collectRecipeStatus(inspector, loaded('qwen-7b'), shm);
    assert.deepEqual(s, {
      recipe: 'qwen-7b',
      state: 'running',
      observation_quality: 'observed-running',
      baseline_equal: true,
      revision: 'r3',
      image_digest: VLLM_IMAGE,
      recipe_digest: loaded('qwen-7b').digest,
      registry_digest: VLLM_REGISTRY,
      context_size: 32768,
      serve_mode: { mode: 'gpu-exclusive', unresolved: [], gpu_owner: 'qwen-7b' },
      router: { state: 'absent' },
      shared_memory: {
        available: true,
        files: ['svc.qwen-7b.nccl-0'],
        blocked_reasons: ['container-running'],
        reclaimable_bytes: 0,
      },
    });
    assert.ok(!JSON.stringify(s).includes(shm), 'file names only, never paths');
    assert.ok(!JSON.stringify(s).includes('canary'), 'no env values');
  });

  it('an exited container made from an older recipe', async () => {
    const s = await collectRecipeStatus(inspector, loaded('whisper-small'), shm);
    assert.equal(s.state, 'configured');
    assert.equal(s.observation_quality, 'configured');
    assert.equal(s.baseline_equal, false);
    assert.deepEqual(s.serve_mode, {
      mode: 'gpu-exclusive',
      unresolved: ['container-not-running', 'recipe-digest-mismatch'],
      gpu_owner: null,
    });
    assert.match(s.registry_digest!, /^sha256:[0-9a-f]{64}$/);
    assert.equal(s.revision, loaded('whisper-small').digest.slice(7, 19));
    assert.deepEqual(s.shared_memory, {
      available: true,
      files: ['svc.whisper-small.cache', 'svc.whisper-small.ring'],
      blocked_reasons: [],
      reclaimable_bytes: 1024,
    });
  });

  it('no container, and its GPU held by another recipe', async () => {
    const s = await collectRecipeStatus(inspector, loaded('llama-8b'), join(shm, 'missing'));
    assert.equal(s.state, 'configured');
    assert.equal(s.baseline_equal, false);
    assert.equal(s.image_digest, VLLM_IMAGE, 'the baseline image as the runtime has it');
    assert.equal(s.registry_digest, VLLM_REGISTRY);
    assert.equal(s.context_size, 65536);
    assert.deepEqual(s.serve_mode, {
      mode: 'gpu-exclusive',
      unresolved: ['container-missing', 'gpu:0'],
      gpu_owner: 'qwen-7b',
    });
    assert.deepEqual(s.shared_memory, {
      available: false,
      files: [],
      blocked_reasons: ['shm-unreadable'],
      reclaimable_bytes: 0,
    });
  });

  it('reads only: every request is a GET', () => {
    assert.ok(fake.requests.length > 0);
    assert.ok(fake.requests.every((p) => p.startsWith('/')));
  });
});

describe('recipe status, pure parts', () => {
  const c = (over: Partial<ManagedContainer>): ManagedContainer => ({
    id: 'a'.repeat(64),
    recipe: 'qwen-7b',
    recipeDigest: loaded('qwen-7b').digest,
    status: 'running',
    image: VLLM_IMAGE,
    createdAt: 1,
    changedAt: 2,
    envNames: ['HF_TOKEN'],
    gpus: [0],
    ...over,
  });
  const shm = { available: true, files: [], blocked_reasons: [], reclaimable_bytes: 0 };
  const img = { id: VLLM_IMAGE, repoDigests: [`vllm/vllm-openai@${VLLM_REGISTRY}`] };
  const build = (containers: ManagedContainer[], baselineImage = img as typeof img | null) =>
    buildRecipeStatus({ loaded: loaded('qwen-7b'), containers, baselineImage, containerImage: baselineImage, shm });

  it('an unknown runtime state: unsupported, never the raw value (canary)', () => {
    const s = build([c({ status: 'canary-state-3391' })]);
    assert.equal(s.state, 'unsupported');
    assert.equal(s.observation_quality, 'configured');
    assert.deepEqual(s.serve_mode.unresolved, ['container-state-unsupported']);
    assert.ok(!JSON.stringify(s).includes('canary'));
    assert.equal(shmUse([c({ status: 'canary-state-3391' })]), 'unknown');
  });
  it('two containers claiming the recipe: unsupported and never baseline-equal', () => {
    const s = build([c({}), c({ id: 'b'.repeat(64) })]);
    assert.equal(s.state, 'unsupported');
    assert.equal(s.baseline_equal, false);
    assert.deepEqual(s.serve_mode.unresolved, ['container-ambiguous']);
  });
  it('baseline inequality: other image, other recipe digest, missing env, missing image', () => {
    assert.deepEqual(build([c({ image: 'sha256:' + 'f'.repeat(64) })]).serve_mode.unresolved, ['image-mismatch']);
    assert.deepEqual(build([c({ recipeDigest: null })]).serve_mode.unresolved, ['recipe-digest-mismatch']);
    assert.deepEqual(build([c({ envNames: [] })]).serve_mode.unresolved, ['env:HF_TOKEN']);
    const noImage = build([c({})], null);
    assert.deepEqual(noImage.serve_mode.unresolved, ['image-missing']);
    assert.equal(noImage.baseline_equal, false);
    for (const s of [build([c({ image: null })]), build([c({ recipeDigest: 'sha256:' + '0'.repeat(64) })])])
      assert.equal(s.baseline_equal, false);
  });
  it('GPU ownership: all-GPU containers and conflicts', () => {
    const other = c({ id: 'b'.repeat(64), recipe: 'other', gpus: 'all' });
    const s = build([other]);
    assert.equal(s.serve_mode.gpu_owner, 'other');
    assert.deepEqual(s.serve_mode.unresolved, ['container-missing', 'gpu:0']);
    assert.equal(build([c({ gpus: [] })]).serve_mode.gpu_owner, null, 'a container that requested no GPU owns none');
  });
  it('registry digest: prefers the recipe repository, else the first, else null', () => {
    const d = (n: string) => `sha256:${n.repeat(64)}`;
    assert.equal(
      registryDigest(
        { id: VLLM_IMAGE, repoDigests: [`mirror.local/x@${d('1')}`, `vllm/vllm-openai@${d('2')}`] },
        'vllm/vllm-openai:v1',
      ),
      d('2'),
    );
    assert.equal(
      registryDigest({ id: VLLM_IMAGE, repoDigests: [`vllm/vllm-openai@${d('2')}`] }, 'docker.io/vllm/vllm-openai:v1'),
      d('2'),
    );
    assert.equal(registryDigest({ id: VLLM_IMAGE, repoDigests: [`mirror.local/x@${d('1')}`] }, 'other:1'), d('1'));
    assert.equal(registryDigest({ id: VLLM_IMAGE, repoDigests: [] }, 'other:1'), null);
    assert.equal(registryDigest(null, 'other:1'), null);
  });
  it('shared memory: files of other owners block reclaiming them, unknown use reclaims nothing', () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-shm-'));
    writeFileSync(join(dir, 'svc.r.a'), Buffer.alloc(100));
    writeFileSync(join(dir, 'svc.r.b c'), Buffer.alloc(100)); // a name outside the allowed characters
    const uid = process.getuid!();
    assert.deepEqual(scanSharedMemory(dir, 'r', 'none', uid), {
      available: true,
      files: ['svc.r.a'],
      blocked_reasons: [],
      reclaimable_bytes: 100,
    });
    assert.deepEqual(scanSharedMemory(dir, 'r', 'none', uid + 1), {
      available: true,
      files: ['svc.r.a'],
      blocked_reasons: ['foreign-owner'],
      reclaimable_bytes: 0,
    });
    assert.deepEqual(scanSharedMemory(dir, 'r', 'unknown', uid), {
      available: true,
      files: ['svc.r.a'],
      blocked_reasons: ['container-state-unknown'],
      reclaimable_bytes: 0,
    });
    assert.deepEqual(scanSharedMemory(dir, 'nothing', 'running', uid), {
      available: true,
      files: [],
      blocked_reasons: [],
      reclaimable_bytes: 0,
    });
  });
});
