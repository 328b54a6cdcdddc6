import type { Command } from 'commander';

/** Read commands of the router and fleet groups (workloads, diagnose). */
export function registerReadCommands(_router: Command, _fleet: Command): void {
  // filled in by the CLI read commands
}
