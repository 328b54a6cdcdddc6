import { Type } from '@sinclair/typebox';
import { InvalidArgumentError } from '../errors.js';
import { LINEAGE_KEYS, type LineageKey } from '../schema/diagnosis.js';
import { FLEET_DIAGNOSIS_JSON_SCHEMA, type FleetDiagnosis } from '../schema/diagnosis-search.js';
import { GENERATED_ID_RE, LEGACY_ID_RE, OPAQUE_ID_RE } from '../schema/terminal-record.js';
import type { McpTool } from './mcp-routes.js';

/**
 * The two request diagnosis tools (`request_diagnosis`, `session_diagnosis`) as the fleet and
 * the controller serve them over `/tools/call` and MCP: their input schemas, their strict
 * argument parsers, and their MCP descriptions. Where the answer comes from (every declared
 * node, or the controller's own host) is the caller's `ask`.
 */

const Opaque = (description: string) =>
  Type.String({ pattern: OPAQUE_ID_RE.source, minLength: 1, maxLength: 128, description });

/** `{request_id}`: a generated `req_` id or a legacy caller id. */
export const RequestDiagnosisArgs = Type.Object(
  {
    request_id: Type.String({
      pattern: `^(?:${GENERATED_ID_RE.source.slice(1, -1)}|${LEGACY_ID_RE.source.slice(1, -1)})$`,
      minLength: 1,
      maxLength: 128,
      description: "the request id: X-Svc-Request-Id (req_ + 32 hex), or the caller's own X-Request-Id",
    }),
  },
  { additionalProperties: false },
);

/** Exactly one of `{session_id}`, `{task_id}`, `{workbench_run_id}`. */
export const SessionDiagnosisArgs = Type.Object(
  {
    session_id: Type.Optional(Opaque('X-Svc-Session-Id of the requests')),
    task_id: Type.Optional(Opaque('X-Svc-Task-Id of the requests')),
    workbench_run_id: Type.Optional(Opaque('X-Svc-Workbench-Run-Id of the requests')),
  },
  { additionalProperties: false, minProperties: 1, maxProperties: 1 },
);

const REQUEST_JSON_SCHEMA = JSON.parse(JSON.stringify(RequestDiagnosisArgs)) as object;
const SESSION_JSON_SCHEMA = JSON.parse(JSON.stringify(SessionDiagnosisArgs)) as object;

const LINEAGE_WORDS: Readonly<Record<LineageKey, string>> = {
  session_id: 'not a session id',
  task_id: 'not a task id',
  workbench_run_id: 'not a workbench run id',
};

function plainObject(raw: unknown): Record<string, unknown> {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new InvalidArgumentError('arguments', 'must be an object');
  return raw as Record<string, unknown>;
}

/** Thrown when: not exactly `{request_id}` with a valid id (InvalidArgumentError naming it). */
export function parseRequestDiagnosisArgs(raw: unknown): string {
  const o = plainObject(raw);
  if (Object.keys(o).some((k) => k !== 'request_id'))
    throw new InvalidArgumentError('arguments', 'only request_id is accepted');
  const id = o['request_id'];
  if (id === undefined) throw new InvalidArgumentError('request_id', 'required');
  if (typeof id !== 'string' || !(GENERATED_ID_RE.test(id) || LEGACY_ID_RE.test(id)))
    throw new InvalidArgumentError('request_id', 'not a request id');
  return id;
}

/** Thrown when: not exactly one of session_id, task_id, workbench_run_id, a valid id (InvalidArgumentError naming it). */
export function parseSessionDiagnosisArgs(raw: unknown): { key: LineageKey; value: string } {
  const o = plainObject(raw);
  const keys = Object.keys(o);
  const key = LINEAGE_KEYS.find((k) => k === keys[0]);
  if (keys.length !== 1 || key === undefined)
    throw new InvalidArgumentError('arguments', 'give exactly one of session_id, task_id, workbench_run_id');
  const value = o[key];
  if (typeof value !== 'string' || !OPAQUE_ID_RE.test(value)) throw new InvalidArgumentError(key, LINEAGE_WORDS[key]);
  return { key, value };
}

/** Where the diagnosis tools read from: one request id, or one lineage value. */
export interface RequestAsker {
  request(id: string): Promise<FleetDiagnosis>;
  history(key: LineageKey, value: string): Promise<FleetDiagnosis>;
}

/** The `/tools/call` runners: raw arguments in, the envelope out. */
export function requestToolsCall(ask: RequestAsker): {
  request_diagnosis: (raw: unknown) => Promise<FleetDiagnosis>;
  session_diagnosis: (raw: unknown) => Promise<FleetDiagnosis>;
} {
  return {
    request_diagnosis: async (raw) => ask.request(parseRequestDiagnosisArgs(raw)),
    session_diagnosis: async (raw) => {
      const { key, value } = parseSessionDiagnosisArgs(raw);
      return ask.history(key, value);
    },
  };
}

/** The MCP tools (listed only to `requests:read` clients). `where`: "across the declared fleet" or "on this node". */
export function requestMcpTools(
  ask: RequestAsker,
  where: string,
): { request_diagnosis: McpTool<string>; session_diagnosis: McpTool<{ key: LineageKey; value: string }> } {
  return {
    request_diagnosis: {
      description: `Diagnose one router request ${where} by its id (svc-router-diagnosis/v1): its recorded phases (admission wait, readiness, upstream, first content), outcome, finish and usage provenance, with interpretation codes (e.g. length_finish, admission_rejected, startup_dominated). Also says which host's router holds it and which nodes could not be asked. Metadata only: no prompt or answer text.`,
      grant: 'requests:read',
      inputSchema: REQUEST_JSON_SCHEMA,
      outputSchema: FLEET_DIAGNOSIS_JSON_SCHEMA,
      parse: parseRequestDiagnosisArgs,
      run: (id) => ask.request(id),
    },
    session_diagnosis: {
      description: `Diagnose the retained requests ${where} of one session, task or workbench run (give exactly one of session_id, task_id, workbench_run_id): each request newest first with its host and interpretation codes, e.g. to find which calls waited in admission (admission wait) or hit a length finish. Metadata only.`,
      grant: 'requests:read',
      inputSchema: SESSION_JSON_SCHEMA,
      outputSchema: FLEET_DIAGNOSIS_JSON_SCHEMA,
      parse: parseSessionDiagnosisArgs,
      run: ({ key, value }) => ask.history(key, value),
    },
  };
}
