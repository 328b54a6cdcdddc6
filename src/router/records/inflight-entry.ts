import type { RouteName } from '../../schema/terminal-record.js';

/** What the journal keeps of one request in flight: identifiers and timing, no content. */
export interface InflightEntry {
  readonly gateway_request_id: string;
  readonly request_id: string;
  readonly model: string;
  readonly route: RouteName;
  readonly started_at: string;
  readonly phase: string;
  readonly session_id?: string;
  readonly workbench_run_id?: string;
  readonly task_id?: string;
  /** The identity of the process that ran it, so that its interrupted record can carry it. */
  readonly routing_config_hash?: string;
  readonly package_version?: string;
}
