import type { Command } from 'commander';
import { loadRouterConfig } from '../config/router-config.js';
import { runServer } from './run-server.js';

/** `svc-serving router serve --config FILE` (the read commands join this group in the CLI issue). */
export function registerRouterCommands(program: Command): Command {
  const router = program.command('router').description('the OpenAI-compatible router: relay, decision records, request lookups');
  router
    .command('serve')
    .description('run the router ([server] host_id, listen, api_keys_env, authorization_policy, decision_log_path; [[models]])')
    .requiredOption('--config <file>', 'router configuration (TOML)')
    .action(async (opts: { config: string }) => {
      await runServer('router', async (logger) => (await import('../servers/router.js')).startRouter(loadRouterConfig(opts.config), { logger }));
    });
  return router;
}
