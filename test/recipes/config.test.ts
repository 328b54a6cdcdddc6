import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigDirUnreadableError, loadManifestDir, loadRecipeDir } from '../../src/recipes/config-dir.js';
import {
  canonicalJson,
  loadManifestFile,
  loadRecipeFile,
  recipeDigest,
  recipeRevision,
} from '../../src/recipes/recipe-config.js';
import { RECIPE_CONFIG } from './fake-docker.js';

const VALID = [
  'name = "qwen-7b"',
  'image = "vllm/vllm-openai:v0.6.3"',
  'model = "Qwen/Qwen2.5-7B-Instruct"',
  'served_model_name = "qwen-7b"',
  'context_size = 32768',
  'port = 8001',
  'gpus = [0, 1]',
  'env = ["HF_TOKEN"]',
];
const tmp = (): string => mkdtempSync(join(tmpdir(), 'svc-recipes-'));
function file(text: string, dir = tmp(), name = 'r.toml'): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}
const without = (key: string): string[] => VALID.filter((l) => !l.startsWith(`${key} `));
const replaced = (key: string, line: string): string[] => [...without(key), line];
const message = (fn: () => unknown): string => {
  try {
    fn();
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('no error thrown');
};

describe('recipe TOML', () => {
  it('loads a valid recipe with set defaults and a sha256 digest', () => {
    const r = loadRecipeFile(file(VALID.slice(0, 6).join('\n')));
    assert.deepEqual([...r.recipe.gpus], []);
    assert.deepEqual([...r.recipe.env], []);
    assert.match(r.digest, /^sha256:[0-9a-f]{64}$/);
    assert.equal(recipeRevision(r.recipe, r.digest), r.digest.slice(7, 19));
    assert.ok(r.configAt > 0);
  });

  it('the digest is the canonical JSON digest: key order and set order do not matter, values do', () => {
    const a = loadRecipeFile(file(VALID.join('\n')));
    const b = loadRecipeFile(file([...VALID].reverse().join('\n').replace('[0, 1]', '[1, 0]')));
    assert.equal(a.digest, b.digest);
    const c = loadRecipeFile(file(replaced('context_size', 'context_size = 16384').join('\n')));
    assert.notEqual(a.digest, c.digest);
    assert.equal(recipeDigest(a.recipe), a.digest);
    assert.equal(canonicalJson({ b: 1, a: [{ d: 1, c: 2 }] }), '{"a":[{"c":2,"d":1}],"b":1}');
  });

  // [case, lines, the fixed message]
  const errors: [string, string[], string][] = [
    ['missing image', without('image'), 'recipe configuration: invalid member /image'],
    [
      'missing served_model_name',
      without('served_model_name'),
      'recipe configuration: invalid member /served_model_name',
    ],
    [
      'context_size not an integer',
      replaced('context_size', 'context_size = "canary-ctx-4412"'),
      'recipe configuration: invalid member /context_size',
    ],
    [
      'context_size zero',
      replaced('context_size', 'context_size = 0'),
      'recipe configuration: invalid member /context_size',
    ],
    ['port out of range', replaced('port', 'port = 70000'), 'recipe configuration: invalid member /port'],
    ['gpus repeated', replaced('gpus', 'gpus = [0, 0]'), 'recipe configuration: invalid member /gpus'],
    ['gpus not integers', replaced('gpus', 'gpus = ["canary-gpu-9"]'), 'recipe configuration: invalid member /gpus/0'],
    [
      'env not a name',
      replaced('env', 'env = ["HF_TOKEN=canary-secret-1"]'),
      'recipe configuration: invalid member /env/0',
    ],
    ['name with a dot', replaced('name', 'name = "canary.name"'), 'recipe configuration: invalid member /name'],
    ['name with a slash', replaced('name', 'name = "../canary"'), 'recipe configuration: invalid member /name'],
    ['image with a space', replaced('image', 'image = "canary image"'), 'recipe configuration: invalid member /image'],
    ['unknown key', [...VALID, 'canary_key = 1'], 'recipe configuration: invalid member /canary_key'],
    ['not TOML', ['name = = "canary"'], 'recipe configuration is not valid TOML'],
  ];
  for (const [name, lines, expected] of errors) {
    it(`refuses ${name} with a fixed message naming the key, never the value`, () => {
      const path = file(lines.join('\n'));
      const msg = message(() => loadRecipeFile(path));
      assert.equal(msg, expected);
      assert.ok(!/canary-(ctx|gpu|secret)|canary image|\.\.\/canary|canary\.name/.test(msg));
      assert.ok(!msg.includes(path));
    });
  }

  it('refuses a file over 64 KiB and a missing file without naming the path', () => {
    const big = file(VALID.join('\n') + '\n#' + 'x'.repeat(70_000));
    assert.equal(
      message(() => loadRecipeFile(big)),
      'recipe configuration file is larger than 64 KiB',
    );
    assert.equal(
      message(() => loadRecipeFile('/nonexistent/canary.toml')),
      'recipe configuration file is not readable',
    );
  });
});

describe('manifest TOML', () => {
  it('loads a bounded set of recipe names', () => {
    const m = loadManifestFile(join(RECIPE_CONFIG, 'manifests', 'node-a.toml'));
    assert.deepEqual([...m.manifest.recipes], ['qwen-7b', 'llama-8b']);
    assert.deepEqual([...m.manifest.absent], ['old-mistral']);
  });
  it('refuses overlap, repeats, too many entries and unknown keys with fixed messages', () => {
    const names = (n: number, p: string) => Array.from({ length: n }, (_, i) => `"${p}${i}"`).join(', ');
    const cases: [string, string][] = [
      [
        'name = "m"\nrecipes = ["a"]\nabsent = ["a"]',
        'manifest configuration: invalid member /absent (a recipe is listed in both recipes and absent)',
      ],
      ['name = "m"\nrecipes = ["a", "a"]', 'manifest configuration: invalid member /recipes'],
      [`name = "m"\nrecipes = [${names(65, 'r')}]`, 'manifest configuration: invalid member /recipes'],
      [
        `name = "m"\nrecipes = [${names(40, 'r')}]\nabsent = [${names(40, 'a')}]`,
        'manifest configuration: invalid member /absent (more than 64 entries in all)',
      ],
      ['name = "m"\nrecipes = ["a"]\npath = "/canary"', 'manifest configuration: invalid member /path'],
      ['name = "m"', 'manifest configuration: invalid member /recipes'],
    ];
    for (const [text, expected] of cases)
      assert.equal(
        message(() => loadManifestFile(file(text))),
        expected,
      );
  });
});

describe('recipe and manifest directories', () => {
  it('an empty directory has no entries and no problems', () => {
    const d = loadRecipeDir(tmp());
    assert.equal(d.entries.size, 0);
    assert.equal(d.problems, 0);
  });
  it('loads the test recipes by name, never by file name', () => {
    const d = loadRecipeDir(join(RECIPE_CONFIG, 'recipes'));
    assert.deepEqual([...d.entries.keys()].sort(), ['llama-8b', 'qwen-7b', 'whisper-small']);
    assert.equal(loadManifestDir(join(RECIPE_CONFIG, 'manifests')).entries.size, 1);
  });
  it('counts invalid files and duplicate names as problems, skips non-TOML and hidden files', () => {
    const dir = tmp();
    file(VALID.join('\n'), dir, 'a.toml');
    file(VALID.join('\n'), dir, 'b.toml'); // the same name again: ambiguous
    file(replaced('name', 'name = "other"').join('\n'), dir, 'c.toml');
    file('not toml = =', dir, 'd.toml');
    file('ignored', dir, 'notes.txt');
    file('ignored', dir, '.hidden.toml');
    mkdirSync(join(dir, 'sub.toml'));
    const d = loadRecipeDir(dir);
    assert.deepEqual([...d.entries.keys()], ['other']);
    assert.deepEqual([...d.duplicates], ['qwen-7b']);
    assert.equal(d.problems, 4, 'two duplicates, one invalid file, one directory');
  });
  it('caps the number of files read and counts the excess', () => {
    const dir = tmp();
    for (let i = 0; i < 5; i++) file(replaced('name', `name = "r${i}"`).join('\n'), dir, `r${i}.toml`);
    const d = loadRecipeDir(dir, 3);
    assert.equal(d.entries.size, 3);
    assert.equal(d.problems, 2);
  });
  it('an unreadable directory is an error of its own kind', () => {
    assert.throws(() => loadRecipeDir(join(tmp(), 'missing')), ConfigDirUnreadableError);
  });
});
