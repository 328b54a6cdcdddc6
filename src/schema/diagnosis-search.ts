import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import {
  DIAGNOSIS_SCHEMA_ID,
  INTERPRETATION_CODES,
  MAX_LOOKUP_RECORDS,
  NOT_FOUND_INTERPRETATION,
  RouterStatus,
  diagnoseHistory,
  diagnoseLookup,
  type InterpretationCode,
  type LineageKey,
} from './diagnosis.js';
import { Truncation } from './envelopes.js';
import { refusedJson } from './json-duplicates.js';
import { HostId, literalUnion, parseTimestamp } from './primitives.js';
import { TerminalRecord } from './terminal-record.js';

/**
 * The diagnosis envelope as the fleet and the controller answer it (docs/api.md, "Fleet
 * request diagnosis"): the `svc-router-diagnosis/v1` members, plus `host` (the router that
 * holds the one record) and `search` (how asking the nodes went). Pure: the servers only ask
 * and hand the replies here.
 */

/** Hosts named in each list of `search`, at most; `count` is always the whole number. */
export const MAX_LISTED_HOSTS = 100;

export const SEARCH_OUTCOMES = ['found', 'several', 'not_found', 'incomplete'] as const;
export type SearchOutcome = (typeof SEARCH_OUTCOMES)[number];

const Code = literalUnion(INTERPRETATION_CODES);
const HostList = Type.Object(
  { count: Type.Integer({ minimum: 0 }), hosts: Type.Array(HostId, { maxItems: MAX_LISTED_HOSTS }) },
  { additionalProperties: false },
);
export type HostList = Static<typeof HostList>;

export const DiagnosisSearch = Type.Object(
  {
    outcome: literalUnion(SEARCH_OUTCOMES),
    declared: Type.Integer({ minimum: 0 }),
    asked: Type.Integer({ minimum: 0 }),
    answered: Type.Integer({ minimum: 0 }),
    holders: HostList,
    unreachable: HostList,
    failed: HostList,
    sleeping: HostList,
  },
  { additionalProperties: false },
);
export type DiagnosisSearch = Static<typeof DiagnosisSearch>;

const HostEntry = Type.Object(
  {
    host: HostId,
    request: TerminalRecord,
    interpretation: Type.Array(Code, { maxItems: INTERPRETATION_CODES.length }),
  },
  { additionalProperties: false },
);
export type HostEntry = Static<typeof HostEntry>;

export const FleetDiagnosis = Type.Object(
  {
    schema: Type.Literal(DIAGNOSIS_SCHEMA_ID),
    request: Type.Union([TerminalRecord, Type.Null()]),
    requests: Type.Optional(Type.Array(HostEntry, { maxItems: MAX_LOOKUP_RECORDS })),
    truncation: Type.Optional(Truncation),
    current_router: Type.Union([
      RouterStatus,
      Type.Object({ unavailable: Type.Literal(true) }, { additionalProperties: false }),
    ]),
    interpretation: Type.Array(Code, { maxItems: INTERPRETATION_CODES.length }),
    host: Type.Optional(HostId),
    search: DiagnosisSearch,
  },
  { additionalProperties: false },
);
export type FleetDiagnosis = Static<typeof FleetDiagnosis>;
export const checkFleetDiagnosis = TypeCompiler.Compile(FleetDiagnosis);
/** Its JSON Schema (the MCP tools' `outputSchema`). */
export const FLEET_DIAGNOSIS_JSON_SCHEMA = JSON.parse(JSON.stringify(FleetDiagnosis)) as object;

/** What asking one declared node produced. */
export type RouterAnswer =
  | { readonly kind: 'reply'; readonly data: Uint8Array }
  | { readonly kind: 'unreachable' }
  | { readonly kind: 'sleeping' };

/** One declared node and its answer. */
export interface AskedNode {
  readonly host: string;
  readonly answer: RouterAnswer;
}

const decoder = new TextDecoder('utf-8', { fatal: true });

/** A reply's JSON value, or undefined when it is not UTF-8 JSON or names a member twice. */
function replyJson(data: Uint8Array): unknown {
  try {
    const text = decoder.decode(data);
    const value: unknown = JSON.parse(text);
    return refusedJson(text, value) === undefined ? value : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The router's fixed 404 problem: `{type, title, status: 404, code: "not_found"}`, or without
 * `code` from a router older than revision 2; nothing else.
 */
function isNotFound(v: unknown): boolean {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o).sort().join(',');
  return (
    (keys === 'status,title,type' || (keys === 'code,status,title,type' && o['code'] === 'not_found')) &&
    o['status'] === 404 &&
    o['type'] === 'urn:svc-serving:problem:not-found'
  );
}

const list = (hosts: readonly string[]): HostList => ({ count: hosts.length, hosts: hosts.slice(0, MAX_LISTED_HOSTS) });

interface Tally {
  holders: string[];
  unreachable: string[];
  failed: string[];
  sleeping: string[];
  answered: number;
}

function tally(): Tally {
  return { holders: [], unreachable: [], failed: [], sleeping: [], answered: 0 };
}

/**
 * Never "not found" while a node could not be asked: `not_found` only when every node asked
 * answered; else `incomplete` ("not found on the nodes that answered").
 */
function search(nodes: number, t: Tally, several: boolean): DiagnosisSearch {
  const complete = t.unreachable.length === 0 && t.failed.length === 0;
  const outcome: SearchOutcome =
    t.holders.length > 1 && several
      ? 'several'
      : t.holders.length > 0
        ? 'found'
        : complete
          ? 'not_found'
          : 'incomplete';
  return {
    outcome,
    declared: nodes,
    asked: nodes - t.sleeping.length,
    answered: t.answered,
    holders: list(t.holders),
    unreachable: list(t.unreachable),
    failed: list(t.failed),
    sleeping: list(t.sleeping),
  };
}

// Members in the order router diagnose writes its envelope (schema, request, requests?,
// truncation?, current_router, interpretation), then host? and search.
const schema = DIAGNOSIS_SCHEMA_ID;
const current_router = { unavailable: true as const };

/**
 * The fleet's diagnosis of one request id from every node's `requests.get` reply (pure).
 * A node's reply is trusted for its own host only because only that host may serve its
 * subject (NATS permissions). One holder: its record, interpreted, and `host`. Several (a
 * legacy id that several routers saw): each in `requests` with its host, `request` null.
 */
export function composeRequestDiagnosis(id: string, asked: readonly AskedNode[]): FleetDiagnosis {
  const t = tally();
  const found: HostEntry[] = [];
  for (const { host, answer } of asked) {
    if (answer.kind === 'sleeping') t.sleeping.push(host);
    else if (answer.kind === 'unreachable') t.unreachable.push(host);
    else {
      const v = replyJson(answer.data);
      if (isNotFound(v)) {
        t.answered++;
        continue;
      }
      const d = v === undefined ? 'malformed' : diagnoseLookup(id, v);
      if (typeof d === 'string') t.failed.push(host);
      else {
        t.answered++;
        t.holders.push(host);
        found.push({ host, request: d.request, interpretation: d.interpretation });
      }
    }
  }
  const s = search(asked.length, t, true);
  if (found.length === 1)
    return {
      schema,
      request: found[0]!.request,
      current_router,
      interpretation: found[0]!.interpretation,
      host: found[0]!.host,
      search: s,
    };
  if (found.length > 1) {
    const requests = found.slice(0, MAX_LOOKUP_RECORDS);
    return {
      schema,
      request: null,
      requests,
      truncation: { returned: requests.length, omitted: found.length - requests.length },
      current_router,
      interpretation: [],
      search: s,
    };
  }
  const interpretation: InterpretationCode[] = s.outcome === 'not_found' ? [...NOT_FOUND_INTERPRETATION] : [];
  return { schema, request: null, current_router, interpretation, search: s };
}

/**
 * The fleet's diagnosis of a session (or task, or workbench run) from every node's
 * `requests.session` reply (pure): entries of all holders merged newest first, at most 50,
 * each with its host. `omitted` is exact only when every node asked answered with an exact
 * count; otherwise it is null (more may exist).
 */
export function composeHistoryDiagnosis(key: LineageKey, value: string, asked: readonly AskedNode[]): FleetDiagnosis {
  const t = tally();
  const all: HostEntry[] = [];
  let omitted: number | null = 0;
  for (const { host, answer } of asked) {
    if (answer.kind === 'sleeping') t.sleeping.push(host);
    else if (answer.kind === 'unreachable') t.unreachable.push(host);
    else {
      const v = replyJson(answer.data);
      const d = v === undefined ? 'malformed' : diagnoseHistory(key, value, v);
      if (typeof d === 'string') t.failed.push(host);
      else {
        t.answered++;
        if (d.requests.length > 0) t.holders.push(host);
        for (const e of d.requests) all.push({ host, request: e.request, interpretation: e.interpretation });
        omitted = omitted === null || d.truncation.omitted === null ? null : omitted + d.truncation.omitted;
      }
    }
  }
  const s = search(asked.length, t, false);
  // A node that could not be asked may hold more of them: how many is unknown.
  if (s.unreachable.count > 0 || s.failed.count > 0) omitted = null;
  all.sort((a, b) => parseTimestamp(b.request.finished_at) - parseTimestamp(a.request.finished_at));
  const requests = all.slice(0, MAX_LOOKUP_RECORDS);
  const truncation = {
    returned: requests.length,
    omitted: omitted === null ? null : omitted + all.length - requests.length,
  };
  const interpretation: InterpretationCode[] = s.outcome === 'not_found' ? [...NOT_FOUND_INTERPRETATION] : [];
  return { schema, request: null, requests, truncation, current_router, interpretation, search: s };
}

/**
 * Whether an answer's claims agree with each other (a reader's check of a fleet it did not
 * compose): the counts add up, `not_found` only with every node asked answering, and one
 * record with its host exactly when the outcome of a request search is `found`.
 */
export function diagnosisConsistent(d: FleetDiagnosis): boolean {
  const s = d.search;
  if (s.asked + s.sleeping.count !== s.declared || s.answered + s.unreachable.count + s.failed.count !== s.asked)
    return false;
  if (s.holders.count > s.answered) return false;
  const complete = s.unreachable.count === 0 && s.failed.count === 0;
  if (
    (s.outcome === 'not_found' || s.outcome === 'incomplete') &&
    (s.holders.count !== 0 || complete !== (s.outcome === 'not_found'))
  )
    return false;
  if ((d.request !== null) !== (d.host !== undefined)) return false;
  if (d.request !== null && (s.outcome !== 'found' || !s.holders.hosts.includes(d.host!))) return false;
  return true;
}
