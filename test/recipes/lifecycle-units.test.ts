import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidInputError } from '../../src/errors.js';
import { describePlan, parseCommand } from '../../src/jobs/commands.js';
import { DockerEngineClient, RuntimeUnreachableError } from '../../src/recipes/docker-api.js';
import { parseContainerInspect, type ManagedContainer } from '../../src/recipes/inspector.js';
import { recipeDigest, type LoadedRecipe, type Recipe } from '../../src/recipes/recipe-config.js';
import { createBody, decideApply, decideStop, engineArgs } from '../../src/recipes/recipe-lifecycle.js';
import { startFakeDocker } from './fake-docker.js';

const CANARY = 'canary-env-value-7781';

function loaded(over: Partial<Recipe> = {}): LoadedRecipe {
  const recipe: Recipe = {
    name: 'mistral-7b',
    image: 'vllm/vllm-openai:v0.6.3',
    model: '/models/secret-model-dir',
    served_model_name: 'mistral-7b',
    context_size: 16384,
    port: 8004,
    gpus: [1],
    env: ['HF_TOKEN'],
    ...over,
  };
  return { recipe, digest: recipeDigest(recipe), configAt: 1 };
}

const L = loaded();
let n = 0;
function box(over: Partial<ManagedContainer>): ManagedContainer {
  n++;
  return {
    id: n.toString(16).padStart(64, 'a'),
    recipe: 'mistral-7b',
    recipeDigest: L.digest,
    status: 'running',
    image: null,
    createdAt: 1,
    changedAt: 1,
    envNames: [],
    gpus: [],
    ...over,
  };
}

describe('recipe apply and stop: pure decisions', () => {
  const cases: Array<[string, ManagedContainer[], string]> = [
    ['no container: create', [], 'create'],
    ['its container runs with the same digest: nothing', [box({})], 'nothing'],
    ['its container exited with the same digest: start', [box({ status: 'exited' })], 'start'],
    ['its container was created, never started: start', [box({ status: 'created' })], 'start'],
    ['its container is paused: refuse', [box({ status: 'paused' })], 'refuse:container-state-unsupported'],
    [
      'its container is in a state the mapping does not know: refuse',
      [box({ status: 'weird' })],
      'refuse:container-state-unsupported',
    ],
    [
      'its container carries another digest: refuse',
      [box({ recipeDigest: 'sha256:' + '0'.repeat(64) })],
      'refuse:container-digest-mismatch',
    ],
    [
      'its container carries no digest: refuse',
      [box({ status: 'exited', recipeDigest: null })],
      'refuse:container-digest-mismatch',
    ],
    ['two containers claim it: refuse', [box({}), box({ status: 'exited' })], 'refuse:container-ambiguous'],
    ['another recipe runs on its GPU: refuse', [box({ recipe: 'other', gpus: [1] })], 'refuse:gpu-busy'],
    ['another recipe runs on all GPUs: refuse', [box({ recipe: 'other', gpus: 'all' })], 'refuse:gpu-busy'],
    [
      'another recipe holds its GPU but is stopped: create',
      [box({ recipe: 'other', status: 'exited', gpus: [1] })],
      'create',
    ],
    ['another recipe runs on another GPU: create', [box({ recipe: 'other', gpus: [0] })], 'create'],
  ];
  for (const [title, containers, want] of cases) {
    it(title, () => {
      const d = decideApply(L, containers);
      assert.equal(d.do === 'refuse' ? `refuse:${d.reason}` : d.do, want);
      if (d.do === 'start') assert.equal(d.id, containers[0]!.id);
    });
  }

  it('a CPU recipe never waits for a GPU', () => {
    assert.equal(decideApply(loaded({ gpus: [] }), [box({ recipe: 'other', gpus: 'all' })]).do, 'create');
  });

  it('stop acts on running, paused and restarting containers of the recipe only', () => {
    const mine = [box({}), box({ status: 'paused' }), box({ status: 'restarting' })];
    const idle = [box({ status: 'exited' }), box({ status: 'created' }), box({ recipe: 'other' })];
    assert.deepEqual(
      decideStop('mistral-7b', [...idle, ...mine]),
      mine.map((c) => c.id),
    );
    assert.deepEqual(decideStop('mistral-7b', idle), []);
  });
});

describe('recipe apply: the container create body', () => {
  const body = createBody(L, { HF_TOKEN: CANARY });

  it('labels the container with the recipe name and digest, which the inspector reads back', () => {
    const inspect = {
      Id: 'a'.repeat(64),
      Config: { Labels: body['Labels'], Env: body['Env'] },
      HostConfig: body['HostConfig'],
      State: { Status: 'running' },
    };
    const c = parseContainerInspect(inspect)!;
    assert.equal(c.recipe, 'mistral-7b');
    assert.equal(c.recipeDigest, L.digest);
    assert.deepEqual(c.gpus, [1], 'DeviceRequests in the shape the inspector parses');
    assert.deepEqual(c.envNames, ['HF_TOKEN']);
  });

  it('runs the vLLM OpenAI server arguments and publishes the port on loopback', () => {
    assert.deepEqual(body['Cmd'], [
      '--model',
      '/models/secret-model-dir',
      '--served-model-name',
      'mistral-7b',
      '--max-model-len',
      '16384',
      '--host',
      '0.0.0.0',
      '--port',
      '8004',
    ]);
    assert.deepEqual(engineArgs(L.recipe), body['Cmd']);
    assert.deepEqual(body['ExposedPorts'], { '8004/tcp': {} });
    const hc = body['HostConfig'] as Record<string, unknown>;
    assert.deepEqual(hc['PortBindings'], { '8004/tcp': [{ HostIp: '127.0.0.1', HostPort: '8004' }] });
    assert.deepEqual(hc['DeviceRequests'], [{ Driver: '', Count: 0, DeviceIDs: ['1'], Capabilities: [['gpu']] }]);
    assert.deepEqual(hc['RestartPolicy'], { Name: 'no' });
    assert.equal(body['Image'], 'vllm/vllm-openai:v0.6.3');
  });

  it('a CPU recipe asks for no device', () => {
    assert.equal(
      (createBody(loaded({ gpus: [] }), { HF_TOKEN: 'x' })['HostConfig'] as Record<string, unknown>)['DeviceRequests'],
      undefined,
    );
  });
});

describe('recipe.apply and recipe.stop commands', () => {
  it('take exactly {name} with a recipe name', () => {
    assert.deepEqual(parseCommand({ command: 'recipe.apply', params: { name: 'qwen-7b' } }), {
      name: 'recipe.apply',
      params: { name: 'qwen-7b' },
    });
    assert.deepEqual(parseCommand({ command: 'recipe.stop', params: { name: 'a' } }), {
      name: 'recipe.stop',
      params: { name: 'a' },
    });
    const bad: unknown[] = [
      { name: '../etc' },
      { name: 'Qwen' },
      { name: '' },
      { name: 'a'.repeat(64) },
      { name: 'a.b' },
      { name: 'a', force: true },
      {},
      { name: 7 },
      null,
    ];
    for (const params of bad) {
      for (const command of ['recipe.apply', 'recipe.stop'])
        assert.throws(() => parseCommand({ command, params }), InvalidInputError, JSON.stringify(params));
    }
  });

  it('the apply plan names revision, image, port, GPUs and env names, never the model path or env values', () => {
    const text = describePlan({ name: 'recipe.apply', params: { name: 'mistral-7b' } }, L).join('\n');
    for (const want of [
      'mistral-7b',
      L.digest.slice(7, 19),
      'vllm/vllm-openai:v0.6.3',
      'nothing is pulled',
      'port 8004',
      'GPUs 1',
      'HF_TOKEN',
      'svc-mistral-7b',
    ])
      assert.ok(text.includes(want), want);
    for (const never of ['/models', 'secret-model-dir', CANARY]) assert.ok(!text.includes(never), never);
    const stop = describePlan({ name: 'recipe.stop', params: { name: 'mistral-7b' } }).join('\n');
    assert.match(stop, /stop every running container of recipe mistral-7b/);
    assert.match(stop, /not removed/);
  });
});

describe('DockerEngineClient.post', () => {
  it('returns every status; a 2xx body is parsed, an error body is never returned', async () => {
    const fake = await startFakeDocker({
      raw: (path, method) => {
        if (method !== 'POST') return undefined;
        if (path === '/x/500') return { status: 500, body: '{"message":"runtime text canary"}' };
        if (path === '/x/bad') return { status: 201, body: 'not json' };
        if (path === '/x/hang') return 'hang';
        return undefined;
      },
    });
    const api = new DockerEngineClient(fake.socketPath, { timeoutMs: 300 });
    try {
      assert.deepEqual(await api.post('/x/500'), { status: 500, body: null });
      await assert.rejects(
        api.post('/x/bad'),
        (e: unknown) => e instanceof RuntimeUnreachableError && e.failure === 'malformed',
      );
      await assert.rejects(
        api.post('/x/hang', {}, { timeoutMs: 200 }),
        (e: unknown) => e instanceof RuntimeUnreachableError && e.failure === 'timeout',
      );
      const ctl = new AbortController();
      const p = api.post('/x/hang', undefined, { timeoutMs: 5000, signal: ctl.signal });
      ctl.abort();
      await assert.rejects(
        p,
        (e: unknown) => !(e instanceof RuntimeUnreachableError),
        'an abort is not a runtime failure',
      );
      assert.ok(fake.requests.includes('POST /x/500'));
    } finally {
      await api.close();
      await fake.close();
    }
  });

  it('a missing socket is a connect failure', async () => {
    const api = new DockerEngineClient('/nonexistent/svc-docker.sock');
    await assert.rejects(
      api.post('/containers/create', {}),
      (e: unknown) => e instanceof RuntimeUnreachableError && e.failure === 'connect',
    );
    await api.close();
  });
});
