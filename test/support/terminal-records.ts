/** Terminal records for router tests: generated ids and a valid record to vary. */
import type { TerminalRecord } from '../../src/schema/terminal-record.js';

export const hex = (n: number) => n.toString(16).padStart(32, '0');
export const gid = (n: number) => `req_${hex(n)}`;

/** A valid terminal record; `over` replaces members. */
export function rec(over: Partial<TerminalRecord> = {}): TerminalRecord {
  return {
    request_id: gid(1),
    model: 'm',
    route: 'chat.completions',
    outcome: 'success',
    status_code: 200,
    started_at: '2026-11-25T21:49:10.000Z',
    finished_at: '2026-11-25T21:49:10.123Z',
    latency_ms: 123,
    readiness_check_ms: 0.01,
    admission_wait_ms: 0,
    upstream_duration_ms: 120,
    time_to_first_content_ms: 30,
    finish_reason: 'stop',
    usage: { prompt_tokens: 3, completion_tokens: 4, prompt_source: 'upstream', completion_source: 'upstream' },
    output_limit: { requested: null, effective: 16, clamped: false },
    routing_config_hash: 'a'.repeat(64),
    package_version: '0.1.0',
    ...over,
  };
}
