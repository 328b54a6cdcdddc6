import { pathToFileURL } from 'node:url';
import { CLI } from '../support/processes.js';

/**
 * Runs many argument vectors through the built CLI (dist/cli/main.js) inside ONE process, so
 * a fuzz of a hundred runs does not pay a CPU-second of module loading per run. Each run
 * re-evaluates main.js (a fresh `?run=N` module instance: a fresh commander program, fresh
 * option trackers) with its own process.argv, captures stdout and stderr, and reads the exit
 * code main() and the actions set. Uncaught errors are recorded, not swallowed.
 * Only active with SVC_FUZZ_DRIVER=1 (the test runner also loads every file under test/).
 * Input: a JSON array of `{args, env?}` on stdin (env: variables set for that run only).
 * Output: a JSON array of results on stdout.
 */
export interface DriverCase {
  readonly args: string[];
  readonly env?: Record<string, string>;
}

export interface DriverResult {
  readonly args: string[];
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  readonly uncaught: string[];
}

async function readStdin(): Promise<string> {
  let text = '';
  for await (const chunk of process.stdin) text += String(chunk);
  return text;
}

async function drive(): Promise<void> {
  const cases = JSON.parse(await readStdin()) as DriverCase[];
  const { Command } = await import('commander');
  const last: { parsing?: Promise<unknown> } = {};
  const parseAsync = Command.prototype.parseAsync;
  Command.prototype.parseAsync = function (this: InstanceType<typeof Command>, ...a: Parameters<typeof parseAsync>) {
    const p = parseAsync.apply(this, a);
    last.parsing = p;
    return p;
  } as typeof parseAsync;
  const realOut = process.stdout.write.bind(process.stdout);
  let out = '';
  let err = '';
  process.stdout.write = ((chunk: unknown) => ((out += String(chunk)), true)) as typeof process.stdout.write;
  process.stderr.write = ((chunk: unknown) => ((err += String(chunk)), true)) as typeof process.stderr.write;
  process.exit = ((code?: number) => {
    throw new Error(`process.exit(${code}) called`);
  }) as typeof process.exit;
  const uncaught: string[] = [];
  process.on('uncaughtException', (e) => uncaught.push(String((e as Error)?.stack ?? e)));
  process.on('unhandledRejection', (e) => uncaught.push(String((e as Error)?.stack ?? e)));
  const results: DriverResult[] = [];
  const url = pathToFileURL(CLI).href;
  const baseEnv = { ...process.env };
  for (const [i, { args, env }] of cases.entries()) {
    for (const k of Object.keys(process.env)) if (!(k in baseEnv)) delete process.env[k];
    Object.assign(process.env, baseEnv, env ?? {});
    out = '';
    err = '';
    delete last.parsing;
    process.exitCode = 0;
    process.argv = [process.execPath, CLI, ...args];
    await import(`${url}?run=${i}`);
    // (read through a cast: TypeScript cannot see that the patched parseAsync set it)
    await (last.parsing as Promise<unknown> | undefined)?.catch(() => undefined);
    // main() handles the outcome one microtask later; two macrotask turns are plenty.
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
    results.push({ args, code: Number(process.exitCode ?? 0), stdout: out, stderr: err, uncaught: uncaught.splice(0) });
  }
  process.exitCode = 0;
  realOut(JSON.stringify(results));
}

if (process.env['SVC_FUZZ_DRIVER'] === '1') await drive();
