import { ACTIVE_STATES, KIND_OF_OWNER, type Owner } from './enums.js';
import type { Filters } from './filters.js';
import { parseTimestamp } from './primitives.js';
import type { WorkloadRecord } from './record.js';

/*
 * "Does this record match these filters" (SPEC.md query rules), written once: the node's
 * query decides with it what to answer, and every reader of an answer (the fleet, the CLI,
 * the dashboard) checks with it that a node answered only what was asked.
 */

/**
 * Slack of the node's own query: none. It decides on its own clock (`now`) with the record
 * dates it holds, so `recent_seconds` is exact.
 */
export const QUERY_SLACK_MS = 0;

/**
 * Slack of a reader that checks a node's answer: one second. The reader judges on the node's
 * clock, by the answer's `collected_at` (never its own, which may differ from the node's by
 * any amount), and a record it finds not asked for makes it disbelieve the whole answer
 * (`malformed`): the second keeps a timestamp's rounding to milliseconds, or any other
 * edge at the boundary, from costing an honest node its answer.
 */
export const ANSWER_SLACK_MS = 1_000;

/** True when the owner/kind filters let `owner`'s records into the answer (only those sources shape the status). */
export function relevant(owner: Owner, f: Filters): boolean {
  return (f.owner === undefined || f.owner === owner) && (f.kind === undefined || KIND_OF_OWNER[owner] === f.kind);
}

/**
 * Pure: true when the filters select record `r` at `now` (epoch ms on the clock that judges
 * it). The owner, kind, state and host filters must match; with `active_only`, only an
 * active record that is not stale is selected (SPEC.md); otherwise every active, configured,
 * absent, unavailable and unsupported record is, and a terminal one when it was updated
 * within `recent_seconds` of `now`, plus `slackMs` (QUERY_SLACK_MS for the node's own query,
 * ANSWER_SLACK_MS for a reader checking an answer). A date or clock that is not a number
 * selects no terminal record.
 * `stale`: whether the record counts as stale, weighed for active records only; by default
 * what its `observation_quality` says (a reader's view). The node passes its own verdict,
 * which also weighs the age of the source and of the record's last observation (it labels
 * such active records `stale` when it answers).
 * `updatedMs`: `r.updated_at` in epoch ms, for a caller that holds it parsed already.
 */
export function selects(
  r: WorkloadRecord,
  f: Filters,
  now: number,
  slackMs: number = QUERY_SLACK_MS,
  stale: boolean = r.observation_quality === 'stale',
  updatedMs?: number,
): boolean {
  if (
    !relevant(r.owner, f) ||
    (f.state !== undefined && r.state !== f.state) ||
    (f.host !== undefined && r.host !== f.host)
  )
    return false;
  if (ACTIVE_STATES.has(r.state)) return !(f.active_only && stale);
  if (f.active_only) return false;
  return (
    r.state !== 'terminal' || now - (updatedMs ?? parseTimestamp(r.updated_at)) <= f.recent_seconds * 1000 + slackMs
  );
}
