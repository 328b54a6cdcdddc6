import type { FleetResult, NodeResult, SourceResult, Truncation } from '../schema/envelopes.js';
import type { WorkloadRecord } from '../schema/record.js';
import { parseTimestamp } from '../schema/primitives.js';

/**
 * Human output of the workload reads: a kubectl-like table, then one line per source (and per
 * node for a fleet) that says in words what partial, unavailable and stale mean, because an
 * operator at 3 a.m. must never read "unavailable" as "idle". Every string printed here has
 * passed the schema (enums, host grammar, timestamps), so nothing can smuggle terminal
 * escapes in.
 */

export interface Style {
  readonly color: boolean;
}

const RESET = '\u001b[0m';
const PAINT = {
  green: '\u001b[32m',
  yellow: '\u001b[33m',
  red: '\u001b[31m',
  dim: '\u001b[2m',
  bold: '\u001b[1m',
} as const;
type Paint = keyof typeof PAINT;

function paint(s: Style, p: Paint | undefined, text: string): string {
  return s.color && p ? `${PAINT[p]}${text}${RESET}` : text;
}

/** Colour only when stdout is a terminal and NO_COLOR is absent or empty (no-color.org). */
export function detectStyle(stream: NodeJS.WriteStream, env: NodeJS.ProcessEnv): Style {
  const noColor = env['NO_COLOR'];
  return { color: stream.isTTY === true && (noColor === undefined || noColor === '') };
}

/** Whole seconds, minutes, hours or days, kubectl style: `12s`, `3m`, `2h`, `4d`. */
export function formatAge(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}

const STATUS_WORDS = {
  complete: '',
  partial: 'partial — trust these records, but this is not the whole inventory',
  unavailable: 'unavailable — NOT idle: the owner could not be read',
} as const;
const NODE_UNAVAILABLE = 'unavailable — NOT idle: the node could not be read';
// A node that answered, but none of the sources asked about could be read.
const NODE_SOURCES_UNAVAILABLE = 'unavailable — NOT idle: the node answered, but no source asked about could be read';
const FLEET_UNAVAILABLE = 'unavailable — NOT idle: no node could be read';
const STALE_WORDS = 'stale — the source observation is older than its threshold; states are as last observed';
const STATUS_PAINT = { complete: 'green', partial: 'yellow', unavailable: 'red' } as const;

function truncationText(t: Truncation): string {
  return `returned ${t.returned}, omitted ${t.omitted === null ? 'count unknown' : String(t.omitted)}`;
}

function statusText(s: Style, status: keyof typeof STATUS_WORDS, words: string): string {
  return paint(s, STATUS_PAINT[status], status === 'complete' ? 'complete' : words);
}

interface Row {
  readonly record: WorkloadRecord;
  readonly collectedAt: string;
}

const HEADERS = ['HOST', 'OWNER', 'KIND', 'STATE', 'PHASE', 'OUTCOME', 'PROGRESS', 'QUALITY', 'AGE'] as const;

function cells(row: Row): string[] {
  const r = row.record;
  const progress = r.progress ? `${r.progress.completed}/${r.progress.total ?? '?'} ${r.progress.unit}` : '-';
  const age = formatAge(parseTimestamp(row.collectedAt) - parseTimestamp(r.updated_at));
  return [r.host, r.owner, r.kind, r.state, r.phase, r.outcome ?? '-', progress, r.observation_quality, age];
}

function qualityPaint(q: string): Paint | undefined {
  if (q === 'stale' || q === 'inspection-error') return 'yellow';
  if (q === 'healthy-identity') return 'green';
  return undefined;
}

/** The record table, newest update first across sources; "No records." when there are none. */
export function formatTable(unsorted: readonly Row[], s: Style): string[] {
  if (unsorted.length === 0) return ['No records.'];
  const rows = [...unsorted].sort((a, b) => parseTimestamp(b.record.updated_at) - parseTimestamp(a.record.updated_at));
  const body = rows.map(cells);
  const widths = HEADERS.map((h, i) => Math.max(h.length, ...body.map((c) => c[i]!.length)));
  const line = (c: readonly string[], quality: string | undefined): string =>
    c
      .map((v, i) => {
        const padded = i === c.length - 1 ? v : v.padEnd(widths[i]!);
        return i === 7 && quality ? paint(s, qualityPaint(quality), padded) : padded;
      })
      .join('  ')
      .trimEnd();
  return [
    paint(s, 'bold', line(HEADERS, undefined)),
    ...body.map((c, i) => line(c, rows[i]!.record.observation_quality)),
  ];
}

function sourceLines(src: SourceResult, s: Style, indent: string): string[] {
  const reason = src.reason ? ` (${src.reason})` : '';
  const out = [
    `${indent}source ${src.owner}: ${statusText(s, src.status, STATUS_WORDS[src.status])}${reason}; ${truncationText(src.truncation)}`,
  ];
  const stale = src.records.filter((r) => r.observation_quality === 'stale').length;
  if (stale > 0) out.push(`${indent}  ${stale} record${stale === 1 ? '' : 's'} ${paint(s, 'yellow', STALE_WORDS)}`);
  return out;
}

function nodeLines(n: NodeResult, s: Style, indent: string): string[] {
  const condition = n.condition ? ` (${n.condition})` : '';
  const words =
    n.status === 'unavailable'
      ? n.condition !== undefined || n.sources.length === 0
        ? NODE_UNAVAILABLE
        : NODE_SOURCES_UNAVAILABLE
      : STATUS_WORDS[n.status];
  const out = [
    `${indent}node ${n.expected_host}: ${statusText(s, n.status, words)}${condition}; ${truncationText(n.truncation)}; collected ${n.collected_at}`,
  ];
  for (const src of n.sources) out.push(...sourceLines(src, s, `${indent}  `));
  return out;
}

/** The table and summary lines of a router or controller NodeResult. */
export function formatNodeResult(n: NodeResult, s: Style): string {
  const rows = n.sources.flatMap((src) => src.records.map((record) => ({ record, collectedAt: n.collected_at })));
  return [...formatTable(rows, s), '', ...nodeLines(n, s, '')].join('\n') + '\n';
}

/** The table and summary lines of a FleetResult: every declared node, then the fleet. */
export function formatFleetResult(f: FleetResult, s: Style): string {
  const rows = f.nodes.flatMap((n) =>
    n.sources.flatMap((src) => src.records.map((record) => ({ record, collectedAt: n.collected_at }))),
  );
  const words = f.status === 'unavailable' ? FLEET_UNAVAILABLE : STATUS_WORDS[f.status];
  const lines = [...formatTable(rows, s), ''];
  for (const n of f.nodes) lines.push(...nodeLines(n, s, ''));
  lines.push(`fleet: ${statusText(s, f.status, words)}; ${truncationText(f.truncation)}; collected ${f.collected_at}`);
  return lines.join('\n') + '\n';
}
