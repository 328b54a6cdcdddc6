import type { Quality } from '../schema/enums.js';
import { formatTimestamp } from '../schema/primitives.js';
import { recordId } from '../schema/record-id.js';
import { SCHEMA_ID, type WorkloadRecord } from '../schema/record.js';

/**
 * Pure mapping of recipe and manifest serving (owners `recipe` and `manifest`, kind
 * `recipe-serve`) to canonical records. Decisions (docs/api.md, "Recipes and manifests"):
 * - intent `configured` (a recipe file, or a manifest's `recipes` entry) with no container,
 *   or with a container in a known non-running state -> `configured` / quality `configured`;
 * - intent `absent` (a manifest's `absent` entry, or a managed container whose recipe is no
 *   longer configured) with no running container -> `absent` / quality `absent`;
 * - exactly one container, seen running -> `running` / quality `observed-running`, never higher;
 * - two or more containers claiming the recipe, or a runtime state this mapping does not know
 *   -> `unsupported`, outcome `unknown`, the raw state never exposed.
 */

/** Docker Engine container states this mapping knows. */
export const KNOWN_CONTAINER_STATES = [
  'running',
  'created',
  'restarting',
  'paused',
  'exited',
  'removing',
  'dead',
] as const;
const KNOWN: ReadonlySet<string> = new Set(KNOWN_CONTAINER_STATES);

export type RecipeIntent = 'configured' | 'absent';

/** What the runtime said about one container claiming the recipe (raw `status`: internal only). */
export interface ContainerSighting {
  readonly status: string;
  readonly createdAt: number;
  readonly changedAt: number;
}

/**
 * Evidence a caller may hold about the serving endpoint. Accepted so the ceiling can be
 * shown: none of it ever raises a recipe or manifest record (SPEC.md rules 3 and 4).
 */
export interface EndpointEvidence {
  /** A health check answered 2xx. */
  readonly healthOk?: boolean;
  /** Model names a `/v1/models` answer listed. */
  readonly servedModels?: readonly string[];
  /** The model name the configuration says it serves. */
  readonly configuredModel?: string;
}

export interface RecipeServeInput {
  readonly owner: 'recipe' | 'manifest';
  /** Recipe name, or `<manifest>/<recipe>`; never a path. */
  readonly nativeId: string;
  readonly intent: RecipeIntent;
  /** When the configuration was written (epoch ms); undefined for an orphan container. */
  readonly configAt?: number;
  readonly containers: readonly ContainerSighting[];
  readonly evidence?: EndpointEvidence;
}

export type ServeState = 'configured' | 'absent' | 'running' | 'unsupported';

/** Why a recipe is `unsupported` (internal; the record says only `unsupported`). */
export type UnsupportedWhy = 'ambiguous' | 'unknown-state';

/** Pure: the canonical serve state from intent and the containers claiming the recipe. */
export function serveState(
  intent: RecipeIntent,
  containers: readonly ContainerSighting[],
): { state: ServeState; why?: UnsupportedWhy } {
  if (containers.length > 1) return { state: 'unsupported', why: 'ambiguous' };
  const c = containers[0];
  if (c && !KNOWN.has(c.status)) return { state: 'unsupported', why: 'unknown-state' };
  if (c?.status === 'running') return { state: 'running' };
  return { state: intent };
}

/** The rungs of the evidence ladder a recipe-serve record can stand on. */
export interface LadderEvidence extends EndpointEvidence {
  readonly configured: boolean;
  readonly containerRunning: boolean;
}

/**
 * Pure: the observation quality of recipe-serve evidence. Nothing -> `absent`;
 * configuration -> `configured`; a container seen running -> `observed-running`. Health and
 * model names are never read: `healthy-identity` is out of reach for these owners.
 */
export function recipeQuality(e: LadderEvidence): Quality {
  if (e.containerRunning) return 'observed-running';
  return e.configured ? 'configured' : 'absent';
}

function finite(ts: readonly (number | undefined)[]): number[] {
  return ts.filter((t): t is number => t !== undefined && Number.isFinite(t) && t > 0);
}

/**
 * Pure: one recipe-serve record. `created_at` is the earliest and `updated_at` the latest of
 * the configuration time and the containers' own times (owner evidence, never the read
 * time unless nothing else is known), none later than the inspection time `now`, which is
 * `source_timestamp`.
 */
export function mapRecipeServe(host: string, input: RecipeServeInput, now: number): WorkloadRecord {
  const { state } = serveState(input.intent, input.containers);
  const quality = recipeQuality({
    ...input.evidence,
    configured: input.intent === 'configured',
    containerRunning: state === 'running',
  });
  // No evidence is newer than the look that found it: a file mtime or container time from a
  // clock ahead (a `touch -d tomorrow`, another host's runtime) is capped at `now`. A future
  // `updated_at` would be refused by every fold, and would pin the record once it was kept.
  const times = finite([input.configAt, ...input.containers.flatMap((c) => [c.createdAt, c.changedAt])]).map((t) =>
    Math.min(t, now),
  );
  const created = times.length ? Math.min(...times) : now;
  const updated = times.length ? Math.max(...times) : now;
  const rec: WorkloadRecord = {
    schema: SCHEMA_ID,
    id: recordId(host, input.owner, 'recipe-serve', input.nativeId),
    host,
    owner: input.owner,
    kind: 'recipe-serve',
    state,
    phase: state,
    source_authority: 'managed-status',
    observation_quality: quality,
    created_at: formatTimestamp(created),
    updated_at: formatTimestamp(updated),
    source_timestamp: formatTimestamp(now),
  };
  return state === 'unsupported' ? { ...rec, outcome: 'unknown' } : rec;
}
