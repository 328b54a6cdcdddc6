import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect, createServer as createTcpServer, type Socket } from 'node:net';
import { checkFleetResult, checkNodeResult, type FleetResult, type NodeResult } from '../../src/schema/envelopes.js';
import { formatTimestamp } from '../../src/schema/primitives.js';
import type { TerminalRecord } from '../../src/schema/terminal-record.js';
import { done, rec } from '../support/records.js';

export interface Hit {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

export interface FakeServer {
  readonly url: string;
  readonly hits: Hit[];
  close(): Promise<void>;
}

export type Handler = (req: IncomingMessage, res: ServerResponse, hit: Hit) => void;

/** A node:http server on 127.0.0.1:0 that records every request and lets `handler` answer. */
export async function startFake(handler: Handler): Promise<FakeServer> {
  const hits: Hit[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const hit = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      hits.push(hit);
      handler(req, res, hit);
    });
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    hits,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Sends `body` as JSON with a content-length. */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
}

export interface TrapProxy {
  readonly url: string;
  /** Connections the trap saw: must stay 0. */
  connections(): number;
  close(): Promise<void>;
}

/** A TCP listener that only counts connections: any proxy use would show up here. */
export async function startTrapProxy(): Promise<TrapProxy> {
  let count = 0;
  const server = createTcpServer((s) => {
    count++;
    s.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    connections: () => count,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

const NOW = Date.now();

/** A valid router NodeResult for `host` (one active, one terminal record). */
export function routerNodeResult(host: string): NodeResult {
  const records = [rec(host, 'router', 'a1', { at: NOW - 3_000 }), done(host, 'router', 't1', NOW - 125_000)];
  const r: NodeResult = {
    schema: 'svc-workloads/v1',
    expected_host: host,
    status: 'complete',
    collected_at: formatTimestamp(NOW),
    sources: [{ owner: 'router', status: 'complete', records, truncation: { returned: 2, omitted: 0 } }],
    truncation: { returned: 2, omitted: 0 },
  };
  if (!checkNodeResult.Check(r)) throw new Error('fixture is not a NodeResult');
  return r;
}

/** A valid controller NodeResult for `host`: all six sources, the router's with `routerNodeResult`'s records. */
export function controllerNodeResult(host: string): NodeResult {
  const r = routerNodeResult(host);
  const empty = (owner: 'controller' | 'benchmark' | 'media' | 'recipe' | 'manifest') => ({
    owner,
    status: 'complete' as const,
    records: [],
    truncation: { returned: 0, omitted: 0 },
  });
  const n: NodeResult = {
    ...r,
    sources: [
      r.sources[0]!,
      empty('controller'),
      empty('benchmark'),
      empty('media'),
      empty('recipe'),
      empty('manifest'),
    ],
  };
  if (!checkNodeResult.Check(n)) throw new Error('fixture is not a NodeResult');
  return n;
}

/** A fleet of `nodes`, plus an unreachable node `node-z` with no records. */
export function fleetResult(nodes: NodeResult[]): FleetResult {
  const unreachable: NodeResult = {
    schema: 'svc-workloads/v1',
    expected_host: 'node-z',
    status: 'unavailable',
    collected_at: formatTimestamp(NOW),
    sources: [],
    truncation: { returned: 0, omitted: null },
    condition: 'unreachable',
  };
  const all = [...nodes, unreachable];
  const returned = all.reduce((n, x) => n + x.truncation.returned, 0);
  const f: FleetResult = {
    schema: 'svc-workloads/v1',
    status: 'partial',
    collected_at: formatTimestamp(NOW),
    nodes: all,
    truncation: { returned, omitted: null },
  };
  if (!checkFleetResult.Check(f)) throw new Error('fixture is not a FleetResult');
  return f;
}

/** A valid terminal record; override any member. */
export function terminalRecord(over: Partial<TerminalRecord> = {}): TerminalRecord {
  return {
    request_id: 'req_0123456789abcdef0123456789abcdef',
    model: 'chat',
    route: 'chat.completions',
    outcome: 'success',
    status_code: 200,
    started_at: '2026-11-25T12:00:00.000Z',
    finished_at: '2026-11-25T12:00:01.000Z',
    latency_ms: 1000,
    readiness_check_ms: 1,
    admission_wait_ms: 0,
    upstream_duration_ms: 990,
    time_to_first_content_ms: 800,
    finish_reason: 'stop',
    usage: { prompt_tokens: 10, completion_tokens: 20, prompt_source: 'upstream', completion_source: 'upstream' },
    output_limit: { requested: 100, effective: 100, clamped: false },
    ...over,
  };
}

export const ROUTER_STATUS = {
  host: 'node-a',
  package_version: '0.1.0',
  routing_config_hash: 'a'.repeat(64),
  started_at: '2026-11-25T11:00:00.000Z',
  models: ['chat'],
};

export interface Relay {
  readonly url: string;
  /** Connections opened through the relay, and when the first opened / the last closed. */
  stats(): { connections: number; firstOpen: number; lastClose: number };
  close(): Promise<void>;
}

/**
 * A TCP relay in front of `targetUrl` that timestamps connections: the time from the CLI's
 * first connection to its last close is the diagnosis itself, without the process start-up.
 */
export async function startRelay(targetUrl: string): Promise<Relay> {
  const target = new URL(targetUrl);
  let connections = 0;
  let firstOpen = 0;
  let lastClose = 0;
  const sockets = new Set<Socket>();
  const server = createTcpServer((client) => {
    connections++;
    if (firstOpen === 0) firstOpen = Date.now();
    const upstream = connect(Number(target.port), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
    }
    client.pipe(upstream).pipe(client);
    client.on('close', () => {
      lastClose = Date.now();
      upstream.destroy();
    });
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    stats: () => ({ connections, firstOpen, lastClose }),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
