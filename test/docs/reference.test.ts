import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PAGES, REGENERATE, generatedParts, renderPage, repoRoot } from '../../tools/gen-reference.js';

const root = repoRoot();
const read = (rel: string): string => readFileSync(join(root, rel), 'utf8');

describe('docs/reference generated pages', () => {
  const parts = generatedParts();
  for (const page of PAGES) {
    it(`docs/reference/${page} matches what the code generates now`, () => {
      const committed = read(join('docs', 'reference', page));
      const fresh = renderPage(page, committed, parts[page]);
      assert.ok(
        committed === fresh,
        `docs/reference/${page} is stale: the code it is generated from changed. Run \`${REGENERATE}\` and commit the result.`,
      );
    });
  }

  it('every generated page says near its top that it is generated, and by which command', () => {
    for (const page of PAGES) {
      const head = read(join('docs', 'reference', page))
        .split('\n')
        .slice(0, 4)
        .join('\n');
      assert.match(head, /generated/, page);
      assert.ok(head.includes(REGENERATE), page);
    }
  });

  it('a page whose markers went missing is an error, never silently kept', () => {
    assert.throws(
      () => renderPage('errors.md', '# Errors\n', parts['errors.md']),
      /markers of the generated part "error-registry" are missing/,
    );
  });

  it('the registry table names every error code with its status and exit code', () => {
    const table = parts['errors.md']['error-registry']!;
    assert.match(
      table,
      /\| `SVC_ERR_INVALID_INPUT` \| 400 \| `urn:svc-serving:problem:invalid-input` \| Invalid input \| 2 \|/,
    );
    assert.match(table, /\| `SVC_ERR_INTERNAL` \| 500 \| `urn:svc-serving:problem:internal` \| Internal error \| 1 \|/);
  });

  it('the configuration tables give defaults and bounds from the schemas', () => {
    const t = parts['config.md']['config-schemas']!;
    assert.match(t, /\| `buffer_size` \| integer \| `10000` \| >= 10; <= 1,000,000 \|/);
    assert.match(t, /\| `node_timeout_ms` \| integer \| `2000` \| >= 1; <= 60,000 \|/);
    assert.match(t, /\| `grants` \| array of one of "workloads:read", "requests:read"/);
  });

  it('the CLI reference holds every command with its own --help', () => {
    const t = parts['cli.md']['cli-commands']!;
    for (const cmd of [
      'router serve',
      'router diagnose',
      'fleet diagnose',
      'dashboard serve',
      'engine sim',
      'recipe status',
      'bench cancel',
      'up',
    ]) {
      assert.ok(t.includes(`### svc-serving ${cmd}\n`), cmd);
      assert.ok(t.includes(`Usage: svc-serving ${cmd}`), cmd);
    }
  });
});

describe('docs links', () => {
  it('relative links between the docs, the README and bench/README.md name files that exist', () => {
    const pages = [
      'README.md',
      'bench/README.md',
      'docs/api.md',
      'docs/operations.md',
      'docs/decisions/README.md',
      ...['errors', 'config', 'cli', 'router-http', 'control-http', 'nats', 'dashboard', 'engine-sim'].map(
        (p) => `docs/reference/${p}.md`,
      ),
    ];
    const broken: string[] = [];
    for (const page of pages) {
      const text = read(page);
      for (const m of text.matchAll(/\]\(([^)#\s]+)(#[^)\s]*)?\)/g)) {
        const target = m[1]!;
        if (/^[a-z]+:/.test(target)) continue;
        try {
          readFileSync(join(root, page, '..', target));
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'EISDIR') continue;
          broken.push(`${page}: ${target}`);
        }
      }
    }
    assert.deepEqual(broken, []);
  });
});
