import type { Command } from 'commander';

/** The `fleet` command group (`fleet serve` joins it with the fleet controller). */
export function registerFleetCommands(program: Command): Command {
  return program.command('fleet').description('the fleet controller and fleet-wide reads');
}
