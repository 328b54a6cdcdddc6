import { createHash } from 'node:crypto';
import { statSync } from 'node:fs';
import { Type, type Static } from '@sinclair/typebox';
import { loadTomlConfig, throwProblem, type ConfigReport } from '../config/load-toml.js';
import { ConfigError } from '../errors.js';

/**
 * Recipes and manifests as TOML files (docs/api.md, "Recipes and manifests"). A recipe's
 * native identity is its `name` (never its file path); a manifest entry's is
 * `<manifest name>/<recipe name>`.
 */

/** Recipe and manifest names: lowercase letters, digits, `_` and `-`, 1-63, no dots. */
export const RECIPE_NAME_PATTERN = '^[a-z0-9][a-z0-9_-]{0,62}$';
const NAME_RE = new RegExp(RECIPE_NAME_PATTERN);
export const isRecipeName = (s: unknown): s is string => typeof s === 'string' && NAME_RE.test(s);

/** Entries (recipes + absent) one manifest may name. */
export const MAX_MANIFEST_ENTRIES = 64;
/** A recipe or manifest file larger than this is refused unread. */
export const MAX_CONFIG_BYTES = 64 * 1024;

const Name = Type.String({ pattern: RECIPE_NAME_PATTERN });
const EnvName = Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]{0,127}$' });

export const RecipeSchema = Type.Object(
  {
    name: Name,
    /** An image reference: `repo[:tag][@sha256:...]`. */
    image: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,511}$' }),
    model: Type.String({ minLength: 1, maxLength: 512, pattern: '^[^\\s]+$' }),
    served_model_name: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$' }),
    context_size: Type.Integer({ minimum: 1, maximum: 16_777_216 }),
    port: Type.Integer({ minimum: 1, maximum: 65_535 }),
    /** GPU indices the recipe claims (a set); empty: a CPU recipe. */
    gpus: Type.Array(Type.Integer({ minimum: 0, maximum: 255 }), { maxItems: 64, uniqueItems: true, default: [] }),
    /** Names of environment variables the container needs (names only, a set). */
    env: Type.Array(EnvName, { maxItems: 64, uniqueItems: true, default: [] }),
    revision: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$' })),
  },
  { additionalProperties: false },
);
export type Recipe = Static<typeof RecipeSchema>;

export const ManifestSchema = Type.Object(
  {
    name: Name,
    /** Recipes this node should serve. */
    recipes: Type.Array(Name, { maxItems: MAX_MANIFEST_ENTRIES, uniqueItems: true }),
    /** Recipes explicitly absent from this node (retired; must not serve). */
    absent: Type.Array(Name, { maxItems: MAX_MANIFEST_ENTRIES, uniqueItems: true, default: [] }),
  },
  { additionalProperties: false },
);
export type Manifest = Static<typeof ManifestSchema>;

export interface LoadedRecipe {
  readonly recipe: Recipe;
  /** `sha256:` + hex SHA-256 of the recipe's canonical JSON. */
  readonly digest: string;
  /** When the configuration was last written (file mtime, epoch ms). */
  readonly configAt: number;
}

export interface LoadedManifest {
  readonly manifest: Manifest;
  readonly configAt: number;
}

/** JSON with object keys sorted at every depth and no whitespace. */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const keys = Object.keys(v).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

/** The recipe digest: SHA-256 of the canonical JSON; `gpus` and `env` are sets (sorted first). */
export function recipeDigest(r: Recipe): string {
  const norm = { ...r, gpus: [...r.gpus].sort((a, b) => a - b), env: [...r.env].sort() };
  return 'sha256:' + createHash('sha256').update(canonicalJson(norm), 'utf8').digest('hex');
}

/** The recipe's revision: its `revision` key, else the first 12 hex digits of its digest. */
export function recipeRevision(r: Recipe, digest: string): string {
  return r.revision ?? digest.slice('sha256:'.length, 'sha256:'.length + 12);
}

function configTime(path: string, what: string): number {
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(path);
  } catch {
    throw new ConfigError(`${what} configuration file is not readable`);
  }
  if (!st.isFile()) throw new ConfigError(`${what} configuration file is not a regular file`);
  if (st.size > MAX_CONFIG_BYTES) throw new ConfigError(`${what} configuration file is larger than 64 KiB`);
  return st.mtimeMs;
}

/**
 * Reads one recipe file. Thrown when: unreadable, too large, not TOML or not a valid recipe
 * (ConfigError with a fixed message naming the key, e.g. `recipe configuration: invalid
 * member /context_size`; never the value or the path).
 */
export function loadRecipeFile(path: string): LoadedRecipe {
  const configAt = configTime(path, 'recipe');
  const { value } = loadTomlConfig(path, RecipeSchema, 'recipe');
  return { recipe: value, digest: recipeDigest(value), configAt };
}

/** Reads one manifest file. Thrown when: as loadRecipeFile, plus overlapping or too many entries. */
export function loadManifestFile(path: string): LoadedManifest {
  const configAt = configTime(path, 'manifest');
  const { value } = loadTomlConfig(path, ManifestSchema, 'manifest');
  manifestRules(value);
  return { manifest: value, configAt };
}

/**
 * A manifest's rules across members. Reported when: a recipe is both wanted and absent, more
 * than 64 entries in all (ConfigError to `report`: thrown, by default).
 */
export function manifestRules(value: Manifest, report: ConfigReport = throwProblem): void {
  const wanted = new Set(value.recipes);
  if (value.absent.some((n) => wanted.has(n)))
    report(
      new ConfigError('manifest configuration: invalid member /absent (a recipe is listed in both recipes and absent)'),
    );
  if (value.recipes.length + value.absent.length > MAX_MANIFEST_ENTRIES)
    report(new ConfigError('manifest configuration: invalid member /absent (more than 64 entries in all)'));
}
