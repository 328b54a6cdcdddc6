import type { Quality } from '../schema/enums.js';

/**
 * Pure: what a recipe's serving state is, from its intent and the containers that claim it,
 * and how much that evidence is worth. Shared by the recipe owner actor (its records,
 * src/actors/recipe-mapping.ts) and `recipe status`, so both read a container the same way.
 */

/** Docker Engine container states the mapping knows. */
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
