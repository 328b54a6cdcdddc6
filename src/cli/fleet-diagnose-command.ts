import type { Command } from 'commander';
import { envVar } from '../config/env-var.js';
import type { LineageKey } from '../schema/diagnosis.js';
import {
  checkFleetDiagnosis,
  diagnosisConsistent,
  type DiagnosisSearch,
  type FleetDiagnosis,
  type HostList,
} from '../schema/diagnosis-search.js';
import { GENERATED_ID_RE, LEGACY_ID_RE, OPAQUE_ID_RE } from '../schema/terminal-record.js';
import { formatRequest, formatSession } from './format-diagnosis.js';
import { DEFAULT_TIMEOUT_S, SafeReader } from './http-read.js';
import { checkOrigin } from '../auth/origin-policy.js';
import { UsageFailure, failureFor, runReadAction, snapshotFailure, type UsageKey } from './read-errors.js';
import { OptionTracker, checkCredential, checkEnvName, parseTimeout } from './settings.js';

interface RawFleetDiagnoseOptions {
  fleetUrl?: string;
  authEnv?: string;
  sessionId?: string;
  taskId?: string;
  workbenchRunId?: string;
  json?: boolean;
  timeout?: string;
}

type Call =
  | { name: 'request_diagnosis'; arguments: { request_id: string } }
  | { name: 'session_diagnosis'; arguments: Partial<Record<LineageKey, string>>; key: LineageKey; value: string };

const LINEAGE_OPTIONS: readonly {
  key: LineageKey;
  option: keyof RawFleetDiagnoseOptions;
  usage: UsageKey;
  label: string;
}[] = [
  { key: 'session_id', option: 'sessionId', usage: 'sessionId', label: 'Session' },
  { key: 'task_id', option: 'taskId', usage: 'taskId', label: 'Task' },
  { key: 'workbench_run_id', option: 'workbenchRunId', usage: 'workbenchRunId', label: 'Workbench run' },
];

/** Thrown when: not exactly one target, or its id is malformed (UsageFailure). */
function toolCall(id: string | undefined, o: RawFleetDiagnoseOptions): Call {
  const given = LINEAGE_OPTIONS.filter((l) => o[l.option] !== undefined);
  if ((id !== undefined ? 1 : 0) + given.length !== 1) throw new UsageFailure('fleetTarget');
  if (id !== undefined) {
    if (!GENERATED_ID_RE.test(id) && !LEGACY_ID_RE.test(id)) throw new UsageFailure('requestId');
    return { name: 'request_diagnosis', arguments: { request_id: id } };
  }
  const l = given[0]!;
  const value = o[l.option] as string;
  if (!OPAQUE_ID_RE.test(value)) throw new UsageFailure(l.usage);
  return { name: 'session_diagnosis', arguments: { [l.key]: value }, key: l.key, value };
}

const FLEET_ROUTER_NOTE =
  'Current router: not read (the fleet reads terminal records only; svc-serving router diagnose against a router shows its current status).';

// fleet diagnose has no --active: the hint names the command that has it.
const FLEET_EMPTY_SESSION = (what: string): string[] => [
  `No retained terminal record for this ${what} on the routers searched. Its requests may still be active`,
  '(svc-serving router diagnose --active against a router lists its own), may have been evicted or rotated out of',
  `the retained history, or a router does not serve ${what} lookup. None of these is proof that the ${what} did no work.`,
];

const hostsText = (l: HostList): string =>
  `${l.hosts.join(', ')}${l.count > l.hosts.length ? ` and ${l.count - l.hosts.length} more` : ''}`;

/** One line: how asking the nodes went (never "not found" while a node could not be asked). */
export function searchLine(s: DiagnosisSearch): string {
  const parts = [
    `asked ${s.asked} of ${s.declared} declared node${s.declared === 1 ? '' : 's'}${s.sleeping.count > 0 ? ` (${s.sleeping.count} sleeping: ${hostsText(s.sleeping)})` : ''}`,
    `${s.answered} answered`,
  ];
  if (s.holders.count > 0) parts.push(`held by ${hostsText(s.holders)}`);
  if (s.unreachable.count > 0)
    parts.push(`could not be asked (no answer from its router): ${hostsText(s.unreachable)}`);
  if (s.failed.count > 0) parts.push(`answered with something other than a lookup result: ${hostsText(s.failed)}`);
  return `search: ${parts.join('; ')}`;
}

/** The human text: the same diagnosis as `router diagnose`, with the holder's host and the search. */
export function formatFleetDiagnosis(call: Call, d: FleetDiagnosis): string {
  const head = (host: string | undefined): string => (host === undefined ? '' : `host: ${host}\n`);
  const search = `${searchLine(d.search)}\n`;
  const unasked = d.search.unreachable.count + d.search.failed.count;
  // A sleeping node is not asked: its router's retained records are not searched.
  const sleeping =
    d.search.sleeping.count === 0
      ? ''
      : `Not searched: ${d.search.sleeping.count} sleeping node${d.search.sleeping.count === 1 ? '' : 's'} (${hostsText(d.search.sleeping)}), whose records are not seen while ${d.search.sleeping.count === 1 ? 'it is' : 'they are'} declared sleeping.\n`;
  if (call.name === 'session_diagnosis') {
    const label = LINEAGE_OPTIONS.find((l) => l.key === call.key)!.label;
    let text = formatSession(
      call.value,
      d.requests ?? [],
      d.truncation ?? { returned: 0, omitted: null },
      d.current_router,
      { label, unavailableNote: FLEET_ROUTER_NOTE, emptyText: FLEET_EMPTY_SESSION },
    );
    if (d.search.outcome === 'incomplete')
      text = `${d.search.answered === 0 ? 'No node answered' : 'Nothing found on the nodes that answered'}; ${unasked} could not be asked, and may hold more.\n${text}`;
    return search + sleeping + text;
  }
  if (d.request !== null)
    return head(d.host) + search + formatRequest(d.request, d.interpretation, d.current_router, FLEET_ROUTER_NOTE);
  if (d.search.outcome === 'several') {
    const each = (d.requests ?? []).map(
      (e) => `host: ${e.host}\n${formatRequest(e.request, e.interpretation, d.current_router, FLEET_ROUTER_NOTE)}`,
    );
    return `${search}Several routers hold a record under this id (a caller's legacy id reused): one diagnosis per host.\n\n${each.join('\n')}`;
  }
  if (d.search.outcome === 'incomplete') {
    return `${search}${sleeping}${d.search.answered === 0 ? 'No node answered' : 'Not found on the nodes that answered'}; ${unasked} node${unasked === 1 ? '' : 's'} could not be asked, and the record may be there. Ask again when ${unasked === 1 ? 'it is' : 'they are'} back, or run svc-serving router diagnose against ${unasked === 1 ? 'its' : 'their'} router.\n`;
  }
  return search + sleeping + formatRequest(null, d.interpretation, d.current_router, FLEET_ROUTER_NOTE);
}

async function fleetDiagnose(id: string | undefined, o: RawFleetDiagnoseOptions, t: OptionTracker): Promise<void> {
  t.check();
  const call = toolCall(id, o);
  if (o.fleetUrl === undefined || o.authEnv === undefined) throw new UsageFailure('fleetConnection');
  const origin = checkOrigin(o.fleetUrl);
  const token = checkCredential(envVar(process.env, checkEnvName(o.authEnv)));
  const timeoutS = o.timeout !== undefined ? parseTimeout(o.timeout) : DEFAULT_TIMEOUT_S;
  const reader = new SafeReader(origin, token, timeoutS);
  try {
    // One sealed read: the fleet asks every declared node and composes the answer.
    const res = await reader.post('/tools/call', { name: call.name, arguments: call.arguments });
    if (res.kind === 'status' && res.status === 403) throw snapshotFailure('forbiddenRequests');
    // The fleet answers only once every node has (or its node_timeout_ms has passed).
    if (res.kind === 'timeout') throw snapshotFailure('fleetTimeout');
    if (res.kind !== 'json') throw failureFor(res, 'fleetDiagnosisNotServed');
    if (res.status !== 200 || !checkFleetDiagnosis.Check(res.body) || !diagnosisConsistent(res.body))
      throw snapshotFailure('malformed');
    const d = res.body;
    // The answer must be about what was asked: a holder's record of another id is not believed.
    const asked = call.name === 'request_diagnosis' ? call.arguments.request_id : undefined;
    const records = [...(d.request ? [d.request] : []), ...(d.requests ?? []).map((e) => e.request)];
    if (
      asked !== undefined &&
      records.some(
        (r) => r.request_id !== asked && !(GENERATED_ID_RE.test(asked) && !GENERATED_ID_RE.test(r.request_id)),
      )
    )
      throw snapshotFailure('lookupIdentity');
    if (call.name === 'session_diagnosis' && records.some((r) => r[call.key] !== call.value))
      throw snapshotFailure('lookupIdentity');
    process.stdout.write(o.json === true ? `${JSON.stringify(d, null, 2)}\n` : formatFleetDiagnosis(call, d));
  } finally {
    await reader.close();
  }
}

/** Registers `fleet diagnose [request-id]`. */
export function registerFleetDiagnoseCommand(fleet: Command): void {
  const t = new OptionTracker();
  fleet
    .command('diagnose')
    .description(
      "find the router holding a request (or a session's requests) across the fleet and explain it (svc-router-diagnosis/v1); one read of the fleet controller, no model request",
    )
    .argument('[request-id]', 'the request id (X-Svc-Request-Id, or a legacy caller id)')
    .option(
      '--fleet-url <url>',
      'fleet controller origin (HTTP only to loopback/private IPs); a node controller searches its own router only',
      t.value(),
    )
    .option('--auth-env <ENV_NAME>', 'environment variable holding the credential (needs requests:read)', t.value())
    .option(
      '--session-id <id>',
      "instead of a request id: the session's retained requests on every router, newest first",
      t.value(),
    )
    .option('--task-id <id>', 'instead of a request id: the requests that carried this X-Svc-Task-Id', t.value())
    .option(
      '--workbench-run-id <id>',
      'instead of a request id: the requests that carried this X-Svc-Workbench-Run-Id',
      t.value(),
    )
    .option('--json', 'print the envelope (with host and search), nothing else', t.flag())
    .option(
      '--timeout <seconds>',
      "per socket read, not a total deadline (0 < s <= 30, default 5); give it more than the fleet's node_timeout_ms, which the fleet may wait for a hung node",
      t.value(),
    )
    .addHelpText(
      'after',
      `
The fleet asks every declared, non-sleeping node's router at once and says where the record is:
  found        one router holds it: its diagnosis, as router diagnose prints it, with "host:"
  several      several routers hold a record under this (legacy) id: each one, with its host
  not found    every node asked answered, and none holds it
  incomplete   none of the nodes that answered holds it, but some could not be asked:
               never reported as "not found"
Each of these is an answer (exit 0); a fleet that could not be read is exit 4.`,
    )
    .action((id: string | undefined, o: RawFleetDiagnoseOptions) => runReadAction(() => fleetDiagnose(id, o, t)));
}
