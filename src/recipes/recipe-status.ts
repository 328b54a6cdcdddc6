import { KNOWN_CONTAINER_STATES, recipeQuality, serveState, type ServeState } from './serve-state.js';
import type { Quality } from '../schema/enums.js';
import type { ContainerInspector, ImageView, ManagedContainer } from './inspector.js';
import { recipeRevision, type LoadedRecipe } from './recipe-config.js';
import { scanSharedMemory, type SharedMemoryStatus, type ShmUse } from './shared-memory.js';

/** The recipe status observation of SPEC.md (member names: docs/api.md). */
export interface RecipeStatus {
  readonly recipe: string;
  readonly state: ServeState;
  readonly observation_quality: Quality;
  /** The one managed container runs and equals the immutable baseline (recipe digest and image). */
  readonly baseline_equal: boolean;
  readonly revision: string;
  readonly image_digest: string | null;
  readonly recipe_digest: string;
  readonly registry_digest: string | null;
  readonly context_size: number;
  readonly serve_mode: {
    readonly mode: 'gpu-exclusive' | 'cpu';
    readonly unresolved: string[];
    readonly gpu_owner: string | null;
  };
  /** This command asks no router: `absent` means no router management is known here. */
  readonly router: { readonly state: 'absent' };
  readonly shared_memory: SharedMemoryStatus;
}

export interface StatusEvidence {
  readonly loaded: LoadedRecipe;
  /** Every managed container of the runtime (other recipes' too, for GPU ownership). */
  readonly containers: readonly ManagedContainer[];
  /** The recipe's image reference as the runtime has it (null: not present). */
  readonly baselineImage: ImageView | null;
  /** The image of the recipe's one container (null: none, or not inspectable). */
  readonly containerImage: ImageView | null;
  readonly shm: SharedMemoryStatus;
}

const ALIVE: ReadonlySet<string> = new Set(['running', 'paused', 'restarting']);
const KNOWN: ReadonlySet<string> = new Set(KNOWN_CONTAINER_STATES);

/** How the recipe's containers use shared memory: alive, none alive, or not knowable. */
export function shmUse(own: readonly ManagedContainer[]): ShmUse {
  if (own.some((c) => ALIVE.has(c.status))) return 'running';
  if (own.some((c) => !KNOWN.has(c.status))) return 'unknown';
  return 'none';
}

function repoOf(ref: string): string {
  const noDigest = ref.split('@')[0]!;
  const colon = noDigest.lastIndexOf(':');
  return colon > noDigest.lastIndexOf('/') ? noDigest.slice(0, colon) : noDigest;
}

/** The `sha256:` part of the image's registry digest, preferring the recipe's repository. */
export function registryDigest(image: ImageView | null, ref: string): string | null {
  if (!image || image.repoDigests.length === 0) return null;
  const repo = repoOf(ref);
  const pick =
    image.repoDigests.find((d) => repoOf(d) === repo || repo.endsWith('/' + repoOf(d))) ?? image.repoDigests[0]!;
  return pick.slice(pick.indexOf('@') + 1);
}

const holds = (c: ManagedContainer, gpu: number): boolean => c.gpus === 'all' || c.gpus.includes(gpu);

/** Pure: the status observation from what was read. Raw runtime states never appear in it. */
export function buildRecipeStatus(e: StatusEvidence): RecipeStatus {
  const { recipe, digest } = e.loaded;
  const own = e.containers.filter((c) => c.recipe === recipe.name);
  const { state, why } = serveState('configured', own);
  const one = own.length === 1 ? own[0]! : undefined;
  const unresolved: string[] = [];
  if (own.length === 0) unresolved.push('container-missing');
  else if (why === 'ambiguous') unresolved.push('container-ambiguous');
  else if (why === 'unknown-state') unresolved.push('container-state-unsupported');
  else if (state !== 'running') unresolved.push('container-not-running');
  if (!e.baselineImage) unresolved.push('image-missing');
  if (one && one.recipeDigest !== digest) unresolved.push('recipe-digest-mismatch');
  if (one && e.baselineImage && one.image !== e.baselineImage.id) unresolved.push('image-mismatch');
  if (one) for (const n of recipe.env) if (!one.envNames.includes(n)) unresolved.push(`env:${n}`);
  const running = e.containers.filter((c) => c.status === 'running');
  let gpuOwner: string | null = null;
  for (const g of [...recipe.gpus].sort((a, b) => a - b)) {
    const holders = running.filter((c) => holds(c, g));
    if (gpuOwner === null && holders[0]) gpuOwner = holders[0].recipe;
    if (holders.some((c) => c.recipe !== recipe.name)) unresolved.push(`gpu:${g}`);
  }
  const baselineEqual =
    state === 'running' &&
    !!one &&
    one.recipeDigest === digest &&
    !!e.baselineImage &&
    one.image === e.baselineImage.id;
  const shownImage = one ? e.containerImage : e.baselineImage;
  return {
    recipe: recipe.name,
    state,
    observation_quality: recipeQuality({ configured: true, containerRunning: state === 'running' }),
    baseline_equal: baselineEqual,
    revision: recipeRevision(recipe, digest),
    image_digest: one ? one.image : (e.baselineImage?.id ?? null),
    recipe_digest: digest,
    registry_digest: registryDigest(shownImage, recipe.image),
    context_size: recipe.context_size,
    serve_mode: { mode: recipe.gpus.length > 0 ? 'gpu-exclusive' : 'cpu', unresolved, gpu_owner: gpuOwner },
    router: { state: 'absent' },
    shared_memory: e.shm,
  };
}

/**
 * Reads the runtime (GETs only) and the shm directory, then builds the status.
 * Thrown when: the runtime is unreachable or answers malformed data (RuntimeUnreachableError).
 */
export async function collectRecipeStatus(
  inspector: ContainerInspector,
  loaded: LoadedRecipe,
  shmDir: string,
): Promise<RecipeStatus> {
  await inspector.apiVersion();
  const { containers } = await inspector.managedContainers();
  const own = containers.filter((c) => c.recipe === loaded.recipe.name);
  const baselineImage = await inspector.image(loaded.recipe.image);
  const oneImage = own.length === 1 ? own[0]!.image : null;
  const containerImage =
    oneImage === null ? null : oneImage === baselineImage?.id ? baselineImage : await inspector.image(oneImage);
  const shm = scanSharedMemory(shmDir, loaded.recipe.name, shmUse(own));
  return buildRecipeStatus({ loaded, containers, baselineImage, containerImage, shm });
}
