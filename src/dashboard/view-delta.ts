// The Workloads view by deltas (decision 0075). Pure and without imports at run time: the
// dashboard server diffs two successive reads with it, and the page applies what it sends
// with the very same compiled module (served as /shared/view-delta.js), so that there is one
// definition of "what changed" and "what the view is now", never a copy in each language.
import type { FleetResult, NodeResult, SourceResult } from '../schema/envelopes.js';
import type { WorkloadRecord } from '../schema/record.js';

/** One record's changed top-level members (`set`) and members it no longer has (`unset`). */
export interface RecordPatch {
  readonly id: string;
  readonly set: Readonly<Record<string, unknown>>;
  readonly unset: readonly string[];
}

/** What changed in one source: its status words and counts always, its records when they moved. */
export interface SourceDelta {
  readonly owner: SourceResult['owner'];
  readonly status: SourceResult['status'];
  /** null: the source has no reason now. */
  readonly reason: SourceResult['reason'] | null;
  readonly truncation: SourceResult['truncation'];
  readonly added: readonly WorkloadRecord[];
  readonly changed: readonly RecordPatch[];
  readonly removed: readonly string[];
}

/** The node's own members (always sent: they are small) and the sources that changed. */
export interface NodeDelta {
  readonly status: NodeResult['status'];
  readonly collected_at: string;
  readonly truncation: NodeResult['truncation'];
  /** null: no condition now. */
  readonly condition: NodeResult['condition'] | null;
  readonly sources: readonly SourceDelta[];
}

/** JSON with object keys sorted: two equal values write the same text whatever their key order. */
export function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'null';
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o)
    .filter((k) => o[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`).join(',')}}`;
}

/**
 * A digest of what a view shows: every member of the node and its sources, with each
 * source's records in id order (the order a delta leaves them in is not part of the view).
 * Two 32-bit FNV-1a lanes: a check that a page's view equals the read it stands for, not a
 * security measure.
 */
export function viewDigest(n: NodeResult): string {
  return digestText(canonicalJson(sortedNode(n)));
}

/** A node with each source's records in id order (the order a delta leaves them in is not part of the view). */
function sortedNode(n: NodeResult): NodeResult {
  const sources = n.sources.map((s) => ({
    ...s,
    records: [...s.records].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)),
  }));
  return { ...n, sources };
}

/** The Fleet view's digest: every member of the fleet and its nodes, as viewDigest says them. */
export function fleetDigest(f: FleetResult): string {
  return digestText(canonicalJson({ ...f, nodes: f.nodes.map(sortedNode) }));
}

function digestText(text: string): string {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ 0x5bd1e995;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193) >>> 0;
    b = Math.imul(b ^ c, 0x5bd1e995) >>> 0;
    b ^= b >>> 15;
  }
  return `${a.toString(16).padStart(8, '0')}${b.toString(16).padStart(8, '0')}:${text.length}`;
}

function recordPatch(prev: WorkloadRecord, next: WorkloadRecord): RecordPatch | undefined {
  const p = prev as unknown as Record<string, unknown>;
  const q = next as unknown as Record<string, unknown>;
  const set: Record<string, unknown> = {};
  const unset: string[] = [];
  for (const k of Object.keys(q)) if (!(k in p) || canonicalJson(p[k]) !== canonicalJson(q[k])) set[k] = q[k];
  for (const k of Object.keys(p)) if (!(k in q)) unset.push(k);
  if (Object.keys(set).length === 0 && unset.length === 0) return undefined;
  return { id: next.id, set, unset };
}

function sourceDelta(prev: SourceResult, next: SourceResult): SourceDelta | undefined {
  const before = new Map(prev.records.map((r) => [r.id, r]));
  const added: WorkloadRecord[] = [];
  const changed: RecordPatch[] = [];
  const seen = new Set<string>();
  for (const r of next.records) {
    seen.add(r.id);
    const old = before.get(r.id);
    if (old === undefined) added.push(r);
    else {
      const patch = recordPatch(old, r);
      if (patch) changed.push(patch);
    }
  }
  const removed = prev.records.filter((r) => !seen.has(r.id)).map((r) => r.id);
  const same =
    added.length === 0 &&
    changed.length === 0 &&
    removed.length === 0 &&
    prev.status === next.status &&
    prev.reason === next.reason &&
    canonicalJson(prev.truncation) === canonicalJson(next.truncation);
  if (same) return undefined;
  return {
    owner: next.owner,
    status: next.status,
    reason: next.reason ?? null,
    truncation: next.truncation,
    added,
    changed,
    removed,
  };
}

/**
 * What turns `prev` into `next`; undefined when a delta cannot say it (another node, or a
 * different list of sources): the caller then sends the whole view.
 */
export function diffNode(prev: NodeResult, next: NodeResult): NodeDelta | undefined {
  if (prev.expected_host !== next.expected_host || prev.sources.length !== next.sources.length) return undefined;
  const sources: SourceDelta[] = [];
  for (let i = 0; i < next.sources.length; i++) {
    const p = prev.sources[i]!;
    const q = next.sources[i]!;
    if (p.owner !== q.owner) return undefined;
    const d = sourceDelta(p, q);
    if (d) sources.push(d);
  }
  return {
    status: next.status,
    collected_at: next.collected_at,
    truncation: next.truncation,
    condition: next.condition ?? null,
    sources,
  };
}

/** Applies a delta to a view (a new object; `prev` is left as it was). Thrown when: a source it names is not in `prev`. */
export function applyNodeDelta(prev: NodeResult, d: NodeDelta): NodeResult {
  const byOwner = new Map(d.sources.map((s) => [s.owner, s]));
  const sources = prev.sources.map((s): SourceResult => {
    const sd = byOwner.get(s.owner);
    if (sd === undefined) return s;
    byOwner.delete(s.owner);
    const removed = new Set(sd.removed);
    const patches = new Map(sd.changed.map((c) => [c.id, c]));
    const records = s.records
      .filter((r) => !removed.has(r.id))
      .map((r) => {
        const c = patches.get(r.id);
        if (c === undefined) return r;
        const out: Record<string, unknown> = { ...r, ...c.set };
        for (const k of c.unset) delete out[k];
        return out as unknown as WorkloadRecord;
      });
    const next: SourceResult = {
      owner: s.owner,
      status: sd.status,
      records: [...records, ...sd.added],
      truncation: sd.truncation,
    };
    return sd.reason === null || sd.reason === undefined ? next : { ...next, reason: sd.reason };
  });
  if (byOwner.size > 0) throw new Error('delta names a source the view does not have');
  const out: NodeResult = {
    schema: prev.schema,
    expected_host: prev.expected_host,
    status: d.status,
    collected_at: d.collected_at,
    sources,
    truncation: d.truncation,
  };
  return d.condition === null || d.condition === undefined ? out : { ...out, condition: d.condition };
}

/** One node of a fleet delta: what changed (`delta`), or the whole node (new, or a shape a delta cannot say). */
export type FleetNodeDelta =
  | { readonly host: string; readonly delta: NodeDelta }
  | { readonly host: string; readonly node: NodeResult };

/**
 * What changed in the Fleet view (decision 0078): the fleet's own members, the declared
 * hosts in order when they differ from the view's (absent: the same hosts in the same
 * order), and only the nodes that differ from what the view carries over (`carriedNode`).
 */
export interface FleetDelta {
  readonly status: FleetResult['status'];
  readonly collected_at: string;
  readonly truncation: FleetResult['truncation'];
  readonly hosts?: readonly string[];
  readonly nodes: readonly FleetNodeDelta[];
}

/**
 * A node a fleet delta does not name, as the view holds it afterwards. A node the fleet
 * could not read (it has a `condition`) is dated with the fleet's own read (composeFleet's
 * failedNode): while it stays failed the same way, only that date moves, and it moves with
 * the fleet's `collected_at`, which every delta carries. Any other node is kept as it was.
 * The server's diff and the page's apply both use this, so a failed node that did not
 * change is never sent again, and its age on the page still follows the latest read.
 */
export function carriedNode(n: NodeResult, prevCollectedAt: string, nextCollectedAt: string): NodeResult {
  return n.condition !== undefined && n.collected_at === prevCollectedAt ? { ...n, collected_at: nextCollectedAt } : n;
}

function sameHosts(prev: FleetResult, next: FleetResult): boolean {
  return (
    prev.nodes.length === next.nodes.length &&
    prev.nodes.every((n, i) => n.expected_host === next.nodes[i]!.expected_host)
  );
}

/** What turns fleet `prev` into `next`: nodes the view carries over unchanged (carriedNode) are left out. */
export function diffFleet(prev: FleetResult, next: FleetResult): FleetDelta {
  const before = new Map(prev.nodes.map((n) => [n.expected_host, n]));
  const nodes: FleetNodeDelta[] = [];
  for (const n of next.nodes) {
    const old = before.get(n.expected_host);
    if (old !== undefined && canonicalJson(carriedNode(old, prev.collected_at, next.collected_at)) === canonicalJson(n))
      continue;
    const delta =
      old === undefined || old.condition !== undefined || n.condition !== undefined ? undefined : diffNode(old, n);
    nodes.push(delta ? { host: n.expected_host, delta } : { host: n.expected_host, node: n });
  }
  return {
    status: next.status,
    collected_at: next.collected_at,
    truncation: next.truncation,
    ...(sameHosts(prev, next) ? {} : { hosts: next.nodes.map((n) => n.expected_host) }),
    nodes,
  };
}

/** Applies a fleet delta (a new object). Thrown when: a node it patches or lists is not in `prev`. */
export function applyFleetDelta(prev: FleetResult, d: FleetDelta): FleetResult {
  const before = new Map(prev.nodes.map((n) => [n.expected_host, n]));
  const byHost = new Map(
    prev.nodes.map((n) => [n.expected_host, carriedNode(n, prev.collected_at, d.collected_at)] as const),
  );
  for (const nd of d.nodes) {
    if ('node' in nd) byHost.set(nd.host, nd.node);
    else {
      const old = before.get(nd.host);
      if (old === undefined) throw new Error('delta patches a node the view does not have');
      byHost.set(nd.host, applyNodeDelta(old, nd.delta));
    }
  }
  const hosts = d.hosts ?? prev.nodes.map((n) => n.expected_host);
  const nodes = hosts.map((h) => {
    const n = byHost.get(h);
    if (n === undefined) throw new Error('delta lists a node the view does not have');
    return n;
  });
  return { schema: prev.schema, status: d.status, collected_at: d.collected_at, nodes, truncation: d.truncation };
}
