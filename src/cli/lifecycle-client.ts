import { createInterface } from 'node:readline/promises';
import type { Command } from 'commander';
import { SafeReader, type ReadOutcome } from './http-read.js';
import { checkOrigin } from './origin-policy.js';
import { failureFor, runReadAction, SnapshotFailure, snapshotFailure } from './read-errors.js';
import { EXIT } from './run-server.js';
import { checkCredential, checkEnvName } from './settings.js';

/** The options every lifecycle command takes. */
export interface LifecycleFlags {
  controllerUrl: string;
  authEnv: string;
  yes?: boolean;
  json?: boolean;
}

/** Fixed failures for statuses a command reads its own way (e.g. 404: unknown recipe). */
export type StatusFailures = Readonly<Partial<Record<number, string>>>;

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'expired', 'interrupted']);
const POLL_MS = 500;

/** Adds the connection and confirmation options of a lifecycle command. */
export function lifecycleOptions(cmd: Command): Command {
  return cmd
    .requiredOption('--controller-url <url>', 'the node controller (http only to loopback/private IPs)')
    .requiredOption('--auth-env <ENV_NAME>', 'environment variable holding a node-admin:lifecycle credential');
}

/** Adds `--yes` and `--json` (after the command's own options, so help reads in order). */
export function confirmOptions(cmd: Command): Command {
  return cmd.option('--yes', 'confirm the plan without asking').option('--json', 'print the final status as JSON');
}

/** The JSON body of an answer with `okStatus`; any other answer is a fixed failure (exit 4). */
export function expectJson(o: ReadOutcome, okStatus: number, failures: StatusFailures = {}): Record<string, unknown> {
  if (o.kind === 'json' && o.status === okStatus && o.body && typeof o.body === 'object') return o.body as Record<string, unknown>;
  const status = o.kind === 'json' || o.kind === 'status' ? o.status : undefined;
  const fixed = status === undefined ? undefined : failures[status];
  if (fixed) throw new SnapshotFailure(fixed);
  if (o.kind === 'json') throw failureFor({ kind: 'status', status: o.status }, 'controllerNotServed');
  throw failureFor(o, 'controllerNotServed');
}

/**
 * Runs a lifecycle command: checks the origin and the credential, then hands a client bound
 * to the controller to `run`. Failures become one fixed stderr line and an exit code.
 */
export async function lifecycleAction(f: LifecycleFlags, run: (c: LifecycleClient) => Promise<void>): Promise<void> {
  await runReadAction(async () => {
    const origin = checkOrigin(f.controllerUrl);
    const token = checkCredential(process.env[checkEnvName(f.authEnv)]);
    const reader = new SafeReader(origin, token, 10);
    try {
      await run(new LifecycleClient(reader, f.yes === true));
    } finally {
      await reader.close();
    }
  });
}

/** The plan / confirm / apply / follow conversation with a node controller's lifecycle routes. */
export class LifecycleClient {
  constructor(private readonly reader: SafeReader, private readonly yes: boolean) {}

  /**
   * Plans `command`, shows the plan on stderr, asks on a TTY unless `--yes`, then applies.
   * Returns the apply answer, or undefined when nothing was applied (exit code set).
   * `usage` names the command for the "re-run with --yes" hint.
   */
  async planAndApply(command: string, params: object, usage: string, planFailures: StatusFailures = {}): Promise<Record<string, unknown> | undefined> {
    const plan = expectJson(await this.reader.post('/v1/lifecycle/plan', { command, params }), 201, planFailures);
    const steps = Array.isArray(plan['plan']) ? (plan['plan'] as unknown[]).filter((x) => typeof x === 'string') : [];
    process.stderr.write(`Plan (confirm within 2 minutes):\n${steps.map((s) => `  - ${s}`).join('\n')}\n`);
    if (!this.yes) {
      if (!process.stdin.isTTY) {
        process.stderr.write(`svc-serving: error: confirmation required: re-run with --yes (see svc-serving ${usage} --help)\n`);
        process.exitCode = EXIT.usage;
        return undefined;
      }
      const rl = createInterface({ input: process.stdin, output: process.stderr });
      const answer = (await rl.question('Proceed? [y/N] ')).trim().toLowerCase();
      rl.close();
      if (answer !== 'y' && answer !== 'yes') {
        process.stderr.write('Not started.\n');
        return undefined;
      }
    }
    return expectJson(await this.reader.post('/v1/lifecycle/apply', { confirmation_token: plan['confirmation_token'] }), 200);
  }

  /** Polls `GET /v1/lifecycle/status/{id}` until a terminal state; `onStatus` sees every answer. */
  async follow(id: string, onStatus: (s: Record<string, unknown>) => void = () => {}): Promise<Record<string, unknown>> {
    for (;;) {
      const status = expectJson(await this.reader.get(`/v1/lifecycle/status/${id}`), 200);
      onStatus(status);
      if (TERMINAL.has(String(status['state']))) return status;
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }
}

/** The ID an apply answer names under `key`, checked against `pattern`. Thrown when: missing or malformed. */
export function appliedId(applied: Record<string, unknown>, key: 'job_id' | 'operation_id', pattern: RegExp): string {
  const id = applied[key];
  if (typeof id !== 'string' || !pattern.test(id)) throw snapshotFailure('malformed');
  return id;
}
