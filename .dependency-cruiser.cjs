/**
 * The layering DESIGN.md asks for ("Never: schema importing anything of ours but errors;
 * streams or actors importing a process folder or the CLI; a process folder importing the
 * CLI; import cycles"), checked by `npm run lint:layers` (part of `npm test`).
 *
 * The parser is swc, not tsc: dependency-cruiser 17 drives the TypeScript 5 API and this
 * project compiles with TypeScript 7 (native, no such API). swc also sees type-only imports,
 * so a cycle through types alone is still a cycle here.
 */

/** The folders that are processes (or their shared HTTP plumbing). */
const PROCESS = '^src/(router|controller|fleet|mcp|dashboard|engine-sim|http|up)/';

/**
 * The CLI files that start a server in this process (`router serve`, `serve`, `fleet serve`,
 * `dashboard serve`, `engine sim`, `up`), and the one module each of them starts. Every other
 * CLI file reads only over HTTP or NATS.
 */
const CLI_ENTRY_POINTS =
  '^src/cli/(router-commands|server-commands|fleet-commands|dashboard-command|engine-commands|up-command)\\.ts$';
const SERVER_STARTS =
  '^src/(router/router|controller/controller|fleet/fleet|dashboard/dashboard|engine-sim/engine-sim|up/local-node)\\.ts$';

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'No import cycles (type-only imports included): shared types go in their own small module.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'schema-imports-only-errors',
      comment: 'src/schema holds the schemas and pure rules: it imports nothing of ours but src/errors.ts.',
      severity: 'error',
      from: { path: '^src/schema/' },
      to: { path: '^src/', pathNot: ['^src/schema/', '^src/errors\\.ts$'] },
    },
    {
      name: 'streams-actors-not-processes-or-cli',
      comment: 'Buses, folds and owner actors never import a process folder or the CLI.',
      severity: 'error',
      from: { path: '^src/(streams|actors)/' },
      to: { path: [PROCESS, '^src/cli/'] },
    },
    {
      name: 'processes-not-cli',
      comment: 'No process folder imports the CLI.',
      severity: 'error',
      from: { path: PROCESS },
      to: { path: '^src/cli/' },
    },
    {
      name: 'processes-apart',
      comment:
        'A process folder (router, controller, fleet, dashboard, engine-sim) imports no other process folder: what two share lives in mcp/, http/, auth/ or below. Only up/ composes processes.',
      severity: 'error',
      from: { path: '^src/(router|controller|fleet|dashboard|engine-sim)/' },
      to: {
        path: '^src/(router|controller|fleet|dashboard|engine-sim|up)/',
        pathNot: '^src/$1/',
      },
    },
    {
      name: 'shared-plumbing-not-processes',
      comment: 'The shared plumbing (mcp/, http/) imports no process folder.',
      severity: 'error',
      from: { path: '^src/(mcp|http)/' },
      to: { path: '^src/(router|controller|fleet|dashboard|engine-sim|up)/' },
    },
    {
      name: 'cli-reads-over-http-nats',
      comment: 'The CLI reaches servers only over HTTP/NATS; only the serve/run entry points import a process folder.',
      severity: 'error',
      from: { path: '^src/cli/', pathNot: CLI_ENTRY_POINTS },
      to: { path: PROCESS },
    },
    {
      name: 'cli-entry-points-import-only-server-starts',
      comment: 'A serve/run entry point imports only the module that starts its server.',
      severity: 'error',
      from: { path: CLI_ENTRY_POINTS },
      to: { path: PROCESS, pathNot: SERVER_STARTS },
    },
  ],
  options: {
    parser: 'swc',
    includeOnly: '^(src|web)/',
    doNotFollow: { path: 'node_modules' },
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js'] },
  },
};
