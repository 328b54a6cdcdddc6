import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { resolveFilters, type FilterArgs } from '../../src/schema/filters.js';
import type { WorkloadRecord } from '../../src/schema/record.js';
import { ANSWER_SLACK_MS, QUERY_SLACK_MS, selects } from '../../src/schema/selects.js';
import { T0, done, rec } from '../support/records.js';

const H = 'node-a';
const running = rec(H, 'benchmark', 'run-1');
const streaming = rec(H, 'router', 'req-1');
const staleRunning = rec(H, 'controller', 'op-1', { state: 'running', phase: 'running', observation_quality: 'stale' });
const queued = rec(H, 'media', 'job-1', { state: 'queued', phase: 'queued' });
const configured = rec(H, 'recipe', 'r-1', { at: T0 - 90_000_000 });
const absent = rec(H, 'manifest', 'm-1', { state: 'absent', phase: 'absent', at: T0 - 90_000_000 });
const unsupported = rec(H, 'media', 'job-u', {
  state: 'unsupported',
  phase: 'unsupported',
  outcome: 'unknown',
  at: T0 - 90_000_000,
});
const otherHost = rec('node-b', 'benchmark', 'run-b');
/** Terminal, updated `ageMs` before T0. */
const ended = (ageMs: number, native = `t-${ageMs}`): WorkloadRecord => done(H, 'benchmark', native, T0 - ageMs);

type Row = readonly [
  string,
  WorkloadRecord,
  FilterArgs,
  boolean,
  { slackMs?: number; stale?: boolean; now?: number; updatedMs?: number }?,
];

// Every filter, the active_only/stale rule, recent_seconds at its edge with each slack.
const ROWS: readonly Row[] = [
  ['no filters: active work', running, {}, true],
  ['no filters: configured work, however old', configured, {}, true],
  ['no filters: absent, however old', absent, {}, true],
  ['no filters: unsupported, however old', unsupported, {}, true],
  ['owner matches', running, { owner: 'benchmark' }, true],
  ['owner differs', running, { owner: 'media' }, false],
  ['kind matches', streaming, { kind: 'router-request' }, true],
  ['kind differs', streaming, { kind: 'benchmark-job' }, false],
  ['owner and kind disagree', running, { owner: 'benchmark', kind: 'media-job' }, false],
  ['state matches', queued, { state: 'queued' }, true],
  ['state differs', queued, { state: 'running' }, false],
  ['host matches', running, { host: H }, true],
  ['host differs', otherHost, { host: H }, false],
  ['active_only: active, fresh', running, { active_only: true }, true],
  ['active_only: active, labelled stale', staleRunning, { active_only: true }, false],
  ['active_only false: active, labelled stale', staleRunning, { active_only: false }, true],
  ['active_only: active, the node judges it stale', running, { active_only: true }, false, { stale: true }],
  [
    'active_only: labelled stale, the node judges it fresh',
    staleRunning,
    { active_only: true },
    true,
    { stale: false },
  ],
  ['active_only: configured is not active', configured, { active_only: true }, false],
  ['active_only: terminal is not active', ended(1000), { active_only: true }, false],
  ['recent_seconds default (3600): ended 3600 s ago', ended(3600000), {}, true],
  ['recent_seconds default (3600): ended 3600.001 s ago', ended(3600001), {}, false],
  ['recent_seconds 60: ended 60 s ago', ended(60000), { recent_seconds: 60 }, true],
  [
    'recent_seconds 60: ended 60.001 s ago, node query slack',
    ended(60001),
    { recent_seconds: 60 },
    false,
    { slackMs: QUERY_SLACK_MS },
  ],
  [
    'recent_seconds 60: ended 60.001 s ago, answer slack',
    ended(60001),
    { recent_seconds: 60 },
    true,
    { slackMs: ANSWER_SLACK_MS },
  ],
  [
    'recent_seconds 60: ended 61 s ago, answer slack',
    ended(61000),
    { recent_seconds: 60 },
    true,
    { slackMs: ANSWER_SLACK_MS },
  ],
  [
    'recent_seconds 60: ended 61.001 s ago, answer slack',
    ended(61001),
    { recent_seconds: 60 },
    false,
    { slackMs: ANSWER_SLACK_MS },
  ],
  ['recent_seconds 1: ended 1 s ago', ended(1000), { recent_seconds: 1 }, true],
  ['recent_seconds 1: ended 2 s ago', ended(2000), { recent_seconds: 1 }, false],
  [
    'recent_seconds does not apply to active work',
    rec(H, 'benchmark', 'old-run', { at: T0 - 90_000_000 }),
    { recent_seconds: 1 },
    true,
  ],
  ['terminal, dated in the future', ended(-10000), { recent_seconds: 1 }, true],
  ['updatedMs given wins over updated_at', ended(0), { recent_seconds: 1 }, false, { updatedMs: T0 - 5_000 }],
  ['a clock that is not a number selects no terminal record', ended(0), {}, false, { now: Number.NaN }],
  ['a clock that is not a number still selects active work', running, {}, true, { now: Number.NaN }],
  [
    'every filter at once',
    ended(30000, 't-all'),
    {
      owner: 'benchmark',
      kind: 'benchmark-job',
      state: 'terminal',
      host: H,
      active_only: false,
      recent_seconds: 30,
      limit: 1,
    },
    true,
  ],
];

describe('selects: one rule for "does this record match these filters"', () => {
  for (const [name, r, args, want, o] of ROWS) {
    it(name, () => {
      const f = resolveFilters(args);
      const got =
        o?.stale !== undefined || o?.updatedMs !== undefined
          ? selects(
              r,
              f,
              o?.now ?? T0,
              o?.slackMs ?? QUERY_SLACK_MS,
              o?.stale ?? r.observation_quality === 'stale',
              o?.updatedMs,
            )
          : o?.slackMs !== undefined
            ? selects(r, f, o?.now ?? T0, o.slackMs)
            : selects(r, f, o?.now ?? T0);
      assert.equal(got, want);
    });
  }

  it('the slacks: the node decides exactly, a reader of its answer allows one second', () => {
    assert.equal(QUERY_SLACK_MS, 0);
    assert.equal(ANSWER_SLACK_MS, 1_000);
  });
});
