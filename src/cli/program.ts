import { Command, CommanderError, InvalidArgumentError, type Option } from 'commander';
import { PACKAGE_VERSION } from '../version.js';
import { EXIT } from './run-server.js';
import { registerControllerCommands } from './server-commands.js';
import { registerEngineCommands } from './engine-commands.js';
import { registerRouterCommands } from './router-commands.js';
import { registerUpCommand } from './up-command.js';
import { registerBenchCommand } from './bench-command.js';
import { registerFleetCommands } from './fleet-commands.js';
import { registerReadCommands } from './read-commands.js';
import { registerDashboardCommand } from './dashboard-command.js';
import { registerRecipeCommand } from './recipe-command.js';
import { registerRecipeLifecycleCommands } from './recipe-lifecycle-command.js';
import { registerConfigCommand } from './config-command.js';
import { HTTPS_CLIENT_COMMANDS, addCaFileOption } from './trust.js';
import { TRACKED } from './settings.js';
import { setHelpHint } from './read-errors.js';

// Commander's own messages quote the operand; ours are fixed (SPEC.md: errors omit operands).
const USAGE_MESSAGES: Readonly<Record<string, string>> = {
  'commander.unknownOption': 'unknown option',
  'commander.unknownCommand': 'unknown command',
  'commander.missingMandatoryOptionValue': 'a required option is missing',
  'commander.optionMissingArgument': 'an option needs a value',
  'commander.missingArgument': 'a required argument is missing',
  'commander.excessArguments': 'unexpected argument',
  'commander.invalidArgument': 'invalid option value',
  'commander.conflictingOption': 'conflicting options',
  'svc.repeatedOption': 'an option was given more than once',
};

/** Lifecycle commands (bench run|cancel). */
const EXIT_HELP = `
Exit codes: 0 success; 1 the job or operation failed or was interrupted (or an unexpected
internal error); 2 invalid usage or configuration; 4 the other side refused or could not answer;
130 interrupted (Ctrl-C at a confirmation prompt or while following a job).`;

/** Reads (observation only): nothing starts, and no job can fail. */
const READ_EXIT_HELP = `
Exit codes: 0 any valid answer (partial and unavailable included); 1 only an unexpected
internal error (a bug); 2 invalid usage or configuration; 4 the other side refused or could not
answer, or its answer did not hold up; 130 interrupted (Ctrl-C).`;

/** The read commands, by their path. */
const READ_COMMANDS = new Set([
  'router workloads',
  'fleet workloads',
  'router diagnose',
  'fleet diagnose',
  'recipe status',
]);

/** Long-running servers: a stop by signal once they are up is a clean exit. */
const SERVER_EXIT_HELP = (path: string): string => `
Exit codes: 0 stopped cleanly (SIGTERM or Ctrl-C once it is up: requests in flight finish or are
cut after a grace${path === 'router serve' || path === 'up' ? '; the router records each of them' : ''}); 1 cannot start (a busy port, an unreachable NATS, a path it
cannot use) or could not stop in time; 2 invalid usage or configuration; 130 interrupted (Ctrl-C
before it was up).`;

/** The server commands (run until stopped), by their path. */
const SERVER_COMMANDS = new Set([
  'up',
  'router serve',
  'controller serve',
  'fleet serve',
  'engine sim',
  'dashboard serve',
]);

/** Commands whose help already lists their exit codes. */
const OWN_EXIT_HELP = new WeakSet<Command>();

/** Builds the `svc-serving` program. */
export function buildProgram(): Command {
  const program = new Command('svc-serving')
    .description(
      'Honest workload inventory (svc-workloads/v1) and router request diagnosis (svc-router-diagnosis/v1) for self-hosted LLM serving',
    )
    .version(PACKAGE_VERSION)
    .showHelpAfterError(false)
    .exitOverride()
    // Errors, and the help commander prints for a missing subcommand, become one fixed line (main).
    .configureOutput({ outputError: () => {}, writeErr: () => {} })
    .addHelpText(
      'after',
      [
        '',
        'Exit codes:',
        '  0    success; for reads, any valid answer (partial and unavailable included)',
        '  1    a server that cannot start (a busy port, an unreachable NATS); a job or',
        '       operation that failed or was interrupted',
        '  2    invalid usage or configuration',
        '  4    a read or command the other side refused or could not answer',
        '  130  interrupted (Ctrl-C at a confirmation prompt or while following a job)',
        '',
        "Run 'svc-serving <command> [<subcommand>] --help' for a command's options.",
      ].join('\n'),
    );
  registerControllerCommands(program);
  registerEngineCommands(program);
  const routerCmd = registerRouterCommands(program);
  const fleetCmd = registerFleetCommands(program);
  registerReadCommands(routerCmd, fleetCmd);
  registerUpCommand(program);
  registerBenchCommand(program);
  registerDashboardCommand(program);
  const recipeCmd = registerRecipeCommand(program);
  registerRecipeLifecycleCommands(recipeCmd);
  for (const c of recipeCmd.commands) if (c.name() === 'apply' || c.name() === 'stop') OWN_EXIT_HELP.add(c);
  OWN_EXIT_HELP.add(registerConfigCommand(program));
  for (const cmd of program.commands) {
    for (const c of [cmd, ...cmd.commands]) {
      c.exitOverride().configureOutput({ outputError: () => {}, writeErr: () => {} });
      // Every command's own help says what its exit status means (recipe apply|stop say it in their words).
      const path = c === cmd ? c.name() : `${cmd.name()} ${c.name()}`;
      if (HTTPS_CLIENT_COMMANDS.has(path)) addCaFileOption(c);
      checkRequiredAfterUnknown(c);
      for (const o of c.options) refuseRepeats(c, o);
      if (c.commands.length === 0 && !OWN_EXIT_HELP.has(c))
        c.addHelpText(
          'after',
          SERVER_COMMANDS.has(path) ? SERVER_EXIT_HELP(path) : READ_COMMANDS.has(path) ? READ_EXIT_HELP : EXIT_HELP,
        );
    }
  }
  return program;
}

/**
 * Commander checks required options before unknown ones, so `bench run --bogus` would say
 * "a required option is missing" about a typo. Required options are checked here instead,
 * just before the action (after the unknown-option check), with the same fixed message.
 */
function checkRequiredAfterUnknown(cmd: Command): void {
  const required = cmd.options.filter((o) => o.mandatory);
  if (required.length === 0) return;
  for (const o of required) o.makeOptionMandatory(false);
  cmd.hook('preAction', (self) => {
    // Named as the command defines it (never anything the user typed).
    const missing = required
      .filter((o) => self.getOptionValue(o.attributeName()) === undefined)
      .map((o) => o.long ?? o.flags);
    if (missing.length > 0) {
      self.error(`a required option is missing: ${missing.join(', ')}`, {
        code: 'commander.missingMandatoryOptionValue',
        exitCode: EXIT.usage,
      });
    }
  });
}

/**
 * Commander lets the last of a repeated option win (`--port 1 --port 2` listens on 2); every
 * option given twice is invalid usage instead (docs/api.md). Commander calls an option's
 * parser once per occurrence, so the second call refuses the command line. Options whose
 * command reports repeats itself (OptionTracker, for its --json error output) are left be.
 */
function refuseRepeats(c: Command, o: Option): void {
  const parse = o.parseArg as ((value: string, previous: unknown) => unknown) | undefined;
  if (parse && (parse as { [TRACKED]?: boolean })[TRACKED]) return;
  const name = o.attributeName();
  o.argParser((value: string, previous: unknown) => {
    // Commander records where the current value came from (and resets that on a new parse).
    if (c.getOptionValueSource(name) === 'cli')
      throw new CommanderError(EXIT.usage, 'svc.repeatedOption', 'an option was given more than once');
    try {
      return parse ? parse(value, previous) : o.required || o.optional ? value : !o.negate;
    } catch (err) {
      // The option by its name and the parser's own fixed words; commander's message would quote the value.
      if (err instanceof InvalidArgumentError)
        throw new CommanderError(
          EXIT.usage,
          'svc.invalidOptionValue',
          `invalid option value: ${o.long ?? o.flags} (${err.message})`,
        );
      throw err;
    }
  });
}

/** The command `name` directly under `c`, if it has one. */
function subcommand(c: Command, name: string): Command | undefined {
  return c.commands.find((x) => x.name() === name);
}

/**
 * Where to read about the command a command line names: `svc-serving <command> [<sub>] --help`
 * for the deepest command its leading words name (a command's own words, never an operand).
 */
export function helpHint(program: Command, args: readonly string[]): string {
  const path: string[] = [];
  let c = program;
  for (const word of args) {
    const sub = subcommand(c, word);
    if (sub === undefined) break;
    path.push(word);
    c = sub;
  }
  return `see svc-serving ${path.length > 0 ? `${path.join(' ')} ` : ''}--help`;
}

/** Messages that name an option as the command defines it, shown as they are. */
const OWN_MESSAGE_CODES: ReadonlySet<string> = new Set([
  'svc.invalidOptionValue',
  'svc.caFile',
  'commander.missingMandatoryOptionValue',
]);

/** An option no command defines: what `help --x` becomes, so that it is refused as unknown. */
const NOT_AN_OPTION = '--help-takes-command-names-only';

/**
 * `help a b` in a command group's place means `a b --help`: commander's own help command
 * takes one name, so `help router diagnose` would show the router's help, and `router help
 * nope` would say a command is missing instead of that `nope` is unknown. A `help` after a
 * leaf command (a recipe named "help") is left alone.
 */
export function expandHelp(program: Command, args: readonly string[]): string[] {
  let cmd = program;
  for (const [i, a] of args.entries()) {
    if (a === 'help') {
      const rest = args.slice(i + 1);
      if (rest.some((r) => r.startsWith('-'))) {
        // `help` takes command names only: any other option there is invalid usage (a token
        // no command defines, refused as an unknown option), not help.
        if (rest.some((r) => r.startsWith('-') && r !== '--help' && r !== '-h'))
          return [...args.slice(0, i), NOT_AN_OPTION];
        break;
      }
      // Each name must be a command of the one before it; the first that is not is left for
      // commander to call unknown (with --help it would show the group's help instead).
      let at = cmd;
      for (const [k, r] of rest.entries()) {
        const sub = subcommand(at, r);
        if (!sub) return [...args.slice(0, i), ...rest.slice(0, k + 1)];
        // A leaf command: its help, whatever follows (help never runs a command).
        if (sub.commands.length === 0) return [...args.slice(0, i), ...rest.slice(0, k + 1), '--help'];
        at = sub;
      }
      return [...args.slice(0, i), ...rest, '--help'];
    }
    const sub = subcommand(cmd, a);
    if (!sub || sub.commands.length === 0) break;
    cmd = sub;
  }
  return [...args];
}

/** Runs the CLI on `process.argv`-shaped arguments; sets the exit code, never exits. */
export async function main(rawArgv: string[]): Promise<void> {
  const program = buildProgram();
  const argv = [...rawArgv.slice(0, 2), ...expandHelp(program, rawArgv.slice(2))];
  const hint = helpHint(program, argv.slice(2));
  setHelpHint(hint);
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // Set the code and let Node exit on its own, so piped stdout is never cut short.
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') {
        process.exitCode = EXIT.ok;
        return;
      }
      // `svc-serving help [command]` printed the help it was asked for.
      if (err.code === 'commander.help' && err.exitCode === 0) {
        process.exitCode = EXIT.ok;
        return;
      }
      if (err.code === 'commander.help' && argv.slice(2)[0] === 'help') {
        // `help` for a command that does not exist.
        process.stderr.write(`svc-serving: error: unknown command (${helpHint(program, argv.slice(3))})\n`);
        process.exitCode = EXIT.usage;
        return;
      }
      if (err.code === 'commander.help') {
        // A command group without its subcommand: invalid usage, one fixed line like the others.
        process.stderr.write(`svc-serving: error: a command is missing (${hint})\n`);
        process.exitCode = EXIT.usage;
        return;
      }
      const own =
        OWN_MESSAGE_CODES.has(err.code) &&
        /^(invalid option value|a required option is missing): --[a-z0-9-]+|^--ca-file \(or SVC_CA_FILE\) names/.test(
          err.message,
        );
      let text = own ? err.message : (USAGE_MESSAGES[err.code] ?? 'invalid usage');
      // Commander names the option by its definition (`option '--port <port>' argument missing`).
      const needs =
        err.code === 'commander.optionMissingArgument'
          ? /^error: option '(--[a-z0-9-]+)[^']*' argument missing$/.exec(err.message)
          : null;
      if (needs) text = `${text}: ${needs[1]}`;
      process.stderr.write(`svc-serving: error: ${text} (${hint})\n`);
      process.exitCode = EXIT.usage;
      return;
    }
    process.stderr.write('svc-serving: error: unexpected failure\n');
    process.exitCode = EXIT.failure;
  }
}
