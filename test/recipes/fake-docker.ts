import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The recorded Docker Engine API bodies (API 1.43 shape; see its README). */
export const DOCKER_FIXTURES = fileURLToPath(new URL('../../../test/fixtures/docker-api/', import.meta.url));
/** The test recipes and manifests. */
export const RECIPE_CONFIG = fileURLToPath(new URL('../../../test/recipes/config/', import.meta.url));

type Json = Record<string, unknown>;

export interface FakeDockerOptions {
  /** Rewrites a JSON body before it is sent (route: `list`, `container`, `image`, `version`). */
  readonly transform?: (route: string, body: unknown) => unknown;
  /** Answers a path first: `hang` never answers; otherwise a status and raw body. */
  readonly raw?: (path: string) => { status: number; body: string } | 'hang' | undefined;
}

export interface FakeDocker {
  readonly socketPath: string;
  /** Paths asked, in order (method is always GET: anything else is answered 405 and recorded). */
  readonly requests: string[];
  close(): Promise<void>;
}

const read = (p: string): unknown => JSON.parse(readFileSync(p, 'utf8'));

function containers(): Json[] {
  return readdirSync(join(DOCKER_FIXTURES, 'containers')).map((f) => read(join(DOCKER_FIXTURES, 'containers', f)) as Json);
}
function images(): Json[] {
  return readdirSync(join(DOCKER_FIXTURES, 'images')).map((f) => read(join(DOCKER_FIXTURES, 'images', f)) as Json);
}

/** Docker's `filters={"label":["k"|"k=v"]}` on the list. */
function labelFilter(list: Json[], query: URLSearchParams): Json[] {
  const f = query.get('filters');
  if (!f) return list;
  // Both filter encodings the Engine accepts: `["k=v"]` and the older `{"k=v": true}`.
  const given = (JSON.parse(f) as { label?: string[] | Record<string, boolean> }).label ?? [];
  const labels = Array.isArray(given) ? given : Object.keys(given);
  return list.filter((c) => labels.every((l) => {
    const [k, v] = l.split('=');
    const have = ((c['Labels'] ?? {}) as Record<string, string>)[k!];
    return have !== undefined && (v === undefined || have === v);
  }));
}

/**
 * A recorded Docker Engine API on a unix socket in a fresh temp dir: serves the fixture
 * bodies for `/_ping`, `/version`, `/containers/json`, `/containers/{id|name}/json` and
 * `/images/{id|tag|digest}/json`, with or without a `/v1.NN` prefix.
 */
export async function startFakeDocker(opts: FakeDockerOptions = {}): Promise<FakeDocker> {
  const socketPath = join(mkdtempSync(join(tmpdir(), 'svc-docker-')), 'docker.sock');
  const requests: string[] = [];
  const t = (route: string, body: unknown): unknown => (opts.transform ? opts.transform(route, body) : body);
  const send = (res: ServerResponse, status: number, body: unknown): void => {
    res.writeHead(status, { 'content-type': 'application/json', 'api-version': '1.43', server: 'Docker/24.0.7 (linux)' });
    res.end(typeof body === 'string' ? body : JSON.stringify(body));
  };
  const handle = (req: IncomingMessage, res: ServerResponse): void => {
    const url = new URL(req.url ?? '/', 'http://docker');
    const path = url.pathname.replace(/^\/v1\.[0-9]+/, '');
    requests.push(req.method === 'GET' || req.method === 'HEAD' ? path : `${req.method} ${path}`);
    const raw = opts.raw?.(path);
    if (raw === 'hang') return;
    if (raw) return send(res, raw.status, raw.body);
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, { message: 'read-only fake' });
    if (path === '/_ping') {
      res.writeHead(200, { 'content-type': 'text/plain', 'api-version': '1.43', 'ostype': 'linux' });
      return void res.end('OK');
    }
    if (path === '/version') return send(res, 200, t('version', read(join(DOCKER_FIXTURES, 'version.json'))));
    if (path === '/containers/json') {
      const list = read(join(DOCKER_FIXTURES, 'containers-json.json')) as Json[];
      const all = url.searchParams.get('all');
      const shown = all === '1' || all === 'true' ? list : list.filter((c) => c['State'] === 'running');
      return send(res, 200, t('list', labelFilter(shown, url.searchParams)));
    }
    let m = /^\/containers\/([^/]+)\/json$/.exec(path);
    if (m) {
      const key = decodeURIComponent(m[1]!);
      const c = containers().find((x) => (key.length >= 12 && String(x['Id']).startsWith(key)) || x['Name'] === `/${key}`);
      return c ? send(res, 200, t('container', c)) : send(res, 404, { message: 'No such container' });
    }
    m = /^\/images\/(.+)\/json$/.exec(path);
    if (m) {
      const key = decodeURIComponent(m[1]!);
      const img = images().find((x) => {
        const id = String(x['Id']);
        return id === key || id === `sha256:${key}` || (key.length >= 12 && id.slice(7).startsWith(key))
          || (x['RepoTags'] as string[]).includes(key) || (x['RepoDigests'] as string[]).includes(key);
      });
      return img ? send(res, 200, t('image', img)) : send(res, 404, { message: 'No such image' });
    }
    send(res, 404, { message: 'page not found' });
  };
  const server: Server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  return {
    socketPath,
    requests,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
