import { InvalidInputError } from '../errors.js';

export const WORKLOAD_TOOL_NAMES = ['node_workloads', 'fleet_workloads'] as const;
export const REQUEST_TOOL_NAMES = ['request_diagnosis', 'session_diagnosis'] as const;
export const TOOL_NAMES = [...WORKLOAD_TOOL_NAMES, ...REQUEST_TOOL_NAMES] as const;
export type ToolName = (typeof TOOL_NAMES)[number];
export type WorkloadToolName = (typeof WORKLOAD_TOOL_NAMES)[number];
export type RequestToolName = (typeof REQUEST_TOOL_NAMES)[number];

export const isWorkloadTool = (n: ToolName): n is WorkloadToolName =>
  (WORKLOAD_TOOL_NAMES as readonly string[]).includes(n);

/**
 * Parses a `/tools/call` body: exactly `{name, arguments?}` with a known tool name. The
 * arguments are returned unread: each tool reads its own (filters, or a request or session id).
 * Thrown when: anything else is there (InvalidInputError).
 */
export function parseToolCall(body: unknown): { name: ToolName; args: unknown } {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new InvalidInputError();
  for (const key of Object.keys(body)) if (key !== 'name' && key !== 'arguments') throw new InvalidInputError();
  const { name, arguments: args } = body as { name?: unknown; arguments?: unknown };
  if (typeof name !== 'string' || !(TOOL_NAMES as readonly string[]).includes(name)) throw new InvalidInputError();
  return { name: name as ToolName, args };
}
