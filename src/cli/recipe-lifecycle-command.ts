import type { Command } from 'commander';
import { isRecipeName } from '../recipes/recipe-config.js';
import {
  appliedId,
  confirmOptions,
  lifecycleAction,
  lifecycleOptions,
  type LifecycleFlags,
  type StatusFailures,
  whileInterruptible,
} from './lifecycle-client.js';
import { RECIPE_ERRORS } from './recipe-command.js';
import { EXIT } from './run-server.js';

/** What the controller says at plan time, in fixed words (the name is never echoed). */
export const RECIPE_PLAN_FAILURES: StatusFailures = {
  400: 'the controller refused the command (HTTP 400): it may not serve recipe commands',
  404: 'the controller knows no single valid recipe of this name (or does not serve lifecycle commands)',
  503: 'the controller has no recipes directory configured, or cannot read it now (HTTP 503)',
};

/** The operation's fixed reasons and actions (docs/api.md), as sentences. */
export const RECIPE_REASONS: Readonly<Record<string, string>> = {
  'recipe-changed': 'the recipe changed, vanished or became unreadable after the plan; plan again',
  'container-ambiguous': 'several containers claim this recipe; nothing was changed',
  'container-digest-mismatch':
    'a container of this recipe was made from another version of it; nothing was changed (remove it to replace it)',
  'container-state-unsupported':
    "the recipe's container is paused, restarting, dead or being removed; nothing was changed",
  'gpu-busy': "another recipe's running container holds one of this recipe's GPUs; nothing was changed",
  'image-missing': "the recipe's image is not on this node; nothing is pulled",
  'env-unusable': "an environment variable the recipe names is not set in the controller's environment",
  'container-name-taken':
    "a container that is not this recipe's already has its container name (svc-<recipe>); nothing was changed",
  'runtime-unreachable': 'the container runtime is not reachable, or did not answer as a Docker Engine API',
  'runtime-refused': 'the container runtime refused the request',
  'container-not-running': 'the container was started but is not running (the engine exited)',
  'container-still-running': 'a container of the recipe still runs after the stop',
};
const ACTIONS: Readonly<Record<string, string>> = {
  created: 'created and started its container',
  started: 'started its existing container',
  'already-running': 'its container already runs: nothing to do',
  stopped: 'stopped its running container(s)',
  'none-running': 'no container of it was running: nothing to do',
};

/** One line for a terminal operation status (fixed words only). */
export function describeOutcome(verb: 'apply' | 'stop', name: string, status: Record<string, unknown>): string {
  const state = String(status['state']);
  const s = (status['summary'] ?? {}) as { action?: unknown; reason?: unknown };
  if (state === 'succeeded') return `recipe ${name}: ${verb} succeeded: ${ACTIONS[String(s.action)] ?? 'done'}`;
  if (state === 'interrupted')
    return `recipe ${name}: ${verb} interrupted: the controller stopped first; what the runtime did is unknown`;
  const why = RECIPE_REASONS[String(s.reason)] ?? 'unexpected failure in the controller';
  const unknown = status['outcome'] === 'unknown' ? ' (after a request was sent: what the runtime did is unknown)' : '';
  return `recipe ${name}: ${verb} ${state === 'failed' ? 'failed' : state}: ${why}${unknown}`;
}

const helpAfter = (verb: 'apply' | 'stop'): string => `
Runs through the node controller's lifecycle routes: plan (shown on stderr), confirmation
(asked on a terminal, or --yes), apply, then the operation is followed to its end.
Exit codes: 0 succeeded; 1 the operation failed or was interrupted; 2 usage, bad name or
confirmation missing; 4 the controller could not be asked or refused (credential, unknown
recipe, no recipes directory); 130 interrupted (Ctrl-C: at the prompt nothing starts; while
following, the operation keeps running).
Example:
  export SVC_LIFECYCLE_TOKEN=...   # a credential with the node-admin:lifecycle grant
  svc-serving recipe ${verb} qwen-7b --controller-url http://127.0.0.1:8100 --auth-env SVC_LIFECYCLE_TOKEN --yes`;

function register(recipe: Command, verb: 'apply' | 'stop', description: string): void {
  const cmd = recipe.command(verb).description(description).argument('<name>', "recipe name (as in its file's `name`)");
  confirmOptions(lifecycleOptions(cmd))
    .addHelpText('after', helpAfter(verb))
    .action(async (name: string, f: LifecycleFlags) => {
      if (!isRecipeName(name)) {
        process.stderr.write(`svc-serving: error: ${RECIPE_ERRORS.name}\n`);
        process.exitCode = EXIT.usage;
        return;
      }
      await lifecycleAction(f, async (client) => {
        const applied = await client.planAndApply(`recipe.${verb}`, { name }, `recipe ${verb}`, RECIPE_PLAN_FAILURES);
        if (!applied) return;
        const opId = appliedId(applied, 'operation_id', /^op_[0-9a-f]{24}$/);
        process.stderr.write(`operation ${opId}\n`);
        let last = '';
        // Ctrl-C stops following, not the operation (a container start cannot be called back).
        const following = client.follow(opId, (s) => {
          const state = String(s['state']);
          if (state !== last) process.stderr.write(`  ${state}\n`);
          last = state;
        });
        const status = await whileInterruptible(
          following,
          `interrupted: operation ${opId} keeps running on the controller; its state: GET /v1/lifecycle/status/${opId}, or svc-serving recipe status ${name}\n`,
        );
        process.stdout.write(f.json ? JSON.stringify(status) + '\n' : describeOutcome(verb, name, status) + '\n');
        if (status['state'] !== 'succeeded') process.exitCode = EXIT.failure;
      });
    });
}

/** `svc-serving recipe apply|stop <name> --controller-url URL --auth-env ENV [--yes] [--json]`. */
export function registerRecipeLifecycleCommands(recipe: Command): void {
  register(
    recipe,
    'apply',
    'make the recipe run on the node: create and start its container, or start its stopped one (lifecycle command, grant node-admin:lifecycle)',
  );
  register(
    recipe,
    'stop',
    'stop every running container of the recipe on the node; nothing is removed (lifecycle command, grant node-admin:lifecycle)',
  );
}
