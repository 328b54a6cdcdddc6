/**
 * Parsing `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` output.
 *
 * The output is untrusted text from another program (drivers differ, fields can be `[N/A]`,
 * `[Not Supported]` or garbage after a driver fault), so the parser never throws: a line it
 * cannot read is counted in `skipped` and left out, and a field it cannot read is null.
 */

/** The fields we ask for, in order; the parser depends on this order. */
export const QUERY_FIELDS = [
  'index',
  'uuid',
  'name',
  'memory.used',
  'memory.total',
  'utilization.gpu',
  'temperature.gpu',
  'power.draw',
] as const;

/** The exact arguments given to nvidia-smi. */
export const NVIDIA_SMI_ARGS: readonly string[] = [
  `--query-gpu=${QUERY_FIELDS.join(',')}`,
  '--format=csv,noheader,nounits',
];

/** One card as observed in one sample. Numbers are null when the driver did not report them. */
export interface GpuCard {
  /** Driver enumeration index: can change across reboots, so it is shown but never a key. */
  readonly index: number;
  /** The observed card identity (`GPU-...`); per-card series are keyed by it. */
  readonly uuid: string;
  /** Product name, bounded and reduced to printable ASCII. */
  readonly name: string;
  readonly memory_used_mib: number | null;
  readonly memory_total_mib: number | null;
  readonly utilization_pct: number | null;
  readonly temperature_c: number | null;
  readonly power_w: number | null;
}

export interface ParsedSample {
  readonly cards: GpuCard[];
  /** Non-empty lines that were not a readable card (malformed, duplicated identity, too many). */
  readonly skipped: number;
}

/** More cards than any single host has; bounds memory and page size against runaway output. */
export const MAX_CARDS = 64;
const MAX_NAME = 64;
// GPU UUIDs look like GPU-8f2e...; MIG-capable drivers may print MIG-... identities.
const UUID_RE = /^(?:GPU|MIG)-[A-Za-z0-9-]{1,96}$/;
const NUMBER_RE = /^-?[0-9]{1,9}(?:\.[0-9]{1,6})?$/;
const MISSING = new Set([
  '[N/A]',
  'N/A',
  '[Not Supported]',
  '[Unknown Error]',
  '[Insufficient Permissions]',
  '[GPU is lost]',
  '',
]);

/** A numeric field within [min, max], or null when missing, non-numeric or out of range. */
function num(raw: string, min: number, max: number): number | null {
  if (MISSING.has(raw) || !NUMBER_RE.test(raw)) return null;
  const n = Number(raw);
  return n >= min && n <= max ? n : null;
}

/** Parses one line, or returns undefined when the line is not a readable card. */
export function parseLine(line: string): GpuCard | undefined {
  const fields = line.split(',').map((f) => f.trim());
  // Names may contain commas; the fixed fields at both ends locate the name between them.
  if (fields.length < QUERY_FIELDS.length) return undefined;
  const [indexRaw, uuid] = fields as [string, string];
  const tail = fields.slice(-5) as [string, string, string, string, string];
  const index = /^[0-9]{1,3}$/.test(indexRaw) ? Number(indexRaw) : Number.NaN;
  if (!Number.isInteger(index) || !UUID_RE.test(uuid)) return undefined;
  const name = fields
    .slice(2, -5)
    .join(', ')
    .replace(/[^\x20-\x7e]/g, '')
    .slice(0, MAX_NAME)
    .trim();
  return {
    index,
    uuid,
    name: name === '' || MISSING.has(name) ? 'unknown GPU' : name,
    memory_used_mib: num(tail[0], 0, 1e7),
    memory_total_mib: num(tail[1], 0, 1e7),
    utilization_pct: num(tail[2], 0, 100),
    temperature_c: num(tail[3], -50, 200),
    power_w: num(tail[4], 0, 1e5),
  };
}

/** Parses the whole output. Never throws. */
export function parseNvidiaSmiCsv(text: string): ParsedSample {
  const cards: GpuCard[] = [];
  const seen = new Set<string>();
  let skipped = 0;
  for (const raw of text.split(/\r?\n/)) {
    if (raw.trim() === '') continue;
    const card = raw.length <= 1024 ? parseLine(raw) : undefined;
    // A repeated identity would merge two cards' series: keep the first, count the rest.
    if (!card || seen.has(card.uuid) || cards.length >= MAX_CARDS) {
      skipped++;
      continue;
    }
    seen.add(card.uuid);
    cards.push(card);
  }
  return { cards, skipped };
}

/**
 * "Aggregate GPU memory": a display sum of per-card figures, never one unified capacity
 * (memory on different cards cannot hold one tensor). Cards that did not report memory are
 * counted in `cards_unreported` so the sum is never passed off as complete.
 */
export interface AggregateMemory {
  readonly used_mib: number;
  readonly total_mib: number;
  readonly cards_counted: number;
  readonly cards_unreported: number;
}

export function aggregateMemory(cards: readonly GpuCard[]): AggregateMemory {
  let used = 0;
  let total = 0;
  let counted = 0;
  for (const c of cards) {
    if (c.memory_used_mib === null || c.memory_total_mib === null) continue;
    used += c.memory_used_mib;
    total += c.memory_total_mib;
    counted++;
  }
  return { used_mib: used, total_mib: total, cards_counted: counted, cards_unreported: cards.length - counted };
}
