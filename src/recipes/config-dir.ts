import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigDirUnreadableError } from '../errors.js';
import { loadManifestFile, loadRecipeFile, type LoadedManifest, type LoadedRecipe } from './recipe-config.js';

/** Files one recipes or manifests directory may hold; more make the source partial. */
export const MAX_CONFIG_FILES = 256;

export interface ConfigDir<T> {
  /** Valid entries by name. */
  readonly entries: ReadonlyMap<string, T>;
  /** Names defined by more than one valid file: left out of `entries` (ambiguous). */
  readonly duplicates: ReadonlySet<string>;
  /** Files that could not be used (invalid, unreadable, a duplicate, or over the cap). */
  readonly problems: number;
}

export { ConfigDirUnreadableError } from '../errors.js';

/** `*.toml` entries of a directory (hidden files skipped), sorted, at most `cap` + the excess count. */
function tomlFiles(dir: string, cap: number): { files: string[]; excess: number } {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    throw new ConfigDirUnreadableError({ cause: err });
  }
  const toml = names.filter((n) => n.endsWith('.toml') && !n.startsWith('.')).sort();
  return { files: toml.slice(0, cap).map((n) => join(dir, n)), excess: Math.max(0, toml.length - cap) };
}

function loadDir<T>(dir: string, load: (path: string) => T, nameOf: (t: T) => string, cap: number): ConfigDir<T> {
  const { files, excess } = tomlFiles(dir, cap);
  const byName = new Map<string, T[]>();
  let problems = excess;
  for (const f of files) {
    let t: T;
    try {
      t = load(f);
    } catch {
      problems++;
      continue;
    }
    const list = byName.get(nameOf(t)) ?? [];
    list.push(t);
    byName.set(nameOf(t), list);
  }
  const entries = new Map<string, T>();
  const duplicates = new Set<string>();
  for (const [name, list] of byName) {
    if (list.length === 1) entries.set(name, list[0]!);
    else {
      duplicates.add(name);
      problems += list.length;
    }
  }
  return { entries, duplicates, problems };
}

/**
 * Reads a recipes directory: every valid `*.toml` recipe by name. Invalid files are counted,
 * never fatal. Thrown when: the directory cannot be listed (ConfigDirUnreadableError).
 */
export function loadRecipeDir(dir: string, cap = MAX_CONFIG_FILES): ConfigDir<LoadedRecipe> {
  return loadDir(dir, loadRecipeFile, (r) => r.recipe.name, cap);
}

/** Reads a manifests directory, as loadRecipeDir. */
export function loadManifestDir(dir: string, cap = MAX_CONFIG_FILES): ConfigDir<LoadedManifest> {
  return loadDir(dir, loadManifestFile, (m) => m.manifest.name, cap);
}
