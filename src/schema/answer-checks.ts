import { OWNERS, type NodeCondition, type ResultStatus } from './enums.js';
import { checkFleetResult, checkNodeResult, type FleetResult, type NodeResult } from './envelopes.js';
import type { Filters } from './filters.js';
import { hasDuplicateKey } from './json-duplicates.js';
import { parseTimestamp } from './primitives.js';
import { SCHEMA_ID, recordRuleViolation } from './record.js';
import { ANSWER_SLACK_MS, relevant, selects } from './selects.js';

/*
 * What a reader checks in an answer before it believes it: the fleet in each node's reply,
 * the CLI in a router's or a fleet's result, the dashboard in its node's. Pure; a reader
 * never needs a fold to check what it reads.
 */

/** Largest node reply the fleet reads; beyond it the node is `malformed`. */
export const MAX_NODE_REPLY_BYTES = 4 * 1024 * 1024;

/** What asking one node produced. */
export type NodeAnswer =
  | { readonly kind: 'reply'; readonly data: Uint8Array }
  | { readonly kind: 'unreachable' }
  | { readonly kind: 'sleeping' };

const decoder = new TextDecoder('utf-8', { fatal: true });

const STATUS_RANK: Readonly<Record<ResultStatus, number>> = { complete: 0, partial: 1, unavailable: 2 };

/**
 * Pure: one node's answer -> its NodeResult, or the condition that makes it untrustworthy.
 * The fleet checks the answer's shape and its claims: all six sources in contract order, no
 * condition of its own (conditions are the fleet's verdict), counts that add up; a status
 * or count more hopeful than its sources support is lowered to what they support (`f`: the
 * filters asked, which decide the sources that count).
 */
export function classifyAnswer(hostId: string, answer: NodeAnswer, f?: Filters): NodeResult | NodeCondition {
  if (answer.kind === 'unreachable') return 'unreachable';
  if (answer.kind === 'sleeping') return 'sleeping';
  if (answer.data.byteLength > MAX_NODE_REPLY_BYTES) return 'malformed';
  let v: unknown;
  let text: string;
  try {
    text = decoder.decode(answer.data);
    v = JSON.parse(text);
  } catch {
    return 'malformed';
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) return 'malformed';
  const o = v as Record<string, unknown>;
  // Another schema, or a problem object from a node that cannot serve this read: not ours to interpret.
  if (o['schema'] !== SCHEMA_ID) return 'schema' in o || ('type' in o && 'status' in o) ? 'incompatible' : 'malformed';
  if (!checkNodeResult.Check(v)) return 'malformed';
  // A member named twice: JSON.parse kept the last copy, another reader may keep the first.
  if (hasDuplicateKey(text, v)) return 'malformed';
  return checkNodeClaims(hostId, v, f);
}

/**
 * The claims of a schema-valid node answer: its identity, all six sources in order, records
 * of that host and owner, no condition of its own, counts that add up; then its status and
 * count are held to its sources (when `f` is given). Mutates `v` only to lower it.
 */
function checkNodeClaims(
  hostId: string,
  v: NodeResult,
  f?: Filters,
  owners: readonly string[] = OWNERS,
): NodeResult | NodeCondition {
  if (v.expected_host !== hostId) return 'wrong-identity';
  if (v.condition !== undefined || v.sources.length !== owners.length) return 'malformed';
  let total = 0;
  const ids = new Set<string>();
  const collectedMs = parseTimestamp(v.collected_at);
  for (const [i, s] of v.sources.entries()) {
    if (s.owner !== owners[i]) return 'malformed';
    // An owner that could not provide trustworthy records has none, and no count (CONTRACT.md).
    if (s.status === 'unavailable' && (s.records.length > 0 || s.truncation.omitted !== null)) return 'malformed';
    for (const r of s.records) {
      if (r.host !== hostId) return 'wrong-identity';
      // The rules the fold holds every observation to, the same here: a node that breaks
      // them, repeats a record, or answers what was not asked is not believed at all.
      if (r.owner !== s.owner || recordRuleViolation(r) !== null || ids.has(r.id)) return 'malformed';
      // Judged on the node's own clock (its answer's `collected_at`), with a reader's slack.
      if (f !== undefined && !selects(r, f, collectedMs, ANSWER_SLACK_MS)) return 'malformed';
      ids.add(r.id);
    }
    if (s.truncation.returned !== s.records.length) return 'malformed';
    total += s.records.length;
  }
  // Counts that do not add up cannot be trusted as counts.
  if (v.truncation.returned !== total) return 'malformed';
  if (f !== undefined && total > f.limit) return 'malformed';
  if (f) holdToSources(v, f);
  return v;
}

/**
 * A router's NodeResult (CONTRACT.md: one source, the router's) held to the same claims as
 * a node's answer in a fleet. Returns the condition found, or undefined when it holds (its
 * status and count lowered in place to what its source supports).
 */
export function holdRouterAnswer(v: NodeResult, hostId: string, f: Filters): NodeCondition | undefined {
  const c = checkNodeClaims(hostId, v, f, ROUTER_OWNERS);
  return typeof c === 'string' ? c : undefined;
}
const ROUTER_OWNERS: readonly string[] = ['router'];

/** Lowers a node's sources, status and count to what its sources support (never raises them). */
export function holdToSources(v: NodeResult, f: Filters): void {
  // A source is `complete` only with no known omission (SPEC.md): one that left records out,
  // or cannot say how many, is `partial` whatever it claimed.
  for (const s of v.sources)
    if (s.status === 'complete' && s.truncation.omitted !== 0) (s as { status: ResultStatus }).status = 'partial';
  const rel = v.sources.filter((s) => relevant(s.owner, f));
  let derived: ResultStatus = 'complete';
  if (rel.length > 0 && rel.every((s) => s.status === 'unavailable')) derived = 'unavailable';
  else if (rel.some((s) => s.status !== 'complete' || s.truncation.omitted !== 0)) derived = 'partial';
  if (STATUS_RANK[derived] > STATUS_RANK[v.status]) v.status = derived;
  if (rel.some((s) => s.truncation.omitted === null)) v.truncation = { returned: v.truncation.returned, omitted: null };
  else if (v.truncation.omitted !== null) {
    // The node left out at least what its sources say they left out.
    const left = rel.reduce((n, s) => n + (s.truncation.omitted ?? 0), 0);
    if (v.truncation.omitted < left) v.truncation = { returned: v.truncation.returned, omitted: left };
  }
  if (v.status === 'complete' && v.truncation.omitted !== 0) v.status = 'partial';
}

/**
 * Holds a fleet result read from a fleet controller to the checks the fleet itself makes
 * (a reader trusts no server's summary over its own evidence). Each node entry is either a
 * failed node (a condition, no sources or records, count unknown) or an answer that passes
 * `classifyAnswer`'s claims; node host IDs are distinct; the fleet's counts are the sum of
 * its nodes'. Statuses and counts more hopeful than that are lowered in place, never raised:
 * a node over an unavailable source is not `complete`, a fleet with a failed node is not
 * `complete`, and `omitted` is null whenever a node's is.
 * Returns undefined when it holds, else the first condition found (`wrong-identity` for a
 * record of another host, else `malformed`).
 */
export function holdFleetAnswer(fleet: FleetResult, f: Filters): NodeCondition | undefined {
  const seen = new Set<string>();
  for (const n of fleet.nodes) {
    if (seen.has(n.expected_host)) return 'malformed';
    seen.add(n.expected_host);
    if (n.condition !== undefined) {
      if (
        n.status !== 'unavailable' ||
        n.sources.length !== 0 ||
        n.truncation.returned !== 0 ||
        n.truncation.omitted !== null
      )
        return 'malformed';
    } else {
      const c = checkNodeClaims(n.expected_host, n, f);
      if (typeof c === 'string') return c;
    }
  }
  const { status, returned, omitted } = fleetTotals(fleet.nodes);
  if (fleet.truncation.returned !== returned) return 'malformed';
  if (fleet.truncation.omitted !== null && omitted !== null && fleet.truncation.omitted !== omitted) return 'malformed';
  if (omitted === null) fleet.truncation = { returned, omitted: null };
  if (STATUS_RANK[status] > STATUS_RANK[fleet.status]) fleet.status = status;
  if (fleet.status === 'complete' && fleet.truncation.omitted !== 0) fleet.status = 'partial';
  return undefined;
}

/** Why a fleet answer read for one expected node is not believed. */
export type FleetRefusal = 'malformed' | 'not-declared' | 'wrong-identity';

/**
 * A fleet answer as a reader who names the node it expects takes it (`fleet workloads
 * --expected-node`, the dashboard's Fleet view): a fleet result has no identity of its own,
 * so the expected node must be among its declared nodes, or it is not the fleet the operator
 * meant (`not-declared`); then the fleet's own checks (holdFleetAnswer), lowering in place.
 * Returns the fleet, or why it is refused (`wrong-identity`: a record of another host).
 */
export function holdFleetFor(body: unknown, expectedNode: string, f: Filters): FleetResult | FleetRefusal {
  if (!checkFleetResult.Check(body)) return 'malformed';
  if (!body.nodes.some((n) => n.expected_host === expectedNode)) return 'not-declared';
  const held = holdFleetAnswer(body, f);
  if (held === undefined) return body;
  return held === 'wrong-identity' ? 'wrong-identity' : 'malformed';
}

/**
 * A fleet's status and counts from its nodes: `omitted` is null whenever a node's is; the
 * fleet is `complete` only when every node is and nothing was left out, `unavailable` only
 * when every node is.
 */
export function fleetTotals(nodes: readonly NodeResult[]): {
  status: ResultStatus;
  returned: number;
  omitted: number | null;
} {
  let returned = 0;
  let omitted: number | null = 0;
  let unavailable = 0;
  let complete = 0;
  for (const n of nodes) {
    returned += n.truncation.returned;
    omitted = omitted === null || n.truncation.omitted === null ? null : omitted + n.truncation.omitted;
    if (n.status === 'unavailable') unavailable++;
    if (n.status === 'complete') complete++;
  }
  let status: ResultStatus = 'partial';
  if (nodes.length > 0 && unavailable === nodes.length) status = 'unavailable';
  else if (complete === nodes.length && omitted === 0) status = 'complete';
  return { status, returned, omitted };
}
