import { InvalidInputError } from '../errors.js';
import { parseFilterArgs, type FilterArgs } from '../schema/filters.js';

export const TOOL_NAMES = ['node_workloads', 'fleet_workloads'] as const;
export type ToolName = (typeof TOOL_NAMES)[number];

/**
 * Parses a `/tools/call` body: exactly `{name, arguments?}`, `arguments` holding only present
 * filters. Thrown when: anything else is there (InvalidInputError).
 */
export function parseToolCall(body: unknown): { name: ToolName; args: FilterArgs } {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new InvalidInputError();
  for (const key of Object.keys(body)) if (key !== 'name' && key !== 'arguments') throw new InvalidInputError();
  const { name, arguments: args } = body as { name?: unknown; arguments?: unknown };
  if (typeof name !== 'string' || !(TOOL_NAMES as readonly string[]).includes(name)) throw new InvalidInputError();
  return { name: name as ToolName, args: parseFilterArgs(args) };
}
