import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { recipeDigest } from '../../src/recipes/recipe-config.js';
import { runCli } from '../cli/run-cli.js';
import { eventually } from '../support/processes.js';
import { MISTRAL } from './recipe-dirs.js';
import { ENV_CANARY, source, startRecipeNode, type RecipeNode } from './recipe-node.js';

describe('recipe.apply and recipe.stop through a controller on the recorded runtime', () => {
  let node: RecipeNode;
  const seen: string[] = [];
  before(async () => {
    node = await startRecipeNode();
  });
  after(async () => {
    await node.close();
  });

  it('the recipe starts out configured', async () => {
    assert.equal(await node.recipeRecord('mistral-7b', 'configured/configured'), 'configured/configured');
  });

  it('needs node-admin:lifecycle: a workloads:read, media or bootstrap token cannot plan or apply (403)', async () => {
    const { tokens } = node.policy;
    for (const t of [tokens.reader, tokens.media, tokens.bootstrap]) {
      for (const command of ['recipe.apply', 'recipe.stop'])
        assert.equal(
          (await node.call('/v1/lifecycle/plan', t, { command, params: { name: 'mistral-7b' } })).status,
          403,
        );
      assert.equal((await node.call('/v1/lifecycle/apply', t, { confirmation_token: 'a'.repeat(48) })).status, 403);
    }
    assert.equal(node.fake.createBodies.length, 0);
  });

  it('bad input is 400 and an unknown recipe 404, before any operation record exists', async () => {
    for (const params of [
      { name: '../etc' },
      { name: 'Mistral' },
      { name: 'mistral-7b', force: true },
      {},
      { name: 'a'.repeat(64) },
    ]) {
      const r = await node.planApply('recipe.apply', params);
      assert.equal(r.plan.status, 400, JSON.stringify(params));
      assert.ok(!r.planBody.includes('etc') && !r.planBody.includes('Mistral'), 'the operand is never echoed');
    }
    const unknown = await node.planApply('recipe.stop', { name: 'no-such-recipe' });
    assert.equal(unknown.plan.status, 404);
    assert.deepEqual(JSON.parse(unknown.planBody), {
      type: 'urn:svc-serving:problem:not-found',
      title: 'Not found',
      status: 404,
      code: 'not_found',
    });
    const ops = source(await node.nodeWorkloads(), 'controller');
    assert.equal(ops.status, 'complete');
    assert.deepEqual(ops.records, [], 'no operation record for a refused plan');
  });

  it('apply creates and starts the labelled container; the record goes configured -> running/observed-running', async () => {
    const r = await node.planApply('recipe.apply', { name: 'mistral-7b' });
    assert.equal(r.plan.status, 201);
    seen.push(r.planBody, r.applyBody ?? '');
    const plan = JSON.parse(r.planBody) as { plan: string[]; command: string };
    assert.equal(plan.command, 'recipe.apply');
    assert.ok(plan.plan.some((s) => s.includes('HF_TOKEN')) && plan.plan.some((s) => s.includes('nothing is pulled')));
    assert.equal(r.apply?.status, 200);
    const done = await node.settle(r.operationId!);
    seen.push(JSON.stringify(done));
    assert.deepEqual(
      [done.state, done.outcome, done.summary],
      ['succeeded', 'success', { action: 'created', containers: 1 }],
    );
    assert.equal(await node.recipeRecord('mistral-7b', 'running/observed-running'), 'running/observed-running');

    const body = node.fake.createBodies[0]!;
    assert.deepEqual(body['Labels'], { 'svc.recipe': 'mistral-7b', 'svc.recipe-digest': recipeDigest(MISTRAL) });
    assert.deepEqual((body['HostConfig'] as { DeviceRequests: unknown }).DeviceRequests, [
      { Driver: '', Count: 0, DeviceIDs: ['1'], Capabilities: [['gpu']] },
    ]);
    assert.deepEqual(
      body['Env'],
      [`HF_TOKEN=${ENV_CANARY}`],
      'the env value comes from the controller environment at apply time',
    );
    assert.ok(!node.fake.requests.some((x) => x.includes('/images/create')), 'nothing pulled');

    const ops = source(await node.nodeWorkloads(), 'controller').records;
    assert.ok(ops.some((o) => o.state === 'terminal' && o.outcome === 'success' && o.progress?.completed === 4));
  });

  it('`recipe status --json` then shows the baseline equal, observed-running and never higher', async () => {
    const shm = mkdtempSync(join(tmpdir(), 'svc-shm-'));
    const r = await runCli([
      'recipe',
      'status',
      'mistral-7b',
      '--json',
      '--recipes-dir',
      node.recipes,
      '--container-socket',
      node.fake.socketPath,
      '--shm-dir',
      shm,
    ]);
    assert.equal(r.code, 0, r.stderr);
    const s = JSON.parse(r.stdout) as Record<string, unknown>;
    assert.equal(s['baseline_equal'], true);
    assert.equal(s['state'], 'running');
    assert.equal(s['observation_quality'], 'observed-running');
    assert.deepEqual((s['serve_mode'] as { unresolved: string[] }).unresolved, []);
    assert.equal((s['serve_mode'] as { gpu_owner: string }).gpu_owner, 'mistral-7b');
    seen.push(r.stdout, r.stderr);
  });

  it('apply again does nothing; stop stops it and the record is configured again; stop again does nothing', async () => {
    const again = await node.planApply('recipe.apply', { name: 'mistral-7b' });
    assert.deepEqual((await node.settle(again.operationId!)).summary, { action: 'already-running', containers: 1 });
    assert.equal(node.fake.createBodies.length, 1);
    const stop = await node.planApply('recipe.stop', { name: 'mistral-7b' });
    seen.push(stop.planBody);
    const stopped = await node.settle(stop.operationId!);
    assert.deepEqual([stopped.state, stopped.summary], ['succeeded', { action: 'stopped', containers: 1 }]);
    assert.equal(await node.recipeRecord('mistral-7b', 'configured/configured'), 'configured/configured');
    const twice = await node.planApply('recipe.stop', { name: 'mistral-7b' });
    assert.deepEqual((await node.settle(twice.operationId!)).summary, { action: 'none-running', containers: 0 });
  });

  it('a container of another recipe version is refused: failed/rejected with a fixed reason, nothing changed', async () => {
    const writes = node.fake.requests.filter((x) => x.includes(' ')).length;
    const r = await node.planApply('recipe.apply', { name: 'whisper-small' });
    const s = await node.settle(r.operationId!);
    assert.deepEqual([s.state, s.outcome, s.summary], ['failed', 'rejected', { reason: 'container-digest-mismatch' }]);
    assert.equal(node.fake.requests.filter((x) => x.includes(' ')).length, writes);
  });

  it('the env value never leaves for a record, plan, status, log, store or CLI output', async () => {
    const everything = [
      ...seen,
      JSON.stringify(await node.nodeWorkloads()),
      node.logs.join(''),
      node.stateBytes(),
    ].join('\n');
    assert.ok(node.logs.length > 0, 'logs were captured');
    assert.ok(!everything.includes(ENV_CANARY));
    assert.ok(!everything.includes(node.recipes), 'no recipes path either');
  });

  it('a runtime that went away: apply is accepted, the operation fails with a fixed reason, the source is unavailable', async () => {
    await node.fake.close();
    const r = await node.planApply('recipe.apply', { name: 'mistral-7b' });
    assert.equal(r.plan.status, 201, 'the plan reads the recipe file only');
    assert.equal(r.apply?.status, 200);
    const s = await node.settle(r.operationId!);
    assert.deepEqual([s.state, s.outcome, s.summary], ['failed', 'error', { reason: 'runtime-unreachable' }]);
    const res = await eventually(async () => {
      const x = await node.nodeWorkloads();
      return source(x, 'recipe').status === 'unavailable' && x;
    }, 8000);
    const recipe = source(res, 'recipe');
    assert.equal(recipe.reason, 'inspection-error');
    const op = source(res, 'controller').records.find((x) => x.state === 'terminal' && x.outcome === 'error');
    assert.ok(op, 'the failed operation is a terminal record, never a success');
  });
});

describe('a controller without recipes_dir', () => {
  it('answers recipe commands 503, with a fixed problem', async () => {
    const node = await startRecipeNode({ recipesDir: null });
    try {
      const r = await node.planApply('recipe.apply', { name: 'qwen-7b' });
      assert.equal(r.plan.status, 503);
      assert.deepEqual(JSON.parse(r.planBody), {
        type: 'urn:svc-serving:problem:unavailable',
        title: 'Service unavailable',
        status: 503,
        code: 'unavailable',
      });
    } finally {
      await node.close();
    }
  });
});
