import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import type { NodeConfig } from '../../src/config/node-config.js';
import { checkNodeResult, type NodeResult, type SourceResult } from '../../src/schema/envelopes.js';
import { recordId } from '../../src/schema/record-id.js';
import { isValidRecord } from '../../src/schema/record.js';
import { startController, type ControllerHandle } from '../../src/controller/controller.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { writeTestPolicy, type TestPolicy } from '../support/policy.js';
import { eventually } from '../support/processes.js';
import { RECIPE_CONFIG, startFakeDocker, type FakeDocker } from './fake-docker.js';

const H = 'node-a';

function config(p: TestPolicy, over: Partial<NodeConfig>): NodeConfig {
  return {
    hostId: H,
    listen: { host: '127.0.0.1', port: 0 },
    nats: undefined,
    policyPath: p.path,
    staleAfterMs: 30_000,
    stateDir: mkdtempSync(join(tmpdir(), 'svc-state-')),
    ...over,
  };
}

async function nodeWorkloads(ctl: ControllerHandle, token: string): Promise<NodeResult> {
  const res = await fetch(`${ctl.url}/tools/call`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'node_workloads', arguments: {} }),
  });
  assert.equal(res.status, 200);
  const body = (await res.json()) as NodeResult;
  assert.ok(checkNodeResult.Check(body));
  return body;
}

const source = (r: NodeResult, owner: string): SourceResult => r.sources.find((s) => s.owner === owner)!;
const state = (s: SourceResult, owner: 'recipe' | 'manifest', native: string): string | undefined => {
  const x = s.records.find((r) => r.id === recordId(H, owner, 'recipe-serve', native));
  return x && `${x.state}/${x.observation_quality}`;
};

describe('controller with a recorded Docker Engine API on a unix socket: recipe and manifest sources', () => {
  const p = writeTestPolicy();
  const bus = new InProcessBus();
  let fake: FakeDocker;
  let ctl: ControllerHandle;
  before(async () => {
    fake = await startFakeDocker();
    ctl = await startController(
      config(p, {
        recipesDir: join(RECIPE_CONFIG, 'recipes'),
        manifestsDir: join(RECIPE_CONFIG, 'manifests'),
        containerSocket: fake.socketPath,
      }),
      { logger: pino({ level: 'silent' }), env: p.env, bus },
    );
  });
  after(async () => {
    await ctl.close();
    await fake.close();
    await bus.close();
  });

  it('shows configured for a recipe without container and observed-running for one whose container runs', async () => {
    const r = await eventually(async () => {
      const res = await nodeWorkloads(ctl, p.tokens.reader);
      return source(res, 'recipe').status === 'complete' && source(res, 'manifest').status === 'complete' && res;
    });
    const recipe = source(r, 'recipe');
    assert.equal(recipe.records.length, 3);
    assert.equal(state(recipe, 'recipe', 'llama-8b'), 'configured/configured');
    assert.equal(state(recipe, 'recipe', 'qwen-7b'), 'running/observed-running');
    assert.equal(state(recipe, 'recipe', 'whisper-small'), 'configured/configured');
    const manifest = source(r, 'manifest');
    assert.equal(state(manifest, 'manifest', 'node-a/qwen-7b'), 'running/observed-running');
    assert.equal(state(manifest, 'manifest', 'node-a/llama-8b'), 'configured/configured');
    assert.equal(state(manifest, 'manifest', 'node-a/old-mistral'), 'absent/absent');
    for (const x of [...recipe.records, ...manifest.records]) {
      assert.ok(isValidRecord(x));
      assert.equal(x.source_authority, 'managed-status');
      assert.notEqual(x.observation_quality, 'healthy-identity');
    }
    const text = JSON.stringify(r);
    for (const secret of ['qwen', RECIPE_CONFIG, fake.socketPath, 'canary', 'vllm'])
      assert.ok(!text.includes(secret), secret);
  });

  it('a running container that goes away (docker rm -f) shows as configured at once, not as the old running record', async () => {
    const id = recordId(H, 'recipe', 'recipe-serve', 'qwen-7b');
    const removed = [...fake.containers.entries()].filter(([, c]) =>
      JSON.stringify(c.list).includes('"svc.recipe":"qwen-7b"'),
    );
    assert.ok(removed.length > 0);
    // A container started just now (as `recipe apply` makes one): its time is the newest
    // evidence of the record, newer than the recipe file.
    const started = new Date(Date.now() - 1000).toISOString();
    for (const [cid, c] of removed) {
      fake.containers.set(cid, {
        list: c.list,
        inspect: { ...c.inspect, Created: started, State: { ...(c.inspect['State'] as object), StartedAt: started } },
      });
    }
    const was = await eventually(async () => {
      const r = source(await nodeWorkloads(ctl, p.tokens.reader), 'recipe').records.find((x) => x.id === id);
      return r !== undefined && r.updated_at === started.replace(/Z$/, 'Z') && r;
    }, 10_000);
    assert.equal(`${was.state}/${was.observation_quality}`, 'running/observed-running');
    for (const [cid] of removed) fake.containers.delete(cid);
    try {
      const now = await eventually(async () => {
        const r = await nodeWorkloads(ctl, p.tokens.reader);
        return state(source(r, 'recipe'), 'recipe', 'qwen-7b') === 'configured/configured' && r;
      }, 10_000);
      const rec = source(now, 'recipe').records.find((r) => r.id === id)!;
      assert.ok(Date.parse(rec.updated_at) >= Date.parse(was.updated_at), 'updated_at never goes backwards');
      assert.equal(source(now, 'recipe').status, 'complete');
    } finally {
      for (const [cid, c] of removed) fake.containers.set(cid, c);
    }
    await eventually(
      async () =>
        state(source(await nodeWorkloads(ctl, p.tokens.reader), 'recipe'), 'recipe', 'qwen-7b') ===
        'running/observed-running',
      10_000,
    );
  });

  it('reads create nothing in the runtime: only GETs reached it', () => {
    assert.ok(fake.requests.every((x) => x.startsWith('/')));
  });

  it('after the runtime stops, both sources are unavailable (inspection-error), not empty', async () => {
    await fake.close();
    const r = await eventually(async () => {
      const res = await nodeWorkloads(ctl, p.tokens.reader);
      return source(res, 'recipe').status === 'unavailable' && source(res, 'manifest').status === 'unavailable' && res;
    });
    for (const owner of ['recipe', 'manifest']) {
      const s = source(r, owner);
      assert.equal(s.reason, 'inspection-error');
      assert.deepEqual(s.records, []);
      assert.equal(s.truncation.omitted, null, 'an unavailable source never claims zero');
    }
    assert.notEqual(r.status, 'complete');
  });
});

describe('controller recipe sources: not configured vs configured but empty', () => {
  it('without recipes_dir the sources stay unavailable (no-observation); an empty directory is complete with zero records', async () => {
    const p = writeTestPolicy();
    const fake = await startFakeDocker({ transform: (route, b) => (route === 'list' ? [] : b) });
    const bus1 = new InProcessBus();
    const bus2 = new InProcessBus();
    const logger = pino({ level: 'silent' });
    const none = await startController(config(p, { containerSocket: fake.socketPath }), {
      logger,
      env: p.env,
      bus: bus1,
    });
    const empty = await startController(
      config(p, {
        recipesDir: mkdtempSync(join(tmpdir(), 'svc-recipes-')),
        manifestsDir: mkdtempSync(join(tmpdir(), 'svc-manifests-')),
        containerSocket: fake.socketPath,
      }),
      { logger, env: p.env, bus: bus2 },
    );
    try {
      const r = await eventually(async () => {
        const res = await nodeWorkloads(empty, p.tokens.reader);
        return source(res, 'recipe').status === 'complete' && source(res, 'manifest').status === 'complete' && res;
      });
      assert.deepEqual(source(r, 'recipe').records, []);
      assert.deepEqual(source(r, 'recipe').truncation, { returned: 0, omitted: 0 });
      const n = await nodeWorkloads(none, p.tokens.reader);
      for (const owner of ['recipe', 'manifest']) {
        assert.equal(source(n, owner).status, 'unavailable');
        assert.equal(source(n, owner).reason, 'no-observation');
      }
    } finally {
      await none.close();
      await empty.close();
      await fake.close();
      await bus1.close();
      await bus2.close();
    }
  });
});
