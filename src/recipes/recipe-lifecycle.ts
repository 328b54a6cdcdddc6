import { NotFoundError, UnavailableError } from '../errors.js';
import { ConfigDirUnreadableError, loadRecipeDir } from './config-dir.js';
import { MAX_REQUEST_BYTES, RuntimeUnreachableError, type DockerEngineClient } from './docker-api.js';
import {
  ContainerInspector,
  RECIPE_DIGEST_LABEL,
  RECIPE_LABEL,
  parseContainerInspect,
  type ManagedContainer,
} from './inspector.js';
import type { LoadedRecipe, Recipe } from './recipe-config.js';
import { envVar } from '../config/env-var.js';

/**
 * `recipe.apply` and `recipe.stop` against the Docker Engine API (docs/api.md, "Recipes and
 * manifests"). The decisions are pure functions; the class only reads, decides and writes.
 * Apply never pulls, never removes and never replaces a container: what it cannot do
 * unambiguously it refuses with a fixed reason.
 */

/** The one container apply creates for recipe R is named `svc-R`. */
export const containerName = (recipe: string): string => `svc-${recipe}`;
/** Seconds the runtime waits for a stopped engine to exit before it kills it (`stop?t=`). */
export const STOP_GRACE_S = 10;
/** Header and body timeout of create and start (ms): GPU runtime hooks can take seconds. */
export const WRITE_TIMEOUT_MS = 30_000;
/** Header timeout of a stop (ms): the grace period plus the client's margin. */
export const STOP_TIMEOUT_MS = STOP_GRACE_S * 1000 + 5_000;
/** Where the recipe's port is published on the host: loopback only (the node's router is local). */
export const PUBLISH_HOST_IP = '127.0.0.1';

/** Why apply refused before changing anything (outcome `rejected`). */
export type RefusalReason =
  | 'recipe-changed'
  | 'container-ambiguous'
  | 'container-digest-mismatch'
  | 'container-state-unsupported'
  | 'gpu-busy'
  | 'image-missing'
  | 'env-unusable'
  | 'container-name-taken';
/** Why an operation failed (outcome `error`, or `unknown` once a write may have acted). */
export type FailureReason =
  | 'runtime-unreachable'
  | 'runtime-refused'
  | 'container-not-running'
  | 'container-still-running';
export type RecipeReason = RefusalReason | FailureReason;
export type RecipeAction = 'created' | 'started' | 'already-running' | 'stopped' | 'none-running';

export type RecipeResult =
  | { readonly ok: true; readonly action: RecipeAction; readonly containers: number }
  | { readonly ok: false; readonly reason: RecipeReason; readonly outcome: 'rejected' | 'error' | 'unknown' };

export type ApplyDecision =
  | { readonly do: 'nothing' }
  | { readonly do: 'start'; readonly id: string }
  | { readonly do: 'create' }
  | { readonly do: 'refuse'; readonly reason: RefusalReason };

/** States a container of the recipe may be started from. */
const STARTABLE: ReadonlySet<string> = new Set(['created', 'exited']);
/** States `docker stop` acts on. */
const ALIVE: ReadonlySet<string> = new Set(['running', 'paused', 'restarting']);

const refused = (reason: RefusalReason): RecipeResult => ({ ok: false, reason, outcome: 'rejected' });
const failed = (reason: FailureReason, outcome: 'error' | 'unknown'): RecipeResult => ({ ok: false, reason, outcome });

/**
 * Pure: what apply does given every managed container. One container of the recipe with the
 * recipe's digest: running -> nothing, created/exited -> start it; none -> create one. Two or
 * more, another digest, another state, or a GPU of the recipe held by another recipe's
 * running container -> refuse.
 */
export function decideApply(loaded: LoadedRecipe, containers: readonly ManagedContainer[]): ApplyDecision {
  const name = loaded.recipe.name;
  const own = containers.filter((c) => c.recipe === name);
  if (own.length > 1) return { do: 'refuse', reason: 'container-ambiguous' };
  const one = own[0];
  if (one && one.recipeDigest !== loaded.digest) return { do: 'refuse', reason: 'container-digest-mismatch' };
  if (one?.status === 'running') return { do: 'nothing' };
  if (one && !STARTABLE.has(one.status)) return { do: 'refuse', reason: 'container-state-unsupported' };
  const others = containers.filter((c) => c.recipe !== name && c.status === 'running');
  if (loaded.recipe.gpus.some((g) => others.some((c) => c.gpus === 'all' || c.gpus.includes(g))))
    return { do: 'refuse', reason: 'gpu-busy' };
  return one ? { do: 'start', id: one.id } : { do: 'create' };
}

/** Pure: the IDs of the recipe's containers that a stop acts on (running, paused, restarting). */
export function decideStop(name: string, containers: readonly ManagedContainer[]): string[] {
  return containers.filter((c) => c.recipe === name && ALIVE.has(c.status)).map((c) => c.id);
}

/** Pure: the engine's command line (vLLM's OpenAI server arguments; the image's entrypoint runs them). */
export function engineArgs(r: Recipe): string[] {
  return [
    '--model',
    r.model,
    '--served-model-name',
    r.served_model_name,
    '--max-model-len',
    String(r.context_size),
    '--host',
    '0.0.0.0',
    '--port',
    String(r.port),
  ];
}

/**
 * Pure: the `POST /containers/create` body. `env` holds the values of the recipe's env names,
 * read from the controller's environment at apply time; the body is sent and dropped.
 */
export function createBody(loaded: LoadedRecipe, env: Readonly<Record<string, string>>): Record<string, unknown> {
  const r = loaded.recipe;
  const port = `${r.port}/tcp`;
  const gpus = [...r.gpus].sort((a, b) => a - b).map(String);
  return {
    Image: r.image,
    Cmd: engineArgs(r),
    Env: [...r.env].sort().map((n) => `${n}=${envVar(env, n) ?? ''}`),
    Labels: { [RECIPE_LABEL]: r.name, [RECIPE_DIGEST_LABEL]: loaded.digest },
    ExposedPorts: { [port]: {} },
    HostConfig: {
      PortBindings: { [port]: [{ HostIp: PUBLISH_HOST_IP, HostPort: String(r.port) }] },
      RestartPolicy: { Name: 'no' },
      ...(gpus.length ? { DeviceRequests: [{ Driver: '', Count: 0, DeviceIDs: gpus, Capabilities: [['gpu']] }] } : {}),
    },
  };
}

export interface LifecycleHooks {
  /** Called when the first write is about to be sent (`submitting`) and when verifying (`running`). */
  phase(p: 'submitting' | 'running'): void;
  readonly signal: AbortSignal;
}

const CONTAINER_ID_RE = /^[0-9a-f]{64}$/;

/**
 * The recipe lifecycle of one node: its recipes directory, its runtime, and the environment
 * the recipes' env values come from. Results are data: refusals and runtime failures come
 * back as `{ok: false, reason}` with a fixed reason, never as runtime text.
 */
export class RecipeLifecycle {
  private readonly inspector: ContainerInspector;

  constructor(
    private readonly recipesDir: string,
    private readonly api: DockerEngineClient,
    private readonly env: NodeJS.ProcessEnv,
  ) {
    this.inspector = new ContainerInspector(api);
  }

  /**
   * The recipe a plan names. Thrown when: the recipes directory cannot be read
   * (UnavailableError); no single valid recipe file has the name (NotFoundError).
   */
  resolve(name: string): LoadedRecipe {
    let found: LoadedRecipe | undefined;
    try {
      found = loadRecipeDir(this.recipesDir).entries.get(name);
    } catch (err) {
      if (err instanceof ConfigDirUnreadableError) throw new UnavailableError();
      throw err;
    }
    if (!found) throw new NotFoundError();
    return found;
  }

  /** Makes the recipe run exactly as planned (`plannedDigest`), or says why not. */
  async apply(name: string, plannedDigest: string, hooks: LifecycleHooks): Promise<RecipeResult> {
    return this.guard(async (wrote) => {
      const loaded = this.current(name);
      if (!loaded || loaded.digest !== plannedDigest) return refused('recipe-changed');
      await this.inspector.apiVersion();
      const { containers, over } = await this.inspector.managedContainers();
      if (over) return refused('container-ambiguous');
      const d = decideApply(loaded, containers);
      if (d.do === 'refuse') return refused(d.reason);
      if (d.do === 'nothing') return { ok: true, action: 'already-running', containers: 1 };
      let id: string;
      if (d.do === 'create') {
        if (!(await this.inspector.image(loaded.recipe.image))) return refused('image-missing');
        const env = this.envValues(loaded.recipe);
        if (!env) return refused('env-unusable');
        const body = createBody(loaded, env);
        if (Buffer.byteLength(JSON.stringify(body)) > MAX_REQUEST_BYTES) return refused('env-unusable');
        hooks.signal.throwIfAborted();
        hooks.phase('submitting');
        wrote();
        const res = await this.api.post(`/containers/create?name=${encodeURIComponent(containerName(name))}`, body, {
          timeoutMs: WRITE_TIMEOUT_MS,
          signal: hooks.signal,
        });
        if (res.status === 409) return refused('container-name-taken');
        if (res.status === 404) return refused('image-missing');
        if (res.status !== 201) return failed('runtime-refused', 'error');
        const created = (res.body as { Id?: unknown } | null)?.Id;
        if (typeof created !== 'string' || !CONTAINER_ID_RE.test(created))
          throw new RuntimeUnreachableError('malformed');
        id = created;
      } else {
        hooks.signal.throwIfAborted();
        hooks.phase('submitting');
        wrote();
        id = d.id;
      }
      const started = await this.api.post(`/containers/${id}/start`, undefined, {
        timeoutMs: WRITE_TIMEOUT_MS,
        signal: hooks.signal,
      });
      if (started.status !== 204 && started.status !== 304) return failed('runtime-refused', 'error');
      hooks.phase('running');
      const seen = await this.api.getJson(`/containers/${id}/json`);
      if (seen.status !== 200 || parseContainerInspect(seen.body)?.status !== 'running')
        return failed('container-not-running', 'error');
      return { ok: true, action: d.do === 'create' ? 'created' : 'started', containers: 1 };
    });
  }

  /** Stops every running container of the recipe (none: success, nothing done); removes nothing. */
  async stop(name: string, hooks: LifecycleHooks): Promise<RecipeResult> {
    return this.guard(async (wrote) => {
      await this.inspector.apiVersion();
      const ids = decideStop(name, (await this.inspector.managedContainers()).containers);
      if (ids.length === 0) return { ok: true, action: 'none-running', containers: 0 };
      hooks.phase('submitting');
      wrote();
      for (const id of ids) {
        hooks.signal.throwIfAborted();
        const res = await this.api.post(`/containers/${id}/stop?t=${STOP_GRACE_S}`, undefined, {
          timeoutMs: STOP_TIMEOUT_MS,
          signal: hooks.signal,
        });
        // 304: already stopped; 404: removed meanwhile. Either way it no longer runs.
        if (res.status !== 204 && res.status !== 304 && res.status !== 404) return failed('runtime-refused', 'error');
      }
      hooks.phase('running');
      if (decideStop(name, (await this.inspector.managedContainers()).containers).length > 0)
        return failed('container-still-running', 'error');
      return { ok: true, action: 'stopped', containers: ids.length };
    });
  }

  async close(): Promise<void> {
    await this.api.close().catch(() => {});
  }

  /** The recipe as configured now; undefined when it is gone, ambiguous or unreadable. */
  private current(name: string): LoadedRecipe | undefined {
    try {
      return loadRecipeDir(this.recipesDir).entries.get(name);
    } catch {
      return undefined;
    }
  }

  /** The values of the recipe's env names; undefined when one is unset. */
  private envValues(r: Recipe): Record<string, string> | undefined {
    const out: Record<string, string> = Object.create(null) as Record<string, string>;
    for (const n of r.env) {
      const v = envVar(this.env, n);
      if (v === undefined) return undefined;
      out[n] = v;
    }
    return out;
  }

  /** A runtime that cannot be asked is a fixed failure; once a write was sent its effect is unknown. */
  private async guard(run: (wrote: () => void) => Promise<RecipeResult>): Promise<RecipeResult> {
    let sent = false;
    try {
      return await run(() => {
        sent = true;
      });
    } catch (err) {
      if (err instanceof RuntimeUnreachableError) return failed('runtime-unreachable', sent ? 'unknown' : 'error');
      throw err;
    }
  }
}
