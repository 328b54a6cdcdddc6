import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import { ConfigError } from '../errors.js';
import { NO_CREDENTIAL } from '../http/route-schemas.js';

/**
 * The page's files, read once at start (a few tens of KiB). No static-file plugin: the set is
 * fixed, so there is no path from a URL to the file system at all.
 */
const PAGE_FILES: readonly [route: string, file: string, type: string][] = [
  ['/', 'index.html', 'text/html; charset=utf-8'],
  ['/app.js', 'app.js', 'text/javascript; charset=utf-8'],
  ['/link.js', 'link.js', 'text/javascript; charset=utf-8'],
  ['/workloads.js', 'workloads.js', 'text/javascript; charset=utf-8'],
  ['/requests.js', 'requests.js', 'text/javascript; charset=utf-8'],
  ['/fleet.js', 'fleet.js', 'text/javascript; charset=utf-8'],
  ['/telemetry.js', 'telemetry.js', 'text/javascript; charset=utf-8'],
  ['/router-panel.js', 'router-panel.js', 'text/javascript; charset=utf-8'],
  ['/render.js', 'render.js', 'text/javascript; charset=utf-8'],
  ['/style.css', 'style.css', 'text/css; charset=utf-8'],
];
const VENDOR_FILES: readonly [route: string, module: string, type: string][] = [
  ['/vendor/uPlot.iife.min.js', 'uplot/dist/uPlot.iife.min.js', 'text/javascript; charset=utf-8'],
  ['/vendor/uPlot.min.css', 'uplot/dist/uPlot.min.css', 'text/css; charset=utf-8'],
];

/**
 * Modules of this package the page runs as they are compiled (pure, no imports at run time):
 * one definition shared by the server and the page, never a copy (decision 0075).
 */
const SHARED_FILES: readonly [route: string, file: string][] = [['/shared/view-delta.js', 'view-delta.js']];

/**
 * Scripts, styles and the WebSocket only from this origin; no inline script, no framing, no
 * referrer (the page URL never carries anything, but nothing leaks it either), no caching.
 */
const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'referrer-policy': 'no-referrer',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'cache-control': 'no-store',
};

/** `web/` of the package: two levels above dist/dashboard, three above build/src/dashboard. */
function webDir(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  for (const up of ['../..', '../../..']) {
    const dir = join(here, up, 'web');
    if (existsSync(join(dir, 'index.html'))) return dir;
  }
  throw new ConfigError('dashboard page files (web/) are missing from the installation');
}

/** Registers GET routes for the page and uPlot. Thrown when: a file is missing (ConfigError). */
export function registerPageRoutes(app: FastifyInstance): void {
  const dir = webDir();
  const require = createRequire(import.meta.url);
  const files: [string, Buffer, string][] = [
    ...PAGE_FILES.map(([route, file, type]): [string, Buffer, string] => [route, readFileSync(join(dir, file)), type]),
    ...VENDOR_FILES.map(([route, mod, type]): [string, Buffer, string] => {
      try {
        return [route, readFileSync(require.resolve(mod)), type];
      } catch {
        throw new ConfigError('the uplot package is missing from the installation');
      }
    }),
    ...SHARED_FILES.map(([route, file]): [string, Buffer, string] => [
      route,
      // The source-map comment is dropped: the map is not served.
      Buffer.from(
        readFileSync(join(dirname(fileURLToPath(import.meta.url)), file), 'utf8').replace(
          /\n\/\/# sourceMappingURL=\S+\s*$/,
          '\n',
        ),
      ),
      'text/javascript; charset=utf-8',
    ]),
  ];
  for (const [route, body, type] of files) {
    const schema = {
      summary: route === '/' ? 'The dashboard page' : `A file of the page (${type.split(';')[0]})`,
      tags: ['dashboard'],
      security: NO_CREDENTIAL,
      response: { 200: { description: 'the file', content: { [type.split(';')[0]!]: { schema: Type.String() } } } },
    };
    app.get(route, { schema }, async (_req, reply) => reply.headers(SECURITY_HEADERS).type(type).send(body));
  }
}
