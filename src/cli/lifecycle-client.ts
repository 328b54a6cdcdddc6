import { createInterface } from 'node:readline/promises';
import type { Command } from 'commander';
import { SafeReader } from './http-read.js';
import type { ReadOutcome } from './read-outcome.js';
import { checkOrigin } from '../auth/origin-policy.js';
import { failureFor, runReadAction, SnapshotFailure, snapshotFailure } from './read-errors.js';
import { EXIT } from './run-server.js';
import { checkCredential, checkEnvName } from './settings.js';
import { envVar } from '../config/env-var.js';

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
/** Every state the status route can report; anything else is a malformed answer (exit 4), not a reason to wait. */
const KNOWN = new Set([...TERMINAL, 'queued', 'awaiting_approval', 'preparing', 'submitting', 'running']);
/** Plan lines shown, and characters per line: the text comes from the server. */
const MAX_PLAN_LINES = 50;
const MAX_PLAN_CHARS = 300;

/** Lifecycle failures in the lifecycle's own words (the read commands' ones speak of workload reads). */
const LIFECYCLE = {
  forbidden: 'the credential lacks the node-admin:lifecycle grant (HTTP 403)',
  notServed:
    'the server at --controller-url does not serve lifecycle commands: check that it is a node controller (not a router or the fleet) of this version',
  confirmationRefused:
    'the controller refused the confirmation (HTTP 400): the plan expired (2 minutes), was already used, or the controller restarted since; nothing was started by it: run the command again',
} as const;

/** A plan line from the server as the terminal shows it: printable characters only (no escape sequences), bounded. */
function printable(s: string): string {
  // eslint-disable-next-line no-control-regex
  const clean = s.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, '?');
  return clean.length > MAX_PLAN_CHARS ? `${clean.slice(0, MAX_PLAN_CHARS)}…` : clean;
}
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
  if (o.kind === 'json' && o.status === okStatus) {
    if (o.body && typeof o.body === 'object' && !Array.isArray(o.body)) return o.body as Record<string, unknown>;
    throw snapshotFailure('malformed');
  }
  const status = o.kind === 'json' || o.kind === 'status' ? o.status : undefined;
  // Another success status than the route's own is an answer this client does not know, not a refusal.
  if (status !== undefined && status >= 200 && status <= 299) throw snapshotFailure('malformed');
  const fixed = status === undefined ? undefined : failures[status];
  if (fixed) throw new SnapshotFailure(fixed);
  if (status === 403) throw new SnapshotFailure(LIFECYCLE.forbidden);
  if (status === 404 || status === 405) throw new SnapshotFailure(LIFECYCLE.notServed);
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
    const token = checkCredential(envVar(process.env, checkEnvName(f.authEnv)));
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
  constructor(
    private readonly reader: SafeReader,
    private readonly yes: boolean,
  ) {}

  /**
   * Plans `command`, shows the plan on stderr, asks on a TTY unless `--yes`, then applies.
   * Returns the apply answer, or undefined when nothing was applied (exit code set).
   * `usage` names the command for the "re-run with --yes" hint.
   */
  async planAndApply(
    command: string,
    params: object,
    usage: string,
    planFailures: StatusFailures = {},
    applyFailures: StatusFailures = {},
  ): Promise<Record<string, unknown> | undefined> {
    const plan = expectJson(
      await whileInterruptible(
        this.reader.post('/v1/lifecycle/plan', { command, params }),
        '\ninterrupted: nothing was started\n',
      ),
      201,
      planFailures,
    );
    const steps = Array.isArray(plan['plan'])
      ? (plan['plan'] as unknown[]).filter((x): x is string => typeof x === 'string')
      : [];
    const shown = steps.slice(0, MAX_PLAN_LINES).map((s) => `  - ${printable(s)}`);
    if (steps.length > MAX_PLAN_LINES) shown.push(`  (${steps.length - MAX_PLAN_LINES} more lines not shown)`);
    // With --yes nothing is asked: the plan is shown as what is being applied.
    process.stderr.write(
      `${this.yes ? 'Plan (applying it: --yes)' : 'Plan (confirm within 2 minutes)'}:\n${shown.join('\n')}\n`,
    );
    if (!this.yes) {
      if (!process.stdin.isTTY) {
        process.stderr.write(
          `svc-serving: error: confirmation required: re-run with --yes (see svc-serving ${usage} --help)\n`,
        );
        process.exitCode = EXIT.usage;
        return undefined;
      }
      const rl = createInterface({ input: process.stdin, output: process.stderr });
      // Ctrl-C at the prompt is a "no" said by interrupting (exit 130); Ctrl-D is a plain "no".
      // A question whose interface closes stays pending for ever (the process would end
      // silently with exit 0): Ctrl-C and end of input abort it instead.
      let interrupted = false;
      const asked = new AbortController();
      const interrupt = (): void => {
        interrupted = true;
        asked.abort();
      };
      rl.once('SIGINT', interrupt);
      // A SIGINT sent to the process (`kill -INT`, not the keystroke) is the same interruption.
      process.once('SIGINT', interrupt);
      rl.once('close', () => asked.abort());
      let answer = '';
      try {
        answer = (await rl.question('Proceed? [y/N] ', { signal: asked.signal })).trim().toLowerCase();
      } catch {
        // the prompt was closed (Ctrl-C, Ctrl-D, end of input): nothing was answered
      } finally {
        process.off('SIGINT', interrupt);
        rl.close();
      }
      if (interrupted) {
        process.stderr.write('\nNot started (interrupted).\n');
        process.exitCode = EXIT.interrupted;
        return undefined;
      }
      if (answer !== 'y' && answer !== 'yes') {
        process.stderr.write('Not started.\n');
        return undefined;
      }
    }
    const applying = this.reader.post('/v1/lifecycle/apply', { confirmation_token: plan['confirmation_token'] });
    return expectJson(
      await whileInterruptible(
        applying,
        '\ninterrupted while the controller was applying it: it may have started; its operation shows in node_workloads (owner controller)\n',
      ),
      200,
      { 400: LIFECYCLE.confirmationRefused, ...applyFailures },
    );
  }

  /** Polls `GET /v1/lifecycle/status/{id}` until a terminal state; `onStatus` sees every answer. */
  async follow(
    id: string,
    onStatus: (s: Record<string, unknown>) => void = () => {},
  ): Promise<Record<string, unknown>> {
    for (;;) {
      const status = expectJson(await this.reader.get(`/v1/lifecycle/status/${id}`), 200);
      const state = status['state'];
      // A state this client does not know could be anything, terminal included: never waited on.
      if (typeof state !== 'string' || !KNOWN.has(state)) throw snapshotFailure('malformed');
      onStatus(status);
      if (TERMINAL.has(state)) return status;
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

/**
 * Awaits `p`; Ctrl-C meanwhile prints `text` on stderr and exits 130: a request sent cannot
 * be taken back, and a job or operation being followed keeps running; either is only reported.
 */
export async function whileInterruptible<T>(p: Promise<T>, text: string): Promise<T> {
  const interrupted = (): void => {
    process.stderr.write(text);
    process.exit(EXIT.interrupted);
  };
  process.once('SIGINT', interrupted);
  try {
    return await p;
  } finally {
    process.off('SIGINT', interrupted);
  }
}
