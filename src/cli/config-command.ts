import type { Command } from 'commander';
import { checkConfigFile, type FileReport, type Problem } from './config-check.js';
import { EXIT } from './run-server.js';

/** `config check`'s own exit codes (program.ts leaves its help alone). */
const CHECK_EXIT_HELP = `
Exit codes: 0 every file is valid (warnings included, unless --strict); 2 some file has a
problem, or invalid usage.`;

/** A path as given, printed so that it cannot forge a line (control characters escaped). */
function shown(file: string): string {
  return /[\u0000-\u001f\u007f]/.test(file) ? JSON.stringify(file) : file;
}

/** Warnings count as errors with --strict. */
function strictly(r: FileReport, strict: boolean): FileReport {
  if (!strict) return r;
  return { ...r, problems: r.problems.map((p): Problem => ({ ...p, severity: 'error' })) };
}

const failed = (r: FileReport): boolean => r.problems.some((p) => p.severity === 'error');

/** One line per problem, then `file: ok (kind)` for a valid file. */
export function formatReports(reports: readonly FileReport[]): string {
  const out: string[] = [];
  for (const r of reports) {
    const f = shown(r.file);
    for (const p of r.problems)
      out.push(`${f}:${p.line}: ${p.key}: ${p.severity === 'warning' ? 'warning: ' : ''}${p.reason}`);
    if (!failed(r)) out.push(`${f}: ok (${r.kind})`);
  }
  return out.length > 0 ? `${out.join('\n')}\n` : '';
}

/** `--json`: one document for every file. */
export function jsonReports(reports: readonly FileReport[]): string {
  return `${JSON.stringify(
    {
      schema: 'svc-config-check/v1',
      ok: !reports.some(failed),
      files: reports.map((r) => ({ file: r.file, kind: r.kind, ok: !failed(r), problems: r.problems })),
    },
    null,
    2,
  )}\n`;
}

/** `svc-serving config check FILE... [--json] [--strict]`. */
export function registerConfigCommand(program: Command): Command {
  const config = program.command('config').description('configuration files: check them before a server starts');
  const check = config
    .command('check')
    .description(
      'check router, node, fleet, policy, recipe and manifest files as their servers would at start, and report every problem at once',
    )
    .argument('<file...>', 'configuration files (TOML); each is recognized by its tables')
    .option('--json', 'print a machine-readable report (svc-config-check/v1)')
    .option('--strict', 'count warnings (variables not set, credential files not present here) as problems')
    .addHelpText(
      'after',
      `
Each file is recognized by its tables: [server] and [[models]] a router, [node] a node
controller, [fleet] and [[nodes]] a fleet controller, [[clients]] an authorization policy,
top-level image, model, port... a recipe, recipes and absent a manifest.

It checks what the server checks at start: the schema (keys, types, bounds), the rules across
keys (a name declared twice, a pair half given), and the files a key names: the
authorization policy (readable and itself valid), tls_cert_file with tls_key_file (PEM, one
pair) and a policy's credential_file. It also checks the directories a key names: a node's
state_dir and the router's decision_log_path folder (there, or makeable, and writable),
media_dir, recipes_dir and manifests_dir (there and readable). Every problem it finds is
reported in one run, the rules across keys included. Problems read

  FILE:LINE: KEY: REASON

with LINE the key's line (or its table's; 0 when neither is written) and never a value from
the file: an unknown key holding a secret is named (when it looks like a key), not echoed.
A variable named by a *_env key that is not set here, a policy's credential_file that does
not exist here (systemd's LoadCredential hands it over at run time), or a directory that is
not there or that this user cannot write in or read, is a warning ("warning:"), since a
build machine lacks the runtime secrets and folders; --strict makes it a problem (a file
where a directory must be is one anyway). A valid file prints FILE: ok (KIND).`,
    )
    .action((files: string[], opts: { json?: boolean; strict?: boolean }) => {
      const reports = files.map((f) => strictly(checkConfigFile(f, process.env), opts.strict === true));
      process.stdout.write(opts.json ? jsonReports(reports) : formatReports(reports));
      process.exitCode = reports.some(failed) ? EXIT.usage : EXIT.ok;
    });
  check.addHelpText('after', CHECK_EXIT_HELP);
  return check;
}
