/**
 * The floor for any Node relay: node:http in, one undici Pool out. Forwards method, path,
 * body and content-type to the upstream and pipes the status, content-type (and length) and
 * body back, chunk by chunk with backpressure. No auth, no parsing, no records.
 *
 * Run: node build/bench/bare-relay.js http://127.0.0.1:PORT
 * Prints one JSON line {"msg":"listening","url":...} on stdout when ready; SIGTERM stops it.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { Pool, type Dispatcher } from 'undici';

const upstream = process.argv[2];
if (!upstream || !/^https?:\/\//.test(upstream)) {
  process.stderr.write('usage: bare-relay.js http://HOST:PORT\n');
  process.exit(2);
}
// Same pool shape as the router's (max_concurrency 256 + 2 connections, no pipelining).
const pool = new Pool(upstream, { connections: 258, pipelining: 1, keepAliveTimeout: 30_000 });

function relay(req: IncomingMessage, res: ServerResponse, body: Buffer | null): void {
  const headers: Record<string, string> = {};
  const ct = req.headers['content-type'];
  if (typeof ct === 'string') headers['content-type'] = ct;
  pool.request({ method: (req.method ?? 'GET') as Dispatcher.HttpMethod, path: req.url ?? '/', headers, body }).then(
    (up) => {
      const out: Record<string, string> = {};
      const uct = up.headers['content-type'];
      if (typeof uct === 'string') out['content-type'] = uct;
      const ucl = up.headers['content-length'];
      if (typeof ucl === 'string') out['content-length'] = ucl;
      res.writeHead(up.statusCode, out);
      const src = up.body;
      src.on('data', (c: Buffer) => {
        if (!res.write(c)) {
          src.pause();
          res.once('drain', () => src.resume());
        }
      });
      src.on('end', () => res.end());
      src.on('error', () => res.destroy());
      res.on('close', () => {
        if (!res.writableFinished) src.destroy();
      });
    },
    () => {
      if (!res.headersSent) {
        res.statusCode = 502;
        res.end();
      } else res.destroy();
    },
  );
}

const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () =>
    relay(req, res, chunks.length === 0 ? null : chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)),
  );
  req.on('error', () => res.destroy());
});

server.listen(0, '127.0.0.1', () => {
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  process.stdout.write(JSON.stringify({ msg: 'listening', url: `http://127.0.0.1:${port}` }) + '\n');
});

const stop = (): void => {
  server.close();
  server.closeAllConnections();
  void pool.close().finally(() => process.exit(0));
  setTimeout(() => process.exit(0), 2_000).unref();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
