import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { InvalidInputError } from '../errors.js';

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

/** The lifecycle commands: separate from the read surface, each behind its own confirmation. */
export const COMMANDS = {
  'benchmark.start': TypeCompiler.Compile(BenchmarkStart),
  'benchmark.cancel': TypeCompiler.Compile(JobCancel),
  'media.submit': TypeCompiler.Compile(MediaSubmit),
  'media.cancel': TypeCompiler.Compile(JobCancel),
} as const;
export type CommandName = keyof typeof COMMANDS;
export type BenchmarkStart = Static<typeof BenchmarkStart>;
export type MediaSubmit = Static<typeof MediaSubmit>;
export type JobCancel = Static<typeof JobCancel>;

export type Command =
  | { name: 'benchmark.start'; params: BenchmarkStart }
  | { name: 'benchmark.cancel'; params: JobCancel }
  | { name: 'media.submit'; params: MediaSubmit }
  | { name: 'media.cancel'; params: JobCancel };

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

/** What a plan says will happen, in words, without paths or secrets. */
export function describePlan(c: Command): string[] {
  switch (c.name) {
    case 'benchmark.start':
      return [`send ${c.params.requests} streaming chat requests to alias ${c.params.alias}`, `at concurrency ${c.params.concurrency}`, `prompt about ${c.params.prompt_tokens} tokens, max_tokens ${c.params.max_tokens}`, 'record progress and a summary in the benchmark store'];
    case 'media.submit':
      return [`transcribe ${c.params.files.length} audio file(s) through alias ${c.params.alias}`, 'record counts and outcomes in the media store (never file names or transcripts)'];
    case 'benchmark.cancel':
    case 'media.cancel':
      return [`cancel job ${c.params.job_id}`];
  }
}
