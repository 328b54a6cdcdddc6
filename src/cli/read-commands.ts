import type { Command } from 'commander';
import { registerDiagnoseCommand } from './diagnose-command.js';
import { registerFleetDiagnoseCommand } from './fleet-diagnose-command.js';
import { registerWorkloadsCommands } from './workloads-command.js';

/**
 * Read commands of the router and fleet groups: `router workloads`, `fleet workloads`,
 * `router diagnose` and `fleet diagnose`. They only read: every one is an authenticated GET or a sealed
 * `/tools/call` read through the one safe client (src/cli/http-read.ts), with fixed errors
 * (src/cli/read-errors.ts) and exit codes 0 (any valid snapshot), 2 (usage), 4 (failed read).
 */
export function registerReadCommands(router: Command, fleet: Command): void {
  registerWorkloadsCommands(router, fleet);
  registerDiagnoseCommand(router);
  registerFleetDiagnoseCommand(fleet);
}
