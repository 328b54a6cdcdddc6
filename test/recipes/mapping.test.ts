import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mapRecipeServe, type RecipeServeInput } from '../../src/actors/recipe-mapping.js';
import {
  KNOWN_CONTAINER_STATES,
  recipeQuality,
  serveState,
  type ContainerSighting,
  type RecipeIntent,
} from '../../src/recipes/serve-state.js';
import { RECIPE_QUALITIES } from '../../src/schema/enums.js';
import { UpdateTimes } from '../../src/actors/recipe-actor.js';
import { formatTimestamp } from '../../src/schema/primitives.js';
import { recordId } from '../../src/schema/record-id.js';
import { isValidRecord, recordRuleViolation } from '../../src/schema/record.js';

const H = 'node-a';
const NOW = Date.parse('2026-11-25T12:00:00.000Z');
const CONF = NOW - 3_600_000;
const box = (status: string, at = NOW - 600_000): ContainerSighting => ({
  status,
  createdAt: at,
  changedAt: at + 1000,
});
const input = (
  intent: RecipeIntent,
  containers: ContainerSighting[],
  owner: 'recipe' | 'manifest' = 'recipe',
): RecipeServeInput => ({
  owner,
  nativeId: owner === 'recipe' ? 'qwen-7b' : 'node-a/qwen-7b',
  intent,
  configAt: CONF,
  containers,
});

describe('recipe-serve mapping: native runtime answers -> canonical records', () => {
  // [case, intent, container states, state, quality, outcome]
  const table: [string, RecipeIntent, string[], string, string, string | undefined][] = [
    ['configured, no container', 'configured', [], 'configured', 'configured', undefined],
    ['configured, container running', 'configured', ['running'], 'running', 'observed-running', undefined],
    ['configured, container created', 'configured', ['created'], 'configured', 'configured', undefined],
    ['configured, container exited', 'configured', ['exited'], 'configured', 'configured', undefined],
    ['configured, container dead', 'configured', ['dead'], 'configured', 'configured', undefined],
    ['configured, container paused', 'configured', ['paused'], 'configured', 'configured', undefined],
    ['configured, container restarting', 'configured', ['restarting'], 'configured', 'configured', undefined],
    ['configured, container removing', 'configured', ['removing'], 'configured', 'configured', undefined],
    ['absent, no container', 'absent', [], 'absent', 'absent', undefined],
    ['absent, container exited (left behind)', 'absent', ['exited'], 'absent', 'absent', undefined],
    ['absent, container running anyway', 'absent', ['running'], 'running', 'observed-running', undefined],
    [
      'configured, two containers claim it (ambiguous)',
      'configured',
      ['running', 'exited'],
      'unsupported',
      'configured',
      'unknown',
    ],
    [
      'configured, two running containers (ambiguous)',
      'configured',
      ['running', 'running'],
      'unsupported',
      'configured',
      'unknown',
    ],
    ['absent, two containers (ambiguous)', 'absent', ['exited', 'exited'], 'unsupported', 'absent', 'unknown'],
    ['configured, unknown runtime state', 'configured', ['hibernating'], 'unsupported', 'configured', 'unknown'],
    ['configured, empty runtime state', 'configured', [''], 'unsupported', 'configured', 'unknown'],
    ['configured, state in another case', 'configured', ['Running'], 'unsupported', 'configured', 'unknown'],
  ];
  for (const owner of ['recipe', 'manifest'] as const) {
    for (const [name, intent, states, state, quality, outcome] of table) {
      it(`${owner}: ${name} -> ${state}/${quality}`, () => {
        const r = mapRecipeServe(
          H,
          input(
            intent,
            states.map((s) => box(s)),
            owner,
          ),
          NOW,
        );
        assert.equal(r.state, state);
        assert.equal(r.phase, state, 'recipe-serve phases equal their state');
        assert.equal(r.observation_quality, quality);
        assert.equal(r.outcome, outcome);
        assert.ok(!('outcome' in r) || outcome !== undefined, 'no outcome member unless it has a value');
        assert.equal(r.owner, owner);
        assert.equal(r.kind, 'recipe-serve');
        assert.equal(r.source_authority, 'managed-status');
        assert.equal(recordRuleViolation(r), null);
        assert.ok(isValidRecord(r));
        assert.ok(RECIPE_QUALITIES.has(r.observation_quality), 'never above observed-running');
      });
    }
  }

  it('covers every known Docker state, and only those map to a supported state', () => {
    for (const s of KNOWN_CONTAINER_STATES) assert.notEqual(serveState('configured', [box(s)]).state, 'unsupported', s);
  });

  it('an unknown runtime state is unsupported without its raw value (canary)', () => {
    const canary = 'canary-state-7781';
    const r = mapRecipeServe(H, input('configured', [box(canary)]), NOW);
    assert.equal(r.state, 'unsupported');
    assert.equal(r.outcome, 'unknown');
    assert.ok(!JSON.stringify(r).includes(canary));
    assert.ok(!JSON.stringify(r).includes('7781'));
    assert.deepEqual(serveState('configured', [box(canary)]), { state: 'unsupported', why: 'unknown-state' });
    assert.deepEqual(serveState('configured', [box('running'), box('running')]), {
      state: 'unsupported',
      why: 'ambiguous',
    });
  });

  it('the native identity feeds only the record ID; the name never appears in the record', () => {
    const r = mapRecipeServe(H, input('configured', []), NOW);
    assert.equal(r.id, recordId(H, 'recipe', 'recipe-serve', 'qwen-7b'));
    const m = mapRecipeServe(H, input('configured', [], 'manifest'), NOW);
    assert.equal(m.id, recordId(H, 'manifest', 'recipe-serve', 'node-a/qwen-7b'));
    assert.notEqual(r.id, m.id);
    assert.ok(!JSON.stringify([r, m]).includes('qwen'));
  });

  it('keeps the owner evidence times: earliest as created_at, latest as updated_at, inspection as source_timestamp', () => {
    const c: ContainerSighting = { status: 'running', createdAt: CONF + 1000, changedAt: CONF + 5000 };
    const r = mapRecipeServe(H, input('configured', [c]), NOW);
    assert.equal(r.created_at, formatTimestamp(CONF));
    assert.equal(r.updated_at, formatTimestamp(CONF + 5000));
    assert.equal(r.source_timestamp, formatTimestamp(NOW));
    const bare = mapRecipeServe(H, input('configured', []), NOW);
    assert.equal(bare.created_at, formatTimestamp(CONF));
    assert.equal(bare.updated_at, formatTimestamp(CONF));
    // An orphan container (no configuration time) with unknown times falls back to the read time.
    const orphan = mapRecipeServe(
      H,
      {
        owner: 'recipe',
        nativeId: 'x',
        intent: 'absent',
        containers: [{ status: 'exited', createdAt: Number.NaN, changedAt: Number.NaN }],
      },
      NOW,
    );
    assert.equal(orphan.created_at, formatTimestamp(NOW));
    assert.ok(isValidRecord(orphan));
  });
});

describe('recipe-serve quality ladder (SPEC.md rules 3 and 4)', () => {
  const base = { configured: false, containerRunning: false };
  it('rung 0: nothing known -> absent', () => assert.equal(recipeQuality(base), 'absent'));
  it('rung 1: configuration alone -> configured', () =>
    assert.equal(recipeQuality({ ...base, configured: true }), 'configured'));
  it('rung 2: a container seen running -> observed-running', () => {
    assert.equal(recipeQuality({ ...base, configured: true, containerRunning: true }), 'observed-running');
  });
  it('rung 3 (healthy-identity) is out of reach for recipe and manifest records', () => {
    assert.ok(!RECIPE_QUALITIES.has('healthy-identity'));
  });

  it('a health response alone climbs nothing', () => {
    assert.equal(recipeQuality({ ...base, healthOk: true }), 'absent');
    assert.equal(
      recipeQuality({ ...base, configured: true, healthOk: true }),
      'configured',
      'not observed-running either',
    );
  });
  it('a configured model name alone climbs nothing', () => {
    assert.equal(recipeQuality({ ...base, configured: true, configuredModel: 'qwen-7b' }), 'configured');
    assert.equal(
      recipeQuality({ ...base, configured: true, configuredModel: 'qwen-7b', servedModels: ['qwen-7b'] }),
      'configured',
    );
  });
  it('a running container with health and a matching model name stays observed-running', () => {
    const e = {
      configured: true,
      containerRunning: true,
      healthOk: true,
      configuredModel: 'qwen-7b',
      servedModels: ['qwen-7b'],
    };
    assert.equal(recipeQuality(e), 'observed-running');
  });
  it('the mapped record never reaches healthy-identity, whatever endpoint evidence it is handed', () => {
    const evidence = { healthOk: true, configuredModel: 'qwen-7b', servedModels: ['qwen-7b'] };
    for (const intent of ['configured', 'absent'] as const) {
      for (const states of [[], ['running'], ['exited'], ['odd'], ['running', 'running']]) {
        for (const owner of ['recipe', 'manifest'] as const) {
          const r = mapRecipeServe(
            H,
            {
              ...input(
                intent,
                states.map((s) => box(s)),
                owner,
              ),
              evidence,
            },
            NOW,
          );
          assert.notEqual(r.observation_quality, 'healthy-identity');
          assert.equal(recordRuleViolation(r), null);
        }
      }
    }
    const health = mapRecipeServe(H, { ...input('configured', []), evidence: { healthOk: true } }, NOW);
    assert.equal(health.observation_quality, 'configured');
    assert.equal(health.state, 'configured');
  });
});

describe('recipe-serve update times across observations', () => {
  const H = 'node-a';
  const T = Date.parse('2026-11-20T10:00:00.000Z');
  const observe = (
    times: UpdateTimes,
    containers: { status: string; createdAt: number; changedAt: number }[],
    configAt: number | undefined,
    at: number,
  ) =>
    times.apply({
      status: 'complete',
      records: [
        mapRecipeServe(
          H,
          {
            owner: 'recipe',
            nativeId: 'm',
            intent: configAt === undefined ? 'absent' : 'configured',
            configAt,
            containers,
          },
          at,
        ),
      ],
    }).records[0]!;

  it('a change whose evidence is older (the container removed) is dated by the observation that saw it; no change keeps its date', () => {
    const times = new UpdateTimes();
    const running = observe(times, [{ status: 'running', createdAt: T + 5000, changedAt: T + 6000 }], T, T + 10_000);
    assert.equal(running.updated_at, formatTimestamp(T + 6000));
    // The container is gone: only the older recipe file is left as evidence.
    const gone = observe(times, [], T, T + 20_000);
    assert.equal(gone.state, 'configured');
    assert.equal(gone.updated_at, formatTimestamp(T + 20_000), 'dated by the observation that saw the change');
    const again = observe(times, [], T, T + 30_000);
    assert.equal(again.updated_at, formatTimestamp(T + 20_000), 'nothing changed: its date stays');
    assert.ok(isValidRecord(again) && recordRuleViolation(again) === null);
    // The recipe file removed, its stopped container left behind: absent, dated when seen.
    const stopped = observe(
      times,
      [{ status: 'exited', createdAt: T + 1000, changedAt: T + 2000 }],
      undefined,
      T + 40_000,
    );
    assert.deepEqual([stopped.state, stopped.updated_at], ['absent', formatTimestamp(T + 40_000)]);
  });

  it('evidence dated after the inspection (a recipe file touched a day ahead) is capped at it, and pins nothing once corrected', () => {
    const times = new UpdateTimes();
    const ahead = observe(times, [], T + 86_400_000, T + 1000);
    assert.deepEqual(
      [ahead.created_at, ahead.updated_at, ahead.source_timestamp],
      [formatTimestamp(T + 1000), formatTimestamp(T + 1000), formatTimestamp(T + 1000)],
    );
    assert.ok(recordRuleViolation(ahead) === null);
    // Looked at again, still ahead: nothing changed, so nothing moves (no new date every poll,
    // no record sorting first for a day).
    const again = observe(times, [], T + 86_400_000, T + 2000);
    assert.deepEqual([again.created_at, again.updated_at], [formatTimestamp(T + 1000), formatTimestamp(T + 1000)]);
    // The mtime is put back, and the recipe's container starts: the change is dated now, not tomorrow.
    const running = observe(
      times,
      [{ status: 'running', createdAt: T + 4000, changedAt: T + 5000 }],
      T + 2000,
      T + 6000,
    );
    assert.deepEqual(
      [running.state, running.created_at, running.updated_at],
      ['running', formatTimestamp(T + 1000), formatTimestamp(T + 5000)],
    );
    assert.ok(recordRuleViolation(running) === null);
  });
});
