import type { Command } from 'commander';
import { loadNodeConfig } from '../config/node-config.js';
import { runServer } from './run-server.js';

/** `svc-serving controller serve --config FILE`. */
export function registerControllerCommands(program: Command): void {
  const controller = program.command('controller').description('the node controller: folds owner observations, serves node_workloads');
  controller
    .command('serve')
    .description('run the node controller ([node] host_id, listen, nats_url?, authorization_policy, stale_after_seconds, state_dir)')
    .requiredOption('--config <file>', 'node configuration (TOML)')
    .action(async (opts: { config: string }) => {
      await runServer('controller', async (logger) => (await import('../servers/controller.js')).startController(loadNodeConfig(opts.config), { logger }));
    });
}
