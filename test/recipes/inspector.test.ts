import { createServer } from 'node:net';
import { once } from 'node:events';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readManifestOwner, readRecipeOwner } from '../../src/actors/recipe-actor.js';
import type { OwnerReading } from '../../src/actors/window.js';
import { DockerEngineClient, RuntimeUnreachableError } from '../../src/recipes/docker-api.js';
import { ContainerInspector } from '../../src/recipes/inspector.js';
import { recordId } from '../../src/schema/record-id.js';
import { isValidRecord } from '../../src/schema/record.js';
import { RECIPE_CONFIG, startFakeDocker, type FakeDocker, type FakeDockerOptions } from './fake-docker.js';

const H = 'node-a';
const RECIPES = join(RECIPE_CONFIG, 'recipes');
const MANIFESTS = join(RECIPE_CONFIG, 'manifests');
const QWEN_ID = '4c772fca96746bae8899493c1e234af3b24280860eeff20555b9626d6ce5bd15';
const tmp = (): string => mkdtempSync(join(tmpdir(), 'svc-recipes-'));
const byId = (r: OwnerReading, owner: 'recipe' | 'manifest', native: string) =>
  r.records.find((x) => x.id === recordId(H, owner, 'recipe-serve', native));
const summary = (r: OwnerReading, owner: 'recipe' | 'manifest', native: string) => {
  const x = byId(r, owner, native);
  return x && `${x.state}/${x.observation_quality}${x.outcome ? `/${x.outcome}` : ''}`;
};

async function withFake<T>(
  opts: FakeDockerOptions,
  fn: (f: FakeDocker, i: ContainerInspector) => Promise<T>,
  timeoutMs?: number,
): Promise<T> {
  const f = await startFakeDocker(opts);
  const api = new DockerEngineClient(f.socketPath, timeoutMs ? { timeoutMs } : {});
  try {
    return await fn(f, new ContainerInspector(api));
  } finally {
    await api.close();
    await f.close();
  }
}

describe('inspector with a recorded Docker Engine API on a unix socket', () => {
  let fake: FakeDocker;
  let api: DockerEngineClient;
  let inspector: ContainerInspector;
  before(async () => {
    fake = await startFakeDocker();
    api = new DockerEngineClient(fake.socketPath);
    inspector = new ContainerInspector(api);
  });
  after(async () => {
    await api.close();
    await fake.close();
  });

  it('finds the managed containers by label, keeps env names only, reads GPU requests', async () => {
    assert.equal(await inspector.apiVersion(), '1.43');
    const { containers, over } = await inspector.managedContainers();
    assert.equal(over, false);
    assert.deepEqual(containers.map((c) => [c.recipe, c.status, c.gpus]).sort(), [
      ['qwen-7b', 'running', [0]],
      ['whisper-small', 'exited', [1]],
    ]);
    const qwen = containers.find((c) => c.recipe === 'qwen-7b')!;
    assert.ok(qwen.envNames.includes('HF_TOKEN'));
    assert.ok(!JSON.stringify(containers).includes('canary'), 'env values are dropped at parse time');
    assert.ok(!JSON.stringify(containers).includes('fixture-db-password'), 'unmanaged containers are not kept');
    assert.equal(qwen.createdAt, Date.parse('2025-11-25T10:00:00.123Z'));
    assert.equal(await inspector.image('vllm/vllm-openai:v0.6.3').then((i) => i?.repoDigests.length), 1);
    assert.equal(await inspector.image('no/such:image'), null);
    assert.ok(
      fake.requests.every((p) => !p.includes(' ')),
      'only GET requests',
    );
  });

  it('recipe owner: configured without container, observed-running when running, configured when exited', async () => {
    const r = await readRecipeOwner(H, RECIPES, inspector);
    assert.equal(r.status, 'complete');
    assert.equal(r.records.length, 3);
    assert.equal(summary(r, 'recipe', 'qwen-7b'), 'running/observed-running');
    assert.equal(summary(r, 'recipe', 'llama-8b'), 'configured/configured');
    assert.equal(summary(r, 'recipe', 'whisper-small'), 'configured/configured');
    for (const x of r.records) assert.ok(isValidRecord(x));
  });

  it('manifest owner: recipes entries configured or running, absent entries absent', async () => {
    const r = await readManifestOwner(H, MANIFESTS, inspector);
    assert.equal(r.status, 'complete');
    assert.equal(r.records.length, 3);
    assert.equal(summary(r, 'manifest', 'node-a/qwen-7b'), 'running/observed-running');
    assert.equal(summary(r, 'manifest', 'node-a/llama-8b'), 'configured/configured');
    assert.equal(summary(r, 'manifest', 'node-a/old-mistral'), 'absent/absent');
    for (const x of r.records) assert.ok(isValidRecord(x));
  });

  it('a managed container whose recipe is no longer configured: running stays running, stopped is absent', async () => {
    const dir = tmp();
    copyFileSync(join(RECIPES, 'llama-8b.toml'), join(dir, 'llama-8b.toml'));
    const r = await readRecipeOwner(H, dir, inspector);
    assert.equal(r.status, 'complete');
    assert.equal(summary(r, 'recipe', 'llama-8b'), 'configured/configured');
    assert.equal(summary(r, 'recipe', 'qwen-7b'), 'running/observed-running');
    assert.equal(summary(r, 'recipe', 'whisper-small'), 'absent/absent');
  });

  it('an empty configured directory is complete with zero records (the runtime answered)', async () => {
    // With the fixture runtime, its managed containers still show as orphans; with an empty
    // runtime there is nothing at all, and that is a complete answer.
    const orphans = await readRecipeOwner(H, tmp(), inspector);
    assert.equal(orphans.status, 'complete');
    assert.equal(orphans.records.length, 2);
    const empty = await withFake({ transform: (route, b) => (route === 'list' ? [] : b) }, (_f, i) =>
      readRecipeOwner(H, tmp(), i),
    );
    assert.deepEqual(empty, { status: 'complete', records: [] });
    const noManifests = await readManifestOwner(H, tmp(), inspector);
    assert.deepEqual(noManifests, { status: 'complete', records: [] });
  });

  it('an invalid recipe file makes the source partial (malformed, count unknown); valid records survive', async () => {
    const dir = tmp();
    copyFileSync(join(RECIPES, 'qwen-7b.toml'), join(dir, 'qwen-7b.toml'));
    writeFileSync(join(dir, 'broken.toml'), 'name = "broken"\n');
    const r = await readRecipeOwner(H, dir, inspector);
    assert.equal(r.status, 'partial');
    assert.equal(r.reason, 'malformed');
    assert.equal(r.countUnknown, true);
    assert.equal(summary(r, 'recipe', 'qwen-7b'), 'running/observed-running');
  });
});

describe('inspector: ambiguous and unknown runtime answers are unsupported', () => {
  it('an unknown container state is unsupported, its raw value never published (canary)', async () => {
    const canary = 'canary-runtime-state-4417';
    const t = (route: string, b: unknown) => {
      const o = b as { Id?: string; State?: Record<string, unknown> };
      return route === 'container' && o.Id === QWEN_ID ? { ...o, State: { ...o.State, Status: canary } } : b;
    };
    const r = await withFake({ transform: t }, (_f, i) => readRecipeOwner(H, RECIPES, i));
    assert.equal(summary(r, 'recipe', 'qwen-7b'), 'unsupported/configured/unknown');
    assert.ok(!JSON.stringify(r).includes(canary));
    assert.ok(!JSON.stringify(r).includes('4417'));
    for (const x of r.records) assert.ok(isValidRecord(x));
  });

  it('two containers claiming one recipe are unsupported (ambiguous), for both owners', async () => {
    const relabel = (b: unknown): unknown => {
      const o = b as { Labels?: Record<string, string>; Config?: { Labels?: Record<string, string> } };
      if (o.Labels?.['svc.recipe'] === 'whisper-small')
        return { ...o, Labels: { ...o.Labels, 'svc.recipe': 'qwen-7b' } };
      if (o.Config?.Labels?.['svc.recipe'] === 'whisper-small')
        return { ...o, Config: { ...o.Config, Labels: { ...o.Config.Labels, 'svc.recipe': 'qwen-7b' } } };
      return b;
    };
    const t = (route: string, b: unknown) =>
      route === 'list' ? (b as unknown[]).map(relabel) : route === 'container' ? relabel(b) : b;
    const [r, m] = await withFake({ transform: t }, async (_f, i) => [
      await readRecipeOwner(H, RECIPES, i),
      await readManifestOwner(H, MANIFESTS, i),
    ]);
    assert.equal(summary(r, 'recipe', 'qwen-7b'), 'unsupported/configured/unknown');
    assert.equal(summary(r, 'recipe', 'whisper-small'), 'configured/configured');
    assert.equal(summary(m, 'manifest', 'node-a/qwen-7b'), 'unsupported/configured/unknown');
  });
});

describe('inspector: an unreachable runtime makes the whole source unavailable (inspection-error)', () => {
  const UNAVAILABLE = { status: 'unavailable', reason: 'inspection-error', records: [] };
  const both = async (i: ContainerInspector) => [
    await readRecipeOwner(H, RECIPES, i),
    await readManifestOwner(H, MANIFESTS, i),
  ];
  const direct = async (socketPath: string, timeoutMs?: number) => {
    const api = new DockerEngineClient(socketPath, timeoutMs ? { timeoutMs } : {});
    try {
      return await both(new ContainerInspector(api));
    } finally {
      await api.close();
    }
  };

  it('socket missing', async () => {
    for (const r of await direct(join(tmp(), 'docker.sock'))) assert.deepEqual(r, UNAVAILABLE);
  });
  it('connection refused (a socket path nobody listens on)', async () => {
    const path = join(tmp(), 'docker.sock');
    writeFileSync(path, ''); // a plain file where the socket was: connect() is refused
    for (const r of await direct(path)) assert.deepEqual(r, UNAVAILABLE);
  });
  it('timeout (the runtime accepts and never answers)', async () => {
    const r = await withFake({ raw: (p) => (p === '/containers/json' ? 'hang' : undefined) }, (_f, i) => both(i), 200);
    for (const x of r) assert.deepEqual(x, UNAVAILABLE);
  });
  const bad: [string, string, number, string][] = [
    ['malformed JSON', '/containers/json', 200, '{"Id": '],
    ['a list that is not an array', '/containers/json', 200, '{"message":"odd"}'],
    ['a list entry without an Id', '/containers/json', 200, '[{"Labels":{"svc.recipe":"qwen-7b"}}]'],
    ['a server error', '/containers/json', 500, '{"message":"canary daemon error"}'],
    ['malformed inspect JSON', `/containers/${QWEN_ID}/json`, 200, 'not json'],
  ];
  for (const [name, path, status, body] of bad) {
    it(name, async () => {
      const r = await withFake({ raw: (p) => (p === path ? { status, body } : undefined) }, (_f, i) => both(i));
      for (const x of r) assert.deepEqual(x, UNAVAILABLE);
    });
  }
  it('timeout (the runtime trickles its answer a byte at a time): the whole call is bounded, not each wait', async () => {
    const path = join(tmp(), 'trickle.sock');
    const server = createServer((sock) => {
      sock.on('error', () => undefined);
      sock.once('data', () => {
        sock.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n');
        const drip = setInterval(() => (sock.destroyed ? clearInterval(drip) : sock.write('1\r\n \r\n')), 100);
        sock.on('close', () => clearInterval(drip));
      });
    });
    server.listen(path);
    await once(server, 'listening');
    try {
      const started = Date.now();
      const api = new DockerEngineClient(path, { timeoutMs: 500 });
      await assert.rejects(
        api.getJson('/containers/json'),
        (e: unknown) => e instanceof RuntimeUnreachableError && e.failure === 'timeout',
      );
      assert.ok(Date.now() - started < 2000, `took ${Date.now() - started} ms`);
      for (const r of await direct(path, 500)) assert.deepEqual(r, UNAVAILABLE);
      await api.close();
    } finally {
      server.close();
    }
  });
  it('the client reports each failure as a RuntimeUnreachableError with a fixed message', async () => {
    const api = new DockerEngineClient(join(tmp(), 'none.sock'));
    await assert.rejects(
      api.getJson('/version'),
      (e: unknown) =>
        e instanceof RuntimeUnreachableError && e.failure === 'connect' && !e.message.includes('none.sock'),
    );
    await api.close();
  });
  it('an unreadable configuration directory is unavailable too, never empty', async () => {
    await withFake({}, async (_f, i) => {
      assert.deepEqual(await readRecipeOwner(H, join(tmp(), 'missing'), i), UNAVAILABLE);
      assert.deepEqual(await readManifestOwner(H, join(tmp(), 'missing'), i), UNAVAILABLE);
    });
  });
});
