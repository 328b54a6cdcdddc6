import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { InvalidInputError } from '../errors.js';
import { RECIPE_NAME_PATTERN, recipeRevision, type LoadedRecipe } from '../recipes/recipe-config.js';
import { containerName, PUBLISH_HOST_IP, STOP_GRACE_S } from '../recipes/recipe-lifecycle.js';

const Alias = Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$' });
const JobId = Type.String({ pattern: '^(op|bench|media)_[0-9a-f]{24}$' });

export const BenchmarkStart = Type.Object(
  {
    alias: Alias,
    requests: Type.Integer({ minimum: 1, maximum: 1_000_000 }),
    concurrency: Type.Integer({ minimum: 1, maximum: 1024 }),
    prompt_tokens: Type.Integer({ minimum: 1, maximum: 131_072 }),
    max_tokens: Type.Integer({ minimum: 1, maximum: 131_072 }),
  },
  { additionalProperties: false },
);
export const MediaSubmit = Type.Object(
  {
    alias: Alias,
    // Files on this node; held in memory by the runner, never written to a store or record.
    files: Type.Array(Type.String({ minLength: 1, maxLength: 4096 }), { minItems: 1, maxItems: 10_000 }),
    language: Type.Optional(Type.String({ pattern: '^[a-z]{2,3}$' })),
  },
  { additionalProperties: false },
);
export const JobCancel = Type.Object({ job_id: JobId }, { additionalProperties: false });
export const RecipeTarget = Type.Object(
  { name: Type.String({ pattern: RECIPE_NAME_PATTERN }) },
  { additionalProperties: false },
);

/** The lifecycle commands: separate from the read surface, each behind its own confirmation. */
export const COMMANDS = {
  'benchmark.start': TypeCompiler.Compile(BenchmarkStart),
  'benchmark.cancel': TypeCompiler.Compile(JobCancel),
  'media.submit': TypeCompiler.Compile(MediaSubmit),
  'media.cancel': TypeCompiler.Compile(JobCancel),
  'recipe.apply': TypeCompiler.Compile(RecipeTarget),
  'recipe.stop': TypeCompiler.Compile(RecipeTarget),
} as const;
export type CommandName = keyof typeof COMMANDS;
export type BenchmarkStart = Static<typeof BenchmarkStart>;
export type MediaSubmit = Static<typeof MediaSubmit>;
export type JobCancel = Static<typeof JobCancel>;
export type RecipeTarget = Static<typeof RecipeTarget>;

export type Command =
  | { name: 'benchmark.start'; params: BenchmarkStart }
  | { name: 'benchmark.cancel'; params: JobCancel }
  | { name: 'media.submit'; params: MediaSubmit }
  | { name: 'media.cancel'; params: JobCancel }
  | { name: 'recipe.apply'; params: RecipeTarget }
  | { name: 'recipe.stop'; params: RecipeTarget };
export type RecipeCommand = Extract<Command, { name: 'recipe.apply' | 'recipe.stop' }>;

export const isRecipeCommand = (c: Command): c is RecipeCommand =>
  c.name === 'recipe.apply' || c.name === 'recipe.stop';

/** Parses a plan body `{command, params}`. Thrown when: unknown command or bad params (InvalidInputError). */
export function parseCommand(body: unknown): Command {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw new InvalidInputError();
  const keys = Object.keys(body);
  if (keys.some((k) => k !== 'command' && k !== 'params')) throw new InvalidInputError();
  const { command, params } = body as { command?: unknown; params?: unknown };
  if (typeof command !== 'string' || !Object.hasOwn(COMMANDS, command)) throw new InvalidInputError();
  const check = COMMANDS[command as CommandName];
  if (!check.Check(params)) throw new InvalidInputError();
  return { name: command, params } as Command;
}

/**
 * What a plan says will happen, in words, without paths or secrets. Recipe commands describe
 * `recipe`, the configuration the plan was made from (never its model path or env values).
 */
export function describePlan(c: Command, recipe?: LoadedRecipe): string[] {
  switch (c.name) {
    case 'recipe.apply': {
      const r = recipe?.recipe;
      if (!r || !recipe) return [`start recipe ${c.params.name}`];
      return [
        `start recipe ${r.name} (revision ${recipeRevision(r, recipe.digest)}) as container ${containerName(r.name)}; if one container of this recipe with the same recipe digest exists, start it or, when it runs, do nothing`,
        `image ${r.image} must already be on this node: nothing is pulled`,
        `serve ${r.served_model_name} with context ${r.context_size}, port ${r.port} published on ${PUBLISH_HOST_IP}`,
        r.gpus.length
          ? `GPUs ${[...r.gpus].sort((a, b) => a - b).join(', ')} (refused while another recipe's running container holds one)`
          : 'no GPU',
        r.env.length
          ? `pass environment variables ${[...r.env].sort().join(', ')} from the controller's environment (values are never stored or shown)`
          : 'no environment variables passed',
        'refuse, changing nothing, when containers of this recipe are several, carry another recipe digest, or the recipe changes before apply',
      ];
    }
    case 'recipe.stop':
      return [
        `stop every running container of recipe ${c.params.name} (label svc.recipe), waiting up to ${STOP_GRACE_S} s for each to exit`,
        'containers are stopped, not removed; when none runs nothing is done',
      ];
    case 'benchmark.start':
      return [
        `send ${c.params.requests} streaming chat requests to alias ${c.params.alias}`,
        `at concurrency ${c.params.concurrency}`,
        `prompt about ${c.params.prompt_tokens} tokens, max_tokens ${c.params.max_tokens}`,
        'record progress and a summary in the benchmark store',
      ];
    case 'media.submit':
      return [
        `transcribe ${c.params.files.length} audio file(s) through alias ${c.params.alias}`,
        'record counts and outcomes in the media store (never file names or transcripts)',
      ];
    case 'benchmark.cancel':
    case 'media.cancel':
      return [`cancel job ${c.params.job_id}`];
  }
}
