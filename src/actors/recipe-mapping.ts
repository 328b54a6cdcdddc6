import { formatTimestamp } from '../schema/primitives.js';
import { recordId } from '../schema/record-id.js';
import { SCHEMA_ID, type WorkloadRecord } from '../schema/record.js';
import {
  recipeQuality,
  serveState,
  type ContainerSighting,
  type EndpointEvidence,
  type RecipeIntent,
} from '../recipes/serve-state.js';

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
