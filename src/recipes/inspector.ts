import { type DockerEngineClient, RuntimeUnreachableError } from './docker-api.js';

/** Labels a managed container carries (set by `recipe apply`; read here). */
export const RECIPE_LABEL = 'svc.recipe';
export const RECIPE_DIGEST_LABEL = 'svc.recipe-digest';
export const MANIFEST_LABEL = 'svc.manifest';

/** Managed containers inspected per read; more make the source partial. */
export const MAX_MANAGED_CONTAINERS = 512;

/**
 * One managed container as the runtime describes it. `status` is the runtime's raw state:
 * internal only, mapped to a canonical state and never exposed. Env values are never kept.
 */
export interface ManagedContainer {
  readonly id: string;
  /** The `svc.recipe` label value. */
  readonly recipe: string;
  readonly recipeDigest: string | null;
  readonly status: string;
  /** Image ID (`sha256:<hex>`), or null when the runtime did not give a well-formed one. */
  readonly image: string | null;
  /** Creation time (epoch ms; NaN when unknown). */
  readonly createdAt: number;
  /** Latest of created, started and finished (epoch ms; NaN when unknown). */
  readonly changedAt: number;
  /** Names of the container's environment variables (values dropped at parse time). */
  readonly envNames: readonly string[];
  /** GPU indices requested from the runtime; `all` for `--gpus all`. */
  readonly gpus: readonly number[] | 'all';
}

export interface ImageView {
  readonly id: string;
  /** `repo@sha256:<hex>` entries. */
  readonly repoDigests: readonly string[];
}

const IMAGE_ID_RE = /^sha256:[0-9a-f]{64}$/;
const CONTAINER_ID_RE = /^[0-9a-f]{12,64}$/;

const obj = (v: unknown): Record<string, unknown> | undefined =>
  v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const time = (v: unknown): number => {
  const t = typeof v === 'string' ? Date.parse(v) : Number.NaN;
  return t > 0 ? t : Number.NaN; // Docker writes 0001-01-01T00:00:00Z for "never"
};
const malformed = (): RuntimeUnreachableError => new RuntimeUnreachableError('malformed');

function gpusOf(hostConfig: Record<string, unknown> | undefined): readonly number[] | 'all' {
  const reqs = hostConfig?.['DeviceRequests'];
  if (!Array.isArray(reqs)) return [];
  const out = new Set<number>();
  for (const r of reqs) {
    const o = obj(r);
    if (o?.['Count'] === -1) return 'all';
    const ids = o?.['DeviceIDs'];
    if (Array.isArray(ids))
      for (const id of ids) if (typeof id === 'string' && /^[0-9]{1,3}$/.test(id)) out.add(Number(id));
  }
  return [...out].sort((a, b) => a - b);
}

/** Pure: one `/containers/{id}/json` body -> a ManagedContainer, or undefined when not managed. */
export function parseContainerInspect(body: unknown): ManagedContainer | undefined {
  const o = obj(body);
  const id = str(o?.['Id']);
  if (!o || !id || !CONTAINER_ID_RE.test(id)) throw malformed();
  const config = obj(o['Config']);
  const labels = obj(config?.['Labels']) ?? {};
  const recipe = str(labels[RECIPE_LABEL]);
  if (recipe === undefined) return undefined;
  const state = obj(o['State']);
  const createdAt = time(o['Created']);
  const changed = [createdAt, time(state?.['StartedAt']), time(state?.['FinishedAt'])].filter((t) => !Number.isNaN(t));
  const env = Array.isArray(config?.['Env']) ? (config['Env'] as unknown[]) : [];
  const image = str(o['Image']);
  return {
    id,
    recipe,
    recipeDigest: str(labels[RECIPE_DIGEST_LABEL]) ?? null,
    status: str(state?.['Status']) ?? '',
    image: image && IMAGE_ID_RE.test(image) ? image : null,
    createdAt,
    changedAt: changed.length ? Math.max(...changed) : Number.NaN,
    envNames: env.flatMap((e) => (typeof e === 'string' && e.includes('=') ? [e.slice(0, e.indexOf('='))] : [])),
    gpus: gpusOf(obj(o['HostConfig'])),
  };
}

/**
 * Reads managed containers and images over the Docker Engine API. Every method is a GET.
 * Thrown when: the runtime is unreachable or its answer is malformed (RuntimeUnreachableError).
 */
export class ContainerInspector {
  constructor(private readonly api: DockerEngineClient) {}

  /** `/version`: proves the socket speaks the Engine API; returns its API version. */
  async apiVersion(): Promise<string> {
    const res = await this.api.getJson('/version');
    const v = str(obj(res.body)?.['ApiVersion']);
    if (res.status !== 200 || !v || !/^[0-9]{1,2}\.[0-9]{1,3}$/.test(v)) throw malformed();
    return v;
  }

  /** Every container (any state) labelled `svc.recipe`, inspected; `over` when more than the cap. */
  async managedContainers(): Promise<{ containers: ManagedContainer[]; over: boolean }> {
    const filters = encodeURIComponent(JSON.stringify({ label: [RECIPE_LABEL] }));
    const list = await this.api.getJson(`/containers/json?all=1&filters=${filters}`);
    if (list.status !== 200 || !Array.isArray(list.body)) throw malformed();
    const ids: string[] = [];
    for (const entry of list.body) {
      const o = obj(entry);
      const id = str(o?.['Id']);
      if (!o || !id || !CONTAINER_ID_RE.test(id)) throw malformed();
      // The runtime may ignore the filter (old APIs): check the label ourselves.
      if (str(obj(o['Labels'])?.[RECIPE_LABEL]) !== undefined) ids.push(id);
    }
    const containers: ManagedContainer[] = [];
    for (const id of ids.slice(0, MAX_MANAGED_CONTAINERS)) {
      const res = await this.api.getJson(`/containers/${id}/json`);
      if (res.status === 404) continue; // removed between list and inspect: it is gone
      const c = parseContainerInspect(res.body);
      if (c) containers.push(c);
    }
    return { containers, over: ids.length > MAX_MANAGED_CONTAINERS };
  }

  /** `/images/{ref}/json`: the image's ID and registry digests, or null when the runtime has none. */
  async image(ref: string): Promise<ImageView | null> {
    const path = ref.split('/').map(encodeURIComponent).join('/');
    const res = await this.api.getJson(`/images/${path}/json`);
    if (res.status === 404) return null;
    const o = obj(res.body);
    const id = str(o?.['Id']);
    if (!o || !id || !IMAGE_ID_RE.test(id)) throw malformed();
    const rd = Array.isArray(o['RepoDigests']) ? (o['RepoDigests'] as unknown[]) : [];
    return { id, repoDigests: rd.filter((d): d is string => typeof d === 'string' && /@sha256:[0-9a-f]{64}$/.test(d)) };
  }
}
