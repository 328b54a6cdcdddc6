/**
 * Writes the generated parts of docs/reference/ from the built code: the error registry
 * (src/errors.ts), the TypeBox configuration schemas (src/config/, src/auth/policy.ts,
 * src/recipes/recipe-config.ts) and the commander program (src/cli/program.ts). Each
 * generated part sits between two markers in its page; the prose around it is hand-written
 * and left as it is. `npm run docs:reference` runs this; test/docs/reference.test.ts fails
 * when a committed page differs from what the code generates now.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Kind, OptionalKind, type TSchema } from '@sinclair/typebox';
import type { Command } from 'commander';
import { ERRORS, ErrorCode, PROBLEM_CONTENT_TYPE, PROBLEM_TYPE_PREFIX } from '../src/errors.js';
import { RouterConfigSchema } from '../src/config/router-config.js';
import { NodeConfigSchema } from '../src/config/node-config.js';
import { FleetConfigSchema } from '../src/config/fleet-config.js';
import { PolicyFile } from '../src/auth/policy.js';
import { ManifestSchema, RecipeSchema } from '../src/recipes/recipe-config.js';
import { buildProgram } from '../src/cli/program.js';

/** The command that regenerates the pages, as every generated part names it. */
export const REGENERATE = 'npm run docs:reference';

/** The pages with generated parts, relative to docs/reference/. */
export const PAGES = ['errors.md', 'config.md', 'cli.md'] as const;
export type Page = (typeof PAGES)[number];

const begin = (name: string): string => `<!-- generated: ${name} (${REGENERATE}; do not edit by hand) -->`;
const end = (name: string): string => `<!-- end generated: ${name} -->`;

/** Markdown table cell: pipes escaped, newlines folded. */
const cell = (s: string): string => s.replace(/\|/g, '\\|').replace(/\s*\n\s*/g, ' ');
const code = (s: string): string => (s.includes('`') ? `\`\` ${s} \`\`` : `\`${s}\``);

function table(head: readonly string[], rows: readonly (readonly string[])[]): string {
  const lines = [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`];
  for (const r of rows) lines.push(`| ${r.map(cell).join(' | ')} |`);
  return lines.join('\n');
}

// ---------------------------------------------------------------- errors

function errorsTable(): string {
  const rows = Object.values(ErrorCode).map((c) => {
    const e = ERRORS[c];
    return [code(c), String(e.status), code(PROBLEM_TYPE_PREFIX + e.slug), e.title, String(e.exitCode)];
  });
  return [
    `Every problem answer is \`Content-Type: ${PROBLEM_CONTENT_TYPE}\` with the body \`{type, title, status}\` of its code's row.`,
    '',
    table(['code', 'HTTP status', 'problem `type`', '`title`', 'CLI exit code'], rows),
  ].join('\n');
}

// ---------------------------------------------------------------- configuration

type Json = Record<string, unknown>;

/** A schema's type in words: `integer`, `string`, `array of string`, `one of "a", "b"`. */
function typeOf(s: TSchema): string {
  const j = s as unknown as Json;
  if (Array.isArray(j.anyOf)) {
    const consts = (j.anyOf as Json[]).map((x) => x.const);
    if (consts.every((v) => typeof v === 'string')) return `one of ${consts.map((v) => `"${v as string}"`).join(', ')}`;
    return (j.anyOf as TSchema[]).map(typeOf).join(' or ');
  }
  if (j.type === 'array') return `array of ${typeOf(j.items as TSchema)}`;
  if (j.type === 'object') return 'table';
  return String(j.type ?? s[Kind]).toLowerCase();
}

/** The bounds the schema holds a value to, in words. */
function boundsOf(s: TSchema): string {
  const j = s as unknown as Json;
  const out: string[] = [];
  const num = (v: unknown): string => (typeof v === 'number' ? v.toLocaleString('en-US') : String(v));
  if (j.minimum !== undefined) out.push(`>= ${num(j.minimum)}`);
  if (j.exclusiveMinimum !== undefined) out.push(`> ${num(j.exclusiveMinimum)}`);
  if (j.maximum !== undefined) out.push(`<= ${num(j.maximum)}`);
  if (j.exclusiveMaximum !== undefined) out.push(`< ${num(j.exclusiveMaximum)}`);
  if (j.minLength !== undefined) out.push(`length >= ${num(j.minLength)}`);
  if (j.maxLength !== undefined) out.push(`length <= ${num(j.maxLength)}`);
  if (j.minItems !== undefined) out.push(`items >= ${num(j.minItems)}`);
  if (j.maxItems !== undefined) out.push(`items <= ${num(j.maxItems)}`);
  if (j.uniqueItems === true) out.push('no repeats');
  if (typeof j.pattern === 'string') out.push(`pattern ${code(j.pattern)}`);
  if (j.type === 'array' && j.items) {
    const inner = boundsOf(j.items as TSchema);
    if (inner) out.push(`each: ${inner}`);
  }
  return out.join('; ');
}

function defaultOf(s: TSchema, optional: boolean): string {
  const j = s as unknown as Json;
  if (j.default !== undefined) return code(JSON.stringify(j.default));
  return optional ? '(unset)' : '(required)';
}

/** One row per key of a TOML table (object schema); nested tables get their own section. */
function keysTable(obj: TSchema): string {
  const j = obj as unknown as Json;
  const props = (j.properties ?? {}) as Record<string, TSchema>;
  const required = new Set((j.required as string[] | undefined) ?? []);
  const described = Object.values(props).some((s) => typeof (s as unknown as Json).description === 'string');
  const rows = Object.entries(props).map(([key, s]) => {
    const optional = !required.has(key) || s[OptionalKind] === 'Optional';
    const row = [code(key), typeOf(s), defaultOf(s, optional), boundsOf(s)];
    if (described) row.push(String((s as unknown as Json).description ?? ''));
    return row;
  });
  const head = ['key', 'type', 'default', 'bounds', ...(described ? ['description'] : [])];
  const unknown = j.additionalProperties === false ? '\n\nAny other key is refused.' : '';
  return table(head, rows) + unknown;
}

interface FileSchema {
  readonly title: string;
  readonly intro: string;
  /** TOML tables of the file: `[server]`, `[[models]]`, or `(top level)`. */
  readonly tables: readonly { readonly heading: string; readonly schema: TSchema }[];
}

const sub = (s: TSchema, key: string): TSchema => ((s as unknown as Json).properties as Record<string, TSchema>)[key]!;
const items = (s: TSchema): TSchema => (s as unknown as Json).items as TSchema;

function configFiles(): FileSchema[] {
  return [
    {
      title: 'Router (`router serve --config`)',
      intro: 'Schema `RouterConfigSchema`, src/config/router-config.ts.',
      tables: [
        { heading: '`[server]`', schema: sub(RouterConfigSchema, 'server') },
        {
          heading: `\`[[models]]\` (${boundsOf(sub(RouterConfigSchema, 'models'))})`,
          schema: items(sub(RouterConfigSchema, 'models')),
        },
      ],
    },
    {
      title: 'Node controller (`controller serve --config`)',
      intro: 'Schema `NodeConfigSchema`, src/config/node-config.ts.',
      tables: [{ heading: '`[node]`', schema: sub(NodeConfigSchema, 'node') }],
    },
    {
      title: 'Fleet controller (`fleet serve --config`)',
      intro: 'Schema `FleetConfigSchema`, src/config/fleet-config.ts.',
      tables: [
        { heading: '`[fleet]`', schema: sub(FleetConfigSchema, 'fleet') },
        {
          heading: `\`[[nodes]]\` (${boundsOf(sub(FleetConfigSchema, 'nodes'))})`,
          schema: items(sub(FleetConfigSchema, 'nodes')),
        },
      ],
    },
    {
      title: 'Authorization policy (`authorization_policy`, `--workload-authorization-policy`)',
      intro: 'Schema `PolicyFile`, src/auth/policy.ts.',
      tables: [
        {
          heading: `\`[[clients]]\` (${boundsOf(sub(PolicyFile, 'clients'))})`,
          schema: items(sub(PolicyFile, 'clients')),
        },
      ],
    },
    {
      title: 'Recipe file (`*.toml` in `[node] recipes_dir`)',
      intro: 'Schema `RecipeSchema`, src/recipes/recipe-config.ts.',
      tables: [{ heading: '(top level)', schema: RecipeSchema }],
    },
    {
      title: 'Manifest file (`*.toml` in `[node] manifests_dir`)',
      intro: 'Schema `ManifestSchema`, src/recipes/recipe-config.ts.',
      tables: [{ heading: '(top level)', schema: ManifestSchema }],
    },
  ];
}

function configTables(): string {
  const parts: string[] = [];
  for (const f of configFiles()) {
    parts.push(`### ${f.title}`, '', f.intro, '');
    for (const t of f.tables) parts.push(`#### ${t.heading}`, '', keysTable(t.schema), '');
  }
  return parts.join('\n').trimEnd();
}

// ---------------------------------------------------------------- CLI

interface Walked {
  readonly path: string;
  readonly cmd: Command;
}

function walk(cmd: Command, path: string, out: Walked[]): Walked[] {
  for (const c of cmd.commands) {
    const p = `${path} ${c.name()}`;
    out.push({ path: p, cmd: c });
    walk(c, p, out);
  }
  return out;
}

/** The command's help exactly as `--help` prints it, at a fixed width and without colour. */
function helpOf(cmd: Command): string {
  let text = '';
  cmd.configureOutput({
    writeOut: (s) => {
      text += s;
    },
    writeErr: (s) => {
      text += s;
    },
    getOutHelpWidth: () => 100,
    getErrHelpWidth: () => 100,
    getOutHasColors: () => false,
    getErrHasColors: () => false,
  });
  cmd.outputHelp();
  return text.trimEnd();
}

const args = (c: Command): string =>
  c.registeredArguments
    .map((a) => (a.required ? `<${a.name()}${a.variadic ? '...' : ''}>` : `[${a.name()}${a.variadic ? '...' : ''}]`))
    .join(' ');

function cliReference(): string {
  const program = buildProgram();
  const all = walk(program, program.name(), []).filter((w) => w.cmd.name() !== 'help');
  const leaves = all.filter((w) => w.cmd.commands.length === 0);
  const anchor = (p: string): string =>
    p
      .toLowerCase()
      .replace(/[^a-z0-9 -]/g, '')
      .replace(/ /g, '-');
  const parts: string[] = [
    table(
      ['command', 'arguments', 'what it does'],
      leaves.map((w) => [
        `[${code(w.path)}](#${anchor(w.path)})`,
        args(w.cmd) ? code(args(w.cmd)) : '',
        w.cmd.description(),
      ]),
    ),
    '',
    `### ${program.name()}`,
    '',
    '```text',
    helpOf(program),
    '```',
  ];
  for (const w of leaves) parts.push('', `### ${w.path}`, '', '```text', helpOf(w.cmd), '```');
  return parts.join('\n');
}

// ---------------------------------------------------------------- pages

/** Every generated part, by page and name. */
export function generatedParts(): Record<Page, Record<string, string>> {
  return {
    'errors.md': { 'error-registry': errorsTable() },
    'config.md': { 'config-schemas': configTables() },
    'cli.md': { 'cli-commands': cliReference() },
  };
}

/**
 * The page with each generated part replaced by `parts`. Thrown when: a part's markers are
 * missing or out of order (the page would silently keep stale text).
 */
export function renderPage(page: string, text: string, parts: Record<string, string>): string {
  let out = text;
  for (const [name, body] of Object.entries(parts)) {
    const b = begin(name);
    const e = end(name);
    const i = out.indexOf(b);
    const k = out.indexOf(e);
    if (i < 0 || k < i)
      throw new Error(
        `docs/reference/${page}: the markers of the generated part "${name}" are missing (${b} ... ${e})`,
      );
    out = `${out.slice(0, i + b.length)}\n${body}\n${out.slice(k)}`;
  }
  return out;
}

/** The repository root, from this module's place in build/tools/ (or tools/ under a TS runner). */
export function repoRoot(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  return here.endsWith(join('build', 'tools')) ? join(here, '..', '..') : join(here, '..');
}

/** Rewrites the generated parts of every page in place; returns the pages that changed. */
export function writeReference(root = repoRoot()): Page[] {
  const parts = generatedParts();
  const changed: Page[] = [];
  for (const page of PAGES) {
    const file = join(root, 'docs', 'reference', page);
    const before = readFileSync(file, 'utf8');
    const after = renderPage(page, before, parts[page]);
    if (after !== before) {
      writeFileSync(file, after);
      changed.push(page);
    }
  }
  return changed;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const changed = writeReference();
  process.stdout.write(
    changed.length ? `docs/reference: rewrote ${changed.join(', ')}\n` : 'docs/reference: up to date\n',
  );
}
