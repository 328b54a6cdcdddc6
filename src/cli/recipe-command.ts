import { resolve } from 'node:path';
import type { Command } from 'commander';
import { DEFAULT_CONTAINER_SOCKET } from '../actors/recipe-actor.js';
import { serviceHome } from '../config/local-home.js';
import { RecipeFailure } from '../errors.js';
import { ConfigDirUnreadableError, loadRecipeDir } from '../recipes/config-dir.js';
import { DockerEngineClient, RuntimeUnreachableError } from '../recipes/docker-api.js';
import { ContainerInspector } from '../recipes/inspector.js';
import { isRecipeName } from '../recipes/recipe-config.js';
import { collectRecipeStatus, type RecipeStatus } from '../recipes/recipe-status.js';
import { DEFAULT_SHM_DIR } from '../recipes/shared-memory.js';
import { EXIT } from './run-server.js';

export { RECIPE_ERRORS } from '../errors.js';

interface StatusOptions {
  json?: boolean;
  recipesDir?: string;
  containerSocket?: string;
  shmDir?: string;
}

const yes = (b: boolean): string => (b ? 'yes' : 'no');
const list = (xs: readonly string[]): string => (xs.length ? xs.join(', ') : 'none');

/** Human-readable status (the same facts as `--json`). */
export function formatRecipeStatus(s: RecipeStatus): string {
  const row = (k: string, v: string | number): string => `  ${k.padEnd(18)} ${v}`;
  return (
    [
      `recipe ${s.recipe}`,
      row('state', `${s.state} (${s.observation_quality})`),
      row('baseline equal', yes(s.baseline_equal)),
      row('revision', s.revision),
      row('image digest', s.image_digest ?? 'unknown'),
      row('recipe digest', s.recipe_digest),
      row('registry digest', s.registry_digest ?? 'unknown'),
      row('context size', s.context_size),
      'serve mode',
      row('mode', s.serve_mode.mode),
      row('unresolved', list(s.serve_mode.unresolved)),
      row('gpu owner', s.serve_mode.gpu_owner ?? 'none'),
      'router',
      row('state', `${s.router.state} (no router is asked by this command)`),
      'host shared memory',
      row('available', yes(s.shared_memory.available)),
      row('files', list(s.shared_memory.files)),
      row('blocked reasons', list(s.shared_memory.blocked_reasons)),
      row('reclaimable bytes', s.shared_memory.reclaimable_bytes),
    ].join('\n') + '\n'
  );
}

async function recipeStatus(name: string, o: StatusOptions): Promise<RecipeStatus> {
  if (!isRecipeName(name)) throw new RecipeFailure('name', EXIT.usage);
  let dir: ReturnType<typeof loadRecipeDir>;
  try {
    dir = loadRecipeDir(resolve(o.recipesDir ?? resolve(serviceHome(), 'recipes')));
  } catch (err) {
    if (err instanceof ConfigDirUnreadableError) throw new RecipeFailure('dirUnreadable', EXIT.usage);
    throw err;
  }
  if (dir.duplicates.has(name)) throw new RecipeFailure('duplicate', EXIT.usage);
  const loaded = dir.entries.get(name);
  if (!loaded) throw new RecipeFailure('unknown', EXIT.usage);
  const api = new DockerEngineClient(resolve(o.containerSocket ?? DEFAULT_CONTAINER_SOCKET));
  try {
    return await collectRecipeStatus(new ContainerInspector(api), loaded, resolve(o.shmDir ?? DEFAULT_SHM_DIR));
  } catch (err) {
    if (err instanceof RuntimeUnreachableError) throw new RecipeFailure('runtime', EXIT.snapshot);
    throw err;
  } finally {
    await api.close().catch(() => {});
  }
}

/** `svc-serving recipe status <name> [--json] [--recipes-dir DIR] [--container-socket PATH] [--shm-dir DIR]`. */
export function registerRecipeCommand(program: Command): Command {
  const recipe = program
    .command('recipe')
    .description(
      'recipes: configured serving containers (status reads the runtime; apply and stop go through the node controller)',
    );
  recipe
    .command('status')
    .description(
      'the recipe status observation: baseline equality, digests, serve mode, router and shared memory (reads only; starts, stops or changes nothing)',
    )
    .argument('<name>', 'recipe name')
    .option('--json', 'print the status object as JSON')
    .option('--recipes-dir <dir>', 'directory of recipe TOML files (default: $SVC_SERVING_HOME/recipes)')
    .option(
      '--container-socket <path>',
      `Docker Engine API unix socket (default: ${DEFAULT_CONTAINER_SOCKET}; DOCKER_HOST is not read)`,
    )
    .option('--shm-dir <dir>', `host shared memory directory (default: ${DEFAULT_SHM_DIR})`)
    .action(async (name: string, o: StatusOptions) => {
      try {
        const s = await recipeStatus(name, o);
        process.stdout.write(o.json ? JSON.stringify(s) + '\n' : formatRecipeStatus(s));
      } catch (err) {
        const f = err instanceof RecipeFailure ? err : new RecipeFailure('failure', EXIT.failure);
        process.stderr.write(`svc-serving: error: ${f.message}\n`);
        process.exitCode = f.exitCode;
      }
    });
  return recipe;
}
