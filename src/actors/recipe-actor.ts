import type { Logger } from 'pino';
import type { NodeConfig } from '../config/node-config.js';
import { ConfigDirUnreadableError, loadManifestDir, loadRecipeDir } from '../recipes/config-dir.js';
import { DockerEngineClient } from '../recipes/docker-api.js';
import { ContainerInspector, type ManagedContainer } from '../recipes/inspector.js';
import { formatTimestamp, parseTimestamp } from '../schema/primitives.js';
import type { WorkloadRecord } from '../schema/record.js';
import type { Bus } from '../streams/bus.js';
import { OwnerActor } from './owner-actor.js';
import { mapRecipeServe } from './recipe-mapping.js';
import type { ContainerSighting } from '../recipes/serve-state.js';
import type { OwnerReading } from './window.js';

/** Default path of the container runtime's Docker Engine API socket. */
export const DEFAULT_CONTAINER_SOCKET = '/var/run/docker.sock';

const UNAVAILABLE: OwnerReading = { status: 'unavailable', reason: 'inspection-error', records: [] };

function byRecipe(containers: readonly ManagedContainer[]): Map<string, ContainerSighting[]> {
  const m = new Map<string, ContainerSighting[]>();
  for (const c of containers) {
    const list = m.get(c.recipe) ?? [];
    list.push({ status: c.status, createdAt: c.createdAt, changedAt: c.changedAt });
    m.set(c.recipe, list);
  }
  return m;
}

/** Lists managed containers; undefined when the runtime cannot be inspected (any failure). */
async function inspect(
  inspector: ContainerInspector,
): Promise<{ containers: ManagedContainer[]; over: boolean } | undefined> {
  try {
    return await inspector.managedContainers();
  } catch {
    return undefined;
  }
}

/**
 * Loads an owner's directory and inspects the runtime; undefined when either cannot be read
 * (the whole source is then unavailable, never empty).
 */
async function observe<D>(
  load: () => D,
  inspector: ContainerInspector,
): Promise<{ dir: D; claims: Map<string, ContainerSighting[]>; over: boolean } | undefined> {
  let dir: D;
  try {
    dir = load();
  } catch (err) {
    if (err instanceof ConfigDirUnreadableError) return undefined;
    throw err;
  }
  const seen = await inspect(inspector);
  if (!seen) return undefined;
  return { dir, claims: byRecipe(seen.containers), over: seen.over };
}

function reading(records: WorkloadRecord[], problems: number, over: boolean): OwnerReading {
  if (problems > 0) return { status: 'partial', reason: 'malformed', records, countUnknown: true };
  if (over) return { status: 'partial', records, countUnknown: true };
  return { status: 'complete', records };
}

/**
 * The `recipe` owner's authority: the recipes directory plus the runtime's managed containers.
 * One record per configured recipe, and one per managed container whose recipe is not (or no
 * longer) configured. An empty directory with a reachable runtime is complete with no
 * records; an unreadable directory or runtime makes the whole source `unavailable`
 * (`inspection-error`), never empty and never `absent`.
 */
export async function readRecipeOwner(
  host: string,
  recipesDir: string,
  inspector: ContainerInspector,
  now: () => number = Date.now,
): Promise<OwnerReading> {
  const o = await observe(() => loadRecipeDir(recipesDir), inspector);
  if (!o) return UNAVAILABLE;
  const { dir, claims } = o;
  const at = now();
  const records: WorkloadRecord[] = [];
  for (const [name, r] of dir.entries) {
    records.push(
      mapRecipeServe(
        host,
        {
          owner: 'recipe',
          nativeId: name,
          intent: 'configured',
          configAt: r.configAt,
          containers: claims.get(name) ?? [],
        },
        at,
      ),
    );
  }
  for (const [name, containers] of claims) {
    // A name whose configuration is ambiguous is already counted as a problem (partial).
    if (dir.entries.has(name) || dir.duplicates.has(name)) continue;
    records.push(mapRecipeServe(host, { owner: 'recipe', nativeId: name, intent: 'absent', containers }, at));
  }
  return reading(records, dir.problems, o.over);
}

/**
 * The `manifest` owner's authority: the manifests directory plus the runtime. One record per
 * manifest entry (`<manifest>/<recipe>`): `recipes` entries are configured intent, `absent`
 * entries absent intent; containers are matched by their `svc.recipe` label.
 */
export async function readManifestOwner(
  host: string,
  manifestsDir: string,
  inspector: ContainerInspector,
  now: () => number = Date.now,
): Promise<OwnerReading> {
  const o = await observe(() => loadManifestDir(manifestsDir), inspector);
  if (!o) return UNAVAILABLE;
  const { dir, claims } = o;
  const at = now();
  const records: WorkloadRecord[] = [];
  for (const [mname, m] of dir.entries) {
    const entries = [
      ...m.manifest.recipes.map((r) => [r, 'configured'] as const),
      ...m.manifest.absent.map((r) => [r, 'absent'] as const),
    ];
    for (const [recipe, intent] of entries) {
      records.push(
        mapRecipeServe(
          host,
          {
            owner: 'manifest',
            nativeId: `${mname}/${recipe}`,
            intent,
            configAt: m.configAt,
            containers: claims.get(recipe) ?? [],
          },
          at,
        ),
      );
    }
  }
  return reading(records, dir.problems, o.over);
}

/**
 * Keeps a recipe-serve record's `updated_at` from going backwards. The mapping dates a record
 * by its evidence (configuration and container times), and that evidence can go away: a
 * removed container or recipe file leaves only older times. A record whose state or quality
 * changed is then dated by the observation that saw the change; one that did not change keeps
 * its date. (The fold keeps the newer of two observations of a record by `updated_at`: an
 * older date would hide the change behind the record it replaces.)
 */
export class UpdateTimes {
  private readonly last = new Map<string, { createdMs: number; updatedMs: number; what: string }>();

  apply(reading: OwnerReading): OwnerReading {
    if (reading.records.length === 0 && reading.status === 'unavailable') return reading;
    const seen = new Set<string>();
    const records = reading.records.map((r) => {
      seen.add(r.id);
      const what = `${r.state}|${r.phase}|${r.observation_quality}|${r.outcome ?? ''}`;
      const mapped = parseTimestamp(r.updated_at);
      const mappedCreated = parseTimestamp(r.created_at);
      const look = parseTimestamp(r.source_timestamp);
      const prev = this.last.get(r.id);
      let updatedMs: number;
      if (prev === undefined) updatedMs = mapped;
      // Unchanged, and dated only by the look itself (no evidence, or evidence from a clock
      // ahead capped at the look): no news, so it keeps its date instead of moving every poll.
      else if (prev.what === what && (mapped <= prev.updatedMs || mapped === look)) updatedMs = prev.updatedMs;
      else if (mapped >= prev.updatedMs) updatedMs = mapped;
      else updatedMs = Math.max(prev.updatedMs, look);
      // `created_at` never moves later (a capped or look-dated creation stays the first seen).
      const createdMs = prev === undefined ? mappedCreated : Math.min(prev.createdMs, mappedCreated, updatedMs);
      this.last.set(r.id, { createdMs, updatedMs, what });
      return updatedMs === mapped && createdMs === mappedCreated
        ? r
        : { ...r, created_at: formatTimestamp(createdMs), updated_at: formatTimestamp(updatedMs) };
    });
    for (const id of this.last.keys()) if (!seen.has(id)) this.last.delete(id);
    return { ...reading, records };
  }
}

export interface RecipeActors {
  stop(): Promise<void>;
}

/**
 * Starts the `recipe` actor when `[node] recipes_dir` is set and the `manifest` actor when
 * `manifests_dir` is set, both inspecting the runtime at `container_socket`. Without them the
 * owners publish nothing and their sources stay unavailable (`no-observation`).
 */
export function startRecipeActors(
  cfg: NodeConfig,
  bus: Bus,
  logger?: Logger,
  opts: { pollMs?: number; timeoutMs?: number } = {},
): RecipeActors {
  if (!cfg.recipesDir && !cfg.manifestsDir) return { stop: async () => {} };
  const api = new DockerEngineClient(
    cfg.containerSocket ?? DEFAULT_CONTAINER_SOCKET,
    opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {},
  );
  const inspector = new ContainerInspector(api);
  const common = {
    host: cfg.hostId,
    bus,
    staleAfterMs: cfg.staleAfterMs,
    pollMs: opts.pollMs ?? 1000,
    ...(logger ? { logger } : {}),
  };
  const actors: OwnerActor[] = [];
  const recipesDir = cfg.recipesDir;
  const manifestsDir = cfg.manifestsDir;
  if (recipesDir) {
    const times = new UpdateTimes();
    actors.push(
      new OwnerActor({
        ...common,
        owner: 'recipe',
        read: async () => times.apply(await readRecipeOwner(cfg.hostId, recipesDir, inspector)),
      }),
    );
  }
  if (manifestsDir) {
    const times = new UpdateTimes();
    actors.push(
      new OwnerActor({
        ...common,
        owner: 'manifest',
        read: async () => times.apply(await readManifestOwner(cfg.hostId, manifestsDir, inspector)),
      }),
    );
  }
  for (const a of actors) a.start();
  return {
    async stop() {
      for (const a of actors) a.stop();
      await api.close().catch(() => {});
    },
  };
}
