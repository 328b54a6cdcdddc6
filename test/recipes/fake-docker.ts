import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { randomBytes } from 'node:crypto';
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
  /** Answers a request first: `hang` never answers; otherwise a status and raw body. */
  readonly raw?: (path: string, method: string) => { status: number; body: string } | 'hang' | undefined;
  /** A start answers 204 but the container exits 1 at once (an engine that crashes). */
  readonly crashOnStart?: boolean;
}

/** A container as the fake holds it: its list entry and its inspect body, kept in step. */
export interface FakeContainer {
  readonly list: Json;
  readonly inspect: Json;
}

export interface FakeDocker {
  readonly socketPath: string;
  /** Requests, in order: a GET as its path, anything else as `METHOD path`. */
  readonly requests: string[];
  /** Bodies of `POST /containers/create`, as sent (env values included: the runtime gets them). */
  readonly createBodies: Json[];
  /** The runtime's containers now, by ID. */
  readonly containers: Map<string, FakeContainer>;
  close(): Promise<void>;
}

const read = (p: string): unknown => JSON.parse(readFileSync(p, 'utf8'));
const NEVER = '0001-01-01T00:00:00Z';

function images(): Json[] {
  return readdirSync(join(DOCKER_FIXTURES, 'images')).map((f) => read(join(DOCKER_FIXTURES, 'images', f)) as Json);
}
function findImage(key: string): Json | undefined {
  return images().find((x) => {
    const id = String(x['Id']);
    return (
      id === key ||
      id === `sha256:${key}` ||
      (key.length >= 12 && id.slice(7).startsWith(key)) ||
      (x['RepoTags'] as string[]).includes(key) ||
      (x['RepoDigests'] as string[]).includes(key)
    );
  });
}

/** The recorded containers: each list entry with its inspect body. */
function recordedContainers(): Map<string, FakeContainer> {
  const m = new Map<string, FakeContainer>();
  for (const list of read(join(DOCKER_FIXTURES, 'containers-json.json')) as Json[]) {
    const id = String(list['Id']);
    m.set(id, { list, inspect: read(join(DOCKER_FIXTURES, 'containers', `${id}.json`)) as Json });
  }
  return m;
}

/** Docker's `filters={"label":["k"|"k=v"]}` on the list. */
function labelFilter(list: Json[], query: URLSearchParams): Json[] {
  const f = query.get('filters');
  if (!f) return list;
  // Both filter encodings the Engine accepts: `["k=v"]` and the older `{"k=v": true}`.
  const given = (JSON.parse(f) as { label?: string[] | Record<string, boolean> }).label ?? [];
  const labels = Array.isArray(given) ? given : Object.keys(given);
  return list.filter((c) =>
    labels.every((l) => {
      const [k, v] = l.split('=');
      const have = ((c['Labels'] ?? {}) as Record<string, string>)[k!];
      return have !== undefined && (v === undefined || have === v);
    }),
  );
}

function setState(c: FakeContainer, status: 'running' | 'exited', exitCode = 0): void {
  const now = new Date().toISOString();
  const state = c.inspect['State'] as Json;
  Object.assign(state, {
    Status: status,
    Running: status === 'running',
    ...(status === 'running' ? { StartedAt: now, ExitCode: 0 } : { FinishedAt: now, ExitCode: exitCode }),
  });
  Object.assign(c.list, {
    State: status,
    Status: status === 'running' ? 'Up Less than a second' : `Exited (${exitCode}) Less than a second ago`,
  });
}

/** A container as `POST /containers/create` makes it: state `created`. */
function created(id: string, name: string, body: Json, image: Json): FakeContainer {
  const config = {
    Env: body['Env'] ?? [],
    Cmd: body['Cmd'] ?? null,
    Image: body['Image'],
    Labels: body['Labels'] ?? {},
    ExposedPorts: body['ExposedPorts'] ?? {},
  };
  const inspect: Json = {
    Id: id,
    Created: new Date().toISOString(),
    Path: '',
    Args: config.Cmd ?? [],
    Name: `/${name}`,
    Image: image['Id'],
    State: {
      Status: 'created',
      Running: false,
      Paused: false,
      Restarting: false,
      Dead: false,
      Pid: 0,
      ExitCode: 0,
      StartedAt: NEVER,
      FinishedAt: NEVER,
    },
    HostConfig: body['HostConfig'] ?? {},
    Config: config,
    NetworkSettings: { Ports: {} },
  };
  const list: Json = {
    Id: id,
    Names: [`/${name}`],
    Image: body['Image'],
    ImageID: image['Id'],
    Command: (config.Cmd as string[] | null)?.join(' ') ?? '',
    Created: Math.floor(Date.now() / 1000),
    Labels: config.Labels,
    State: 'created',
    Status: 'Created',
    HostConfig: { NetworkMode: 'bridge' },
  };
  return { list, inspect };
}

/**
 * A recorded Docker Engine API on a unix socket in a fresh temp dir, with or without a
 * `/v1.NN` prefix. Reads: `/_ping`, `/version`, `/containers/json`, `/containers/{id|name}/json`,
 * `/images/{id|tag|digest}/json`. Writes, as a small state machine over the recorded
 * containers: `POST /containers/create?name=` (201; 409 name taken; 404 image not present;
 * never pulls), `POST /containers/{id}/start` (204; 304 already running) and
 * `POST /containers/{id}/stop` (204; 304 not running). Every other write is 405.
 */
export async function startFakeDocker(opts: FakeDockerOptions = {}): Promise<FakeDocker> {
  const socketPath = join(mkdtempSync(join(tmpdir(), 'svc-docker-')), 'docker.sock');
  const requests: string[] = [];
  const createBodies: Json[] = [];
  const containers = recordedContainers();
  const t = (route: string, body: unknown): unknown => (opts.transform ? opts.transform(route, body) : body);
  const send = (res: ServerResponse, status: number, body?: unknown): void => {
    res.writeHead(status, {
      'content-type': 'application/json',
      'api-version': '1.43',
      server: 'Docker/24.0.7 (linux)',
    });
    res.end(body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body));
  };
  const find = (key: string): FakeContainer | undefined =>
    [...containers.values()].find(
      (c) => (key.length >= 12 && String(c.inspect['Id']).startsWith(key)) || c.inspect['Name'] === `/${key}`,
    );

  const write = (method: string, path: string, url: URL, body: string, res: ServerResponse): void => {
    if (method !== 'POST') return send(res, 405, { message: 'not served by the fake' });
    if (path === '/containers/create') {
      const spec = JSON.parse(body) as Json;
      createBodies.push(spec);
      const name = url.searchParams.get('name') ?? randomBytes(4).toString('hex');
      if (find(name)) return send(res, 409, { message: `Conflict. The container name "/${name}" is already in use` });
      const image = findImage(String(spec['Image']));
      if (!image) return send(res, 404, { message: `No such image: ${String(spec['Image'])}` });
      const id = randomBytes(32).toString('hex');
      containers.set(id, created(id, name, spec, image));
      return send(res, 201, { Id: id, Warnings: [] });
    }
    const m = /^\/containers\/([^/]+)\/(start|stop)$/.exec(path);
    if (!m) return send(res, 404, { message: 'page not found' });
    const c = find(decodeURIComponent(m[1]!));
    if (!c) return send(res, 404, { message: 'No such container' });
    const running = (c.inspect['State'] as Json)['Status'] === 'running';
    if (m[2] === 'start') {
      if (running) return send(res, 304);
      setState(c, 'running');
      if (opts.crashOnStart) setState(c, 'exited', 1);
      return send(res, 204);
    }
    if (!running) return send(res, 304);
    setState(c, 'exited', 0);
    return send(res, 204);
  };

  const handle = (req: IncomingMessage, res: ServerResponse, body: string): void => {
    const url = new URL(req.url ?? '/', 'http://docker');
    const path = url.pathname.replace(/^\/v1\.[0-9]+/, '');
    const method = req.method ?? 'GET';
    requests.push(method === 'GET' || method === 'HEAD' ? path : `${method} ${path}`);
    const raw = opts.raw?.(path, method);
    if (raw === 'hang') return;
    if (raw) return send(res, raw.status, raw.body);
    if (method !== 'GET' && method !== 'HEAD') return write(method, path, url, body, res);
    if (path === '/_ping') {
      res.writeHead(200, { 'content-type': 'text/plain', 'api-version': '1.43', ostype: 'linux' });
      return void res.end('OK');
    }
    if (path === '/version') return send(res, 200, t('version', read(join(DOCKER_FIXTURES, 'version.json'))));
    if (path === '/containers/json') {
      const list = [...containers.values()].map((c) => c.list);
      const all = url.searchParams.get('all');
      const shown = all === '1' || all === 'true' ? list : list.filter((c) => c['State'] === 'running');
      return send(res, 200, t('list', labelFilter(shown, url.searchParams)));
    }
    let m = /^\/containers\/([^/]+)\/json$/.exec(path);
    if (m) {
      const c = find(decodeURIComponent(m[1]!));
      return c ? send(res, 200, t('container', c.inspect)) : send(res, 404, { message: 'No such container' });
    }
    m = /^\/images\/(.+)\/json$/.exec(path);
    if (m) {
      const img = findImage(decodeURIComponent(m[1]!));
      return img ? send(res, 200, t('image', img)) : send(res, 404, { message: 'No such image' });
    }
    send(res, 404, { message: 'page not found' });
  };
  const server: Server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (d: string) => (body += d));
    req.on('end', () => handle(req, res, body));
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  return {
    socketPath,
    requests,
    createBodies,
    containers,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
