import { SnapshotFailure, UsageFailure } from '../errors.js';
import { EXIT } from './run-server.js';
import type { ReadOutcome } from './read-outcome.js';

/**
 * Every message the read commands (workloads, diagnose) print on failure: USAGE (in
 * src/errors.ts beside UsageFailure, re-exported here) and SNAPSHOT below.
 * SPEC.md: usage errors omit operands; snapshot errors reflect neither the URL, the credential
 * variable name, the response body nor an exception. So no message here is ever built from
 * user input or server output; the only variable part is a three-digit HTTP status.
 */
export { USAGE, type UsageKey } from '../errors.js';

/** Why an authenticated read did not produce a trustworthy snapshot. */
export const SNAPSHOT = {
  unauthenticated: 'the server did not accept the credential (HTTP 401)',
  forbidden: 'the credential lacks the workloads:read grant or the needed access (HTTP 403)',
  forbiddenRequests: 'the credential lacks the requests:read grant (HTTP 403)',
  routerNotServed:
    'the server at --router-url does not serve workload reads (GET /v1/workloads): check that it is a router (a controller or the fleet answers POST /tools/call instead) of this version',
  controllerNotServed:
    'the server at --controller-url does not serve this route: check that it is a node controller (not a router or the fleet) of this version',
  fleetNotServed:
    'the server at --controller-url does not serve fleet reads (fleet_workloads): check that it is the fleet controller (a node controller answers node_workloads; a router answers neither) of this version',
  lookupNotServed:
    'the server at the router URL does not serve request lookups (GET /v1/requests): check that it is a router (not a controller or the fleet) of this version',
  fleetDiagnosisNotServed:
    'the server at --fleet-url does not serve request diagnosis (request_diagnosis, session_diagnosis): check that it is the fleet controller (not a router) of this version',
  diagnosisNotServed:
    'the server at the router URL serves neither request lookups nor router status: check that it is a router (not a controller or the fleet) of this version',
  redirect: 'the server answered with a redirect; redirects are never followed',
  timeout: 'the server sent nothing within the read timeout',
  fleetTimeout:
    'the fleet sent nothing within the read timeout (it waits up to its node_timeout_ms for a node that does not answer: give --timeout more than that)',
  transport: 'could not connect to the server, or the connection failed',
  tlsExpired: "the server's TLS certificate has expired or is not valid yet",
  tlsName: "the server's TLS certificate does not name the host of the URL",
  tlsUntrusted:
    "the server's TLS certificate is not signed by a trusted CA (trust a private CA with --ca-file or SVC_CA_FILE)",
  oversized:
    'the response exceeded the size limit (16 MiB for fleet reads, 1 MiB for node workload reads, 128 KiB for every other answer) and was discarded',
  malformed: 'the response is not a valid envelope of the expected schema',
  routerIdentity: 'the router answered for a different node than --expected-node',
  fleetIdentity: 'the fleet result has no entry for --expected-node',
  lookupIdentity: 'the router answered with the record of a different request or session than asked',
  fleetRecordIdentity: 'the fleet result shows a node with records of another host',
} as const;
export type SnapshotKey = keyof typeof SNAPSHOT;

/** The server answered with a status we do not read as a snapshot (400, 429, 5xx, ...). */
export function statusMessage(status: number): string {
  const code = Number.isInteger(status) && status >= 100 && status <= 999 ? String(status) : 'unknown';
  if (status >= 500 && status <= 599) return `the server failed to answer (HTTP ${code})`;
  // A success status where another was expected (200 for 201): not a refusal.
  if (status >= 200 && status <= 299) return `the server answered with an unexpected status (HTTP ${code})`;
  return `the server refused the read (HTTP ${code})`;
}

/** Invalid usage (exit 2) and a failed authenticated snapshot (exit 4). */
export { SnapshotFailure, UsageFailure } from '../errors.js';

let helpHint = 'see svc-serving --help';

/** Sets the help a usage error points to (main: the command line's own `--help`). */
export function setHelpHint(hint: string): void {
  helpHint = hint;
}

export function snapshotFailure(key: SnapshotKey): SnapshotFailure {
  return new SnapshotFailure(SNAPSHOT[key]);
}

/**
 * Runs a command action and turns its failures into one fixed stderr line and an exit code.
 * The exit code is set rather than calling process.exit, so piped stdout is never cut short.
 * An unexpected error (a bug) is exit 1 with a fixed line: never a stack trace.
 */
export async function runReadAction(action: () => Promise<void>): Promise<void> {
  try {
    await action();
  } catch (err) {
    if (err instanceof UsageFailure) {
      process.stderr.write(`svc-serving: error: ${err.message} (${helpHint})\n`);
      process.exitCode = EXIT.usage;
    } else if (err instanceof SnapshotFailure) {
      process.stderr.write(`svc-serving: error: ${err.message}\n`);
      process.exitCode = EXIT.snapshot;
    } else {
      process.stderr.write('svc-serving: error: unexpected failure\n');
      process.exitCode = EXIT.failure;
    }
  }
}

/**
 * The fixed failure for a read that did not yield JSON (or yielded it with a status we do not
 * read): 401 and 403 say so, 404 and 405 mean the route is not served (`notServed`).
 */
export function failureFor(o: Exclude<ReadOutcome, { kind: 'json' }>, notServed: SnapshotKey): SnapshotFailure {
  if (o.kind !== 'status') return snapshotFailure(o.kind);
  if (o.status === 401) return snapshotFailure('unauthenticated');
  if (o.status === 403) return snapshotFailure('forbidden');
  if (o.status === 404 || o.status === 405) return snapshotFailure(notServed);
  return new SnapshotFailure(statusMessage(o.status));
}
