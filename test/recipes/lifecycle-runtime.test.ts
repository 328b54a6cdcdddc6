import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { NotFoundError, UnavailableError } from '../../src/errors.js';
import { JobService } from '../../src/jobs/job-service.js';
import { DockerEngineClient } from '../../src/recipes/docker-api.js';
import { ContainerInspector } from '../../src/recipes/inspector.js';
import { recipeDigest, type Recipe } from '../../src/recipes/recipe-config.js';
import { RecipeLifecycle, type LifecycleHooks } from '../../src/recipes/recipe-lifecycle.js';
import { eventually } from '../support/processes.js';
import { startFakeDocker, type FakeDocker, type FakeDockerOptions } from './fake-docker.js';
import { MISTRAL, recipesDir } from './recipe-dirs.js';

const CANARY = 'canary-env-value-4410';

const hooks = (): LifecycleHooks & { phases: string[] } => {
  const phases: string[] = [];
  return { phases, phase: (p) => phases.push(p), signal: new AbortController().signal };
};

describe('RecipeLifecycle against the recorded runtime', () => {
  let fake: FakeDocker | undefined;
  let life: RecipeLifecycle | undefined;
  const open = async (
    opts: FakeDockerOptions = {},
    env: NodeJS.ProcessEnv = { HF_TOKEN: CANARY },
    ...extra: Recipe[]
  ) => {
    fake = await startFakeDocker(opts);
    life = new RecipeLifecycle(
      recipesDir(MISTRAL, ...extra),
      new DockerEngineClient(fake.socketPath, { timeoutMs: 1000 }),
      env,
    );
    return { fake, life };
  };
  afterEach(async () => {
    await life?.close();
    await fake?.close();
  });
  const writes = (f: FakeDocker): string[] => f.requests.filter((r) => r.includes(' '));
  const digest = recipeDigest(MISTRAL);

  it('resolve: a known recipe, 404 for an unknown one, 503 for an unreadable directory', async () => {
    const { life: l } = await open();
    assert.equal(l.resolve('mistral-7b').digest, digest);
    assert.throws(() => l.resolve('nope'), NotFoundError);
    const gone = new RecipeLifecycle('/nonexistent/recipes', new DockerEngineClient('/nonexistent.sock'), {});
    assert.throws(() => gone.resolve('mistral-7b'), UnavailableError);
    await gone.close();
  });

  it('apply creates a labelled container, starts it and sees it run; again it does nothing; stop stops it; apply then starts it', async () => {
    const { fake: f, life: l } = await open();
    const h = hooks();
    assert.deepEqual(await l.apply('mistral-7b', digest, h), { ok: true, action: 'created', containers: 1 });
    assert.deepEqual(h.phases, ['submitting', 'running']);
    assert.equal(f.createBodies.length, 1);
    const body = f.createBodies[0]!;
    assert.deepEqual(body['Labels'], { 'svc.recipe': 'mistral-7b', 'svc.recipe-digest': digest });
    assert.deepEqual(body['Env'], [`HF_TOKEN=${CANARY}`], 'the value reaches the runtime, and only the runtime');
    assert.ok(f.requests.includes('POST /containers/create'));
    assert.ok(!f.requests.some((r) => r.includes('/images/create')), 'never pulls');
    const reader = new DockerEngineClient(f.socketPath);
    const seen = (await new ContainerInspector(reader).managedContainers()).containers.find(
      (c) => c.recipe === 'mistral-7b',
    )!;
    await reader.close();
    assert.equal(seen.status, 'running');
    assert.deepEqual(seen.gpus, [1]);

    const before = writes(f).length;
    assert.deepEqual(await l.apply('mistral-7b', digest, hooks()), {
      ok: true,
      action: 'already-running',
      containers: 1,
    });
    assert.equal(writes(f).length, before, 'nothing written when it already runs');
    assert.deepEqual(await l.stop('mistral-7b', hooks()), { ok: true, action: 'stopped', containers: 1 });
    assert.ok(f.requests.some((r) => /^POST \/containers\/[0-9a-f]{64}\/stop$/.test(r)));
    assert.deepEqual(await l.stop('mistral-7b', hooks()), { ok: true, action: 'none-running', containers: 0 });
    assert.deepEqual(await l.apply('mistral-7b', digest, hooks()), { ok: true, action: 'started', containers: 1 });
    assert.equal(f.createBodies.length, 1, 'the stopped container is reused, not replaced');
  });

  it('refuses without writing: another digest, a busy GPU, a changed recipe, a missing image, an unset env variable', async () => {
    const { fake: f, life: l } = await open(
      {},
      {},
      { ...MISTRAL, name: 'no-image', image: 'example/not-here:1', gpus: [] },
    );
    const whisper = l.resolve('whisper-small');
    assert.deepEqual(await l.apply('whisper-small', whisper.digest, hooks()), {
      ok: false,
      reason: 'container-digest-mismatch',
      outcome: 'rejected',
    });
    const llama = l.resolve('llama-8b');
    assert.deepEqual(await l.apply('llama-8b', llama.digest, hooks()), {
      ok: false,
      reason: 'gpu-busy',
      outcome: 'rejected',
    });
    assert.deepEqual(await l.apply('mistral-7b', 'sha256:' + '0'.repeat(64), hooks()), {
      ok: false,
      reason: 'recipe-changed',
      outcome: 'rejected',
    });
    const noImage = l.resolve('no-image');
    assert.deepEqual(await l.apply('no-image', noImage.digest, hooks()), {
      ok: false,
      reason: 'image-missing',
      outcome: 'rejected',
    });
    assert.deepEqual(await l.apply('mistral-7b', digest, hooks()), {
      ok: false,
      reason: 'env-unusable',
      outcome: 'rejected',
    });
    const qwen = l.resolve('qwen-7b');
    assert.deepEqual(await l.apply('qwen-7b', qwen.digest, hooks()), {
      ok: true,
      action: 'already-running',
      containers: 1,
    });
    assert.deepEqual(writes(f), []);
  });

  it('a container name held by an unmanaged container: refused by the runtime, nothing replaced', async () => {
    const { fake: f, life: l } = await open();
    const api = new DockerEngineClient(f.socketPath);
    assert.equal((await api.post('/containers/create?name=svc-mistral-7b', { Image: 'postgres:16' })).status, 201);
    await api.close();
    assert.deepEqual(await l.apply('mistral-7b', digest, hooks()), {
      ok: false,
      reason: 'container-name-taken',
      outcome: 'rejected',
    });
  });

  it('an engine that exits at once fails the apply; a runtime refusal fails it without its text', async () => {
    const { life: l } = await open({ crashOnStart: true });
    assert.deepEqual(await l.apply('mistral-7b', digest, hooks()), {
      ok: false,
      reason: 'container-not-running',
      outcome: 'error',
    });
    await life!.close();
    await fake!.close();
    const refuse = (path: string, method: string) =>
      method === 'POST' && path.endsWith('/start')
        ? { status: 500, body: '{"message":"runtime canary text"}' }
        : undefined;
    const { life: l2 } = await open({ raw: refuse });
    const r = await l2.apply('mistral-7b', digest, hooks());
    assert.deepEqual(r, { ok: false, reason: 'runtime-refused', outcome: 'error' });
    assert.ok(!JSON.stringify(r).includes('canary'));
  });

  it('an unreachable runtime fails with a fixed reason; a connection lost after a write leaves the outcome unknown', async () => {
    const { fake: f, life: l } = await open({
      raw: (path, method) => (method === 'POST' && path === '/containers/create' ? 'hang' : undefined),
    });
    const pending = l.apply('mistral-7b', digest, hooks());
    await eventually(async () => f.requests.includes('POST /containers/create'), 5000, 20);
    await f.close();
    assert.deepEqual(await pending, { ok: false, reason: 'runtime-unreachable', outcome: 'unknown' });
    assert.deepEqual(await l.stop('mistral-7b', hooks()), {
      ok: false,
      reason: 'runtime-unreachable',
      outcome: 'error',
    });
  });
});

describe('JobService runs recipe operations in the background with an honest operation record', () => {
  it('awaiting approval -> preparing -> submitting -> running -> succeeded; a refusal ends failed/rejected with its reason', async () => {
    const fake = await startFakeDocker();
    const recipes = new RecipeLifecycle(recipesDir(MISTRAL), new DockerEngineClient(fake.socketPath), {
      HF_TOKEN: CANARY,
    });
    const jobs = new JobService(mkdtempSync(join(tmpdir(), 'svc-state-')), undefined, pino({ level: 'silent' }), {
      recipes,
    });
    try {
      const plan = jobs.plan({ name: 'recipe.apply', params: { name: 'mistral-7b' } });
      const states: string[] = [jobs.status(plan.operation_id).state];
      const sub = jobs.changes.subscribe((o) => {
        const s = o === 'controller' ? jobs.status(plan.operation_id).state : undefined;
        if (s && s !== states.at(-1)) states.push(s);
      });
      assert.deepEqual(jobs.apply(plan.confirmation_token), { operation_id: plan.operation_id });
      const done = await eventually(
        async () => (jobs.status(plan.operation_id).state === 'succeeded' ? jobs.status(plan.operation_id) : undefined),
        5000,
        20,
      );
      sub.unsubscribe();
      assert.deepEqual(states, ['awaiting_approval', 'preparing', 'submitting', 'running', 'succeeded']);
      assert.deepEqual(done, {
        id: plan.operation_id,
        state: 'succeeded',
        outcome: 'success',
        progress: { completed: 4, total: 4 },
        summary: { action: 'created', containers: 1 },
      });

      const whisper = jobs.plan({ name: 'recipe.apply', params: { name: 'whisper-small' } });
      jobs.apply(whisper.confirmation_token);
      const refused = await eventually(
        async () =>
          jobs.status(whisper.operation_id).state === 'failed' ? jobs.status(whisper.operation_id) : undefined,
        5000,
        20,
      );
      assert.equal(refused.outcome, 'rejected');
      assert.deepEqual(refused.summary, { reason: 'container-digest-mismatch' });
      assert.throws(() => jobs.plan({ name: 'recipe.stop', params: { name: 'nope' } }), NotFoundError);
    } finally {
      await jobs.close();
      await fake.close();
    }
  });

  it('two applies of one recipe at the same moment: one creates it, the next finds it running (run one at a time, in order)', async () => {
    const fake = await startFakeDocker();
    const recipes = new RecipeLifecycle(recipesDir(MISTRAL), new DockerEngineClient(fake.socketPath), {
      HF_TOKEN: CANARY,
    });
    const jobs = new JobService(mkdtempSync(join(tmpdir(), 'svc-state-')), undefined, pino({ level: 'silent' }), {
      recipes,
    });
    try {
      const plans = [
        jobs.plan({ name: 'recipe.apply', params: { name: 'mistral-7b' } }),
        jobs.plan({ name: 'recipe.apply', params: { name: 'mistral-7b' } }),
      ];
      for (const p of plans) jobs.apply(p.confirmation_token);
      const ends = await eventually(
        async () => {
          const st = plans.map((p) => jobs.status(p.operation_id));
          return st.every((x) => x.state === 'succeeded' || x.state === 'failed') ? st : undefined;
        },
        5000,
        20,
      );
      assert.deepEqual(
        ends.map((x) => [x.state, x.summary]),
        [
          ['succeeded', { action: 'created', containers: 1 }],
          ['succeeded', { action: 'already-running', containers: 1 }],
        ],
      );
      assert.equal(fake.createBodies.length, 1);
    } finally {
      await jobs.close();
      await fake.close();
    }
  });

  it('without a recipes directory (or router settings) the commands are unavailable (503) and no record is made', async () => {
    const jobs = new JobService(mkdtempSync(join(tmpdir(), 'svc-state-')), undefined, pino({ level: 'silent' }));
    try {
      assert.throws(() => jobs.plan({ name: 'recipe.apply', params: { name: 'qwen-7b' } }), UnavailableError);
      assert.equal(jobs.stores.controller.inStates(['awaiting_approval']).length, 0);
      // Likewise a benchmark or media job on a node without router settings: refused at plan time.
      assert.throws(
        () =>
          jobs.plan({
            name: 'benchmark.start',
            params: { model: 'm', requests: 1, concurrency: 1, prompt_tokens: 8, max_tokens: 8 },
          } as never),
        UnavailableError,
      );
      assert.throws(
        () => jobs.plan({ name: 'media.submit', params: { model: 'm', files: ['a.wav'] } } as never),
        UnavailableError,
      );
      assert.equal(jobs.stores.controller.inStates(['awaiting_approval']).length, 0);
    } finally {
      await jobs.close();
    }
  });

  it('a shutdown during a runtime call marks the operation interrupted (outcome unknown)', async () => {
    const fake = await startFakeDocker({
      raw: (path, method) => (method === 'POST' && path.endsWith('/start') ? 'hang' : undefined),
    });
    const state = mkdtempSync(join(tmpdir(), 'svc-state-'));
    const recipes = new RecipeLifecycle(recipesDir(MISTRAL), new DockerEngineClient(fake.socketPath), {
      HF_TOKEN: CANARY,
    });
    const jobs = new JobService(state, undefined, pino({ level: 'silent' }), { recipes });
    const plan = jobs.plan({ name: 'recipe.apply', params: { name: 'mistral-7b' } });
    jobs.apply(plan.confirmation_token);
    await eventually(async () => fake.requests.some((r) => r.endsWith('/start')), 5000, 20);
    await jobs.close();
    await fake.close();
    const reopened = new JobService(state, undefined, pino({ level: 'silent' }));
    try {
      const s = reopened.status(plan.operation_id);
      assert.equal(s.state, 'interrupted');
      assert.equal(s.outcome, 'unknown');
    } finally {
      await reopened.close();
    }
  });
});
