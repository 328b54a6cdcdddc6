import type { Command } from 'commander';
import { holdFleetFor, holdRouterAnswer } from '../schema/answer-checks.js';
import { checkNodeResult, type FleetResult, type NodeResult } from '../schema/envelopes.js';
import { FILTER_NAMES, parseFilterArgs, resolveFilters, type FilterArgs } from '../schema/filters.js';
import { isHostId } from '../schema/primitives.js';
import { detectStyle, formatFleetResult, formatNodeResult } from './format-workloads.js';
import { DEFAULT_TIMEOUT_S, SafeReader, MAX_FLEET_RESPONSE_BYTES, MAX_WORKLOAD_RESPONSE_BYTES } from './http-read.js';
import { checkOrigin } from '../auth/origin-policy.js';
import { UsageFailure, failureFor, runReadAction, snapshotFailure, type UsageKey } from './read-errors.js';
import { InvalidArgumentError } from '../errors.js';
import { OptionTracker, checkCredential, checkEnvName, parseTimeout } from './settings.js';
import { envVar } from '../config/env-var.js';

/** Raw option values as commander hands them over (strings; flags true). */
interface RawWorkloadOptions {
  routerUrl?: string;
  controllerUrl?: string;
  authEnv?: string;
  expectedNode?: string;
  owner?: string;
  kind?: string;
  state?: string;
  host?: string;
  activeOnly?: boolean;
  recentSeconds?: string;
  limit?: string;
  timeout?: string;
  json?: boolean;
}

const DECIMAL_RE = /^(?:0|[1-9][0-9]{0,8})$/;

/** The usage error that names each filter's option (the parser names the filter). */
const FILTER_USAGE: Readonly<Record<string, UsageKey>> = {
  owner: 'filterOwner',
  kind: 'filterKind',
  state: 'filterState',
  host: 'filterHost',
  recent_seconds: 'filterRecentSeconds',
  limit: 'filterLimit',
};

/**
 * The CLI filters as the shared `arguments` object: only present filters, validated by the
 * same parser the servers use, so the CLI can never send what a server would reject.
 * Thrown when: any value is malformed or out of range (UsageFailure naming its option, e.g.
 * 'filterLimit'; 'filter' should the parser name no known filter).
 */
export function filtersFromOptions(o: RawWorkloadOptions): FilterArgs {
  const args: Record<string, unknown> = {};
  const int = (v: string): number => (DECIMAL_RE.test(v) ? Number(v) : Number.NaN);
  if (o.owner !== undefined) args['owner'] = o.owner;
  if (o.kind !== undefined) args['kind'] = o.kind;
  if (o.state !== undefined) args['state'] = o.state;
  if (o.host !== undefined) args['host'] = o.host;
  if (o.activeOnly === true) args['active_only'] = true;
  if (o.recentSeconds !== undefined) args['recent_seconds'] = int(o.recentSeconds);
  if (o.limit !== undefined) args['limit'] = int(o.limit);
  try {
    return parseFilterArgs(args);
  } catch (err) {
    throw new UsageFailure((err instanceof InvalidArgumentError ? FILTER_USAGE[err.argument] : undefined) ?? 'filter');
  }
}

/** The filters as the router's query string, in the contract's order. */
export function filterQuery(f: FilterArgs): string {
  const q = new URLSearchParams();
  for (const name of FILTER_NAMES) {
    const v = f[name];
    if (v !== undefined) q.append(name, String(v));
  }
  const s = q.toString();
  return s === '' ? '' : `?${s}`;
}

function addOptions(cmd: Command, urlFlag: string, urlHelp: string, t: OptionTracker): Command {
  return cmd
    .option(`${urlFlag} <url>`, urlHelp, t.value())
    .option('--auth-env <ENV_NAME>', 'environment variable holding the credential (needs workloads:read)', t.value())
    .option(
      '--expected-node <host_id>',
      'host ID the contacted server must answer for (authenticates it; --host only filters)',
      t.value(),
    )
    .option('--owner <owner>', 'router, controller, benchmark, media, recipe or manifest', t.value())
    .option(
      '--kind <kind>',
      'router-request, controller-operation, benchmark-job, media-job or recipe-serve',
      t.value(),
    )
    .option('--state <state>', 'one workload state (e.g. running, terminal, unavailable)', t.value())
    .option('--host <host_id>', 'only records of this host (filters records, selects nothing)', t.value())
    .option('--active-only', 'only active work, excluding stale active observations', t.flag())
    .option('--recent-seconds <n>', 'terminal work updated within n seconds (1-86400, default 3600)', t.value())
    .option('--limit <n>', 'at most n records (1-1000, default 200)', t.value())
    .option(
      '--timeout <seconds>',
      "per socket read, not a total deadline (0 < s <= 30, default 5); for fleet workloads give it more than the fleet's node_timeout_ms",
      t.value(),
    )
    .option(
      '--json',
      'print the envelope as JSON after the checks (a status no more hopeful than its sources), nothing else',
      t.flag(),
    );
}

/** Checks the connection options shared by both commands; returns origin and credential. */
function connection(
  url: string | undefined,
  o: RawWorkloadOptions,
  maxBytes = MAX_WORKLOAD_RESPONSE_BYTES,
): { reader: SafeReader; expected: string } {
  // Commander reports missing required options with the operand-free 'a required option is
  // missing'; they are declared optional only so that repeats can be detected first.
  if (url === undefined || o.authEnv === undefined || o.expectedNode === undefined)
    throw new UsageFailure('missingConnection');
  if (!isHostId(o.expectedNode)) throw new UsageFailure('expectedNode');
  const timeoutS = o.timeout === undefined ? DEFAULT_TIMEOUT_S : parseTimeout(o.timeout);
  const origin = checkOrigin(url);
  const token = checkCredential(envVar(process.env, checkEnvName(o.authEnv)));
  return { reader: new SafeReader(origin, token, timeoutS, maxBytes), expected: o.expectedNode };
}

function print(json: boolean, body: unknown, human: () => string): void {
  process.stdout.write(json ? `${JSON.stringify(body, null, 2)}\n` : human());
}

/** `router workloads`: GET {router}/v1/workloads, one NodeResult for --expected-node. */
async function routerWorkloads(o: RawWorkloadOptions, t: OptionTracker): Promise<void> {
  t.check();
  const filters = filtersFromOptions(o);
  const { reader, expected } = connection(o.routerUrl, o);
  try {
    const res = await reader.get(`/v1/workloads${filterQuery(filters)}`);
    if (res.kind !== 'json') throw failureFor(res, 'routerNotServed');
    if (res.status !== 200 || !checkNodeResult.Check(res.body)) throw snapshotFailure('malformed');
    const node: NodeResult = res.body;
    // CONTRACT.md: a router NodeResult has exactly one source, the router's; held to the
    // claims the fleet holds a node's answer to (identity, record rules, filters, counts).
    const held = holdRouterAnswer(node, expected, resolveFilters(filters));
    if (held !== undefined) throw snapshotFailure(held === 'wrong-identity' ? 'routerIdentity' : 'malformed');
    print(o.json === true, node, () => formatNodeResult(node, detectStyle(process.stdout, process.env)));
  } finally {
    await reader.close();
  }
}

/**
 * `fleet workloads`: POST {controller}/tools/call fleet_workloads. A fleet result has no
 * identity of its own, so --expected-node must name one of its declared nodes: a server
 * whose fleet does not include that node is not the fleet the operator meant.
 */
async function fleetWorkloads(o: RawWorkloadOptions, t: OptionTracker): Promise<void> {
  t.check();
  const filters = filtersFromOptions(o);
  const { reader, expected } = connection(o.controllerUrl, o, MAX_FLEET_RESPONSE_BYTES);
  try {
    const res = await reader.post('/tools/call', { name: 'fleet_workloads', arguments: filters });
    // A fleet waits up to its node_timeout_ms for a hanging node: say so on a read timeout.
    if (res.kind === 'timeout') throw snapshotFailure('fleetTimeout');
    if (res.kind !== 'json') throw failureFor(res, 'fleetNotServed');
    if (res.status !== 200) throw snapshotFailure('malformed');
    // The expected node among the declared ones, then the fleet's own checks applied to what
    // its controller says (the dashboard's Fleet view holds it to the same, holdFleetFor).
    const held = holdFleetFor(res.body, expected, resolveFilters(filters));
    if (held === 'not-declared') throw snapshotFailure('fleetIdentity');
    if (held === 'wrong-identity') throw snapshotFailure('fleetRecordIdentity');
    if (held === 'malformed') throw snapshotFailure('malformed');
    const fleet: FleetResult = held;
    print(o.json === true, fleet, () => formatFleetResult(fleet, detectStyle(process.stdout, process.env)));
  } finally {
    await reader.close();
  }
}

/** Registers `router workloads` and `fleet workloads`. */
export function registerWorkloadsCommands(router: Command, fleet: Command): void {
  const rt = new OptionTracker();
  const rc = router
    .command('workloads')
    .description("read this router's workloads (svc-workloads/v1 NodeResult); observation only");
  addOptions(rc, '--router-url', 'router origin, e.g. http://127.0.0.1:8000 (HTTP only to loopback/private IPs)', rt);
  rc.action((o: RawWorkloadOptions) => runReadAction(() => routerWorkloads(o, rt)));

  const ft = new OptionTracker();
  const fc = fleet
    .command('workloads')
    .description("read the fleet's workloads (svc-workloads/v1 fleet result); observation only");
  addOptions(fc, '--controller-url', 'fleet controller origin (HTTP only to loopback/private IPs)', ft);
  fc.action((o: RawWorkloadOptions) => runReadAction(() => fleetWorkloads(o, ft)));
}
