import type { Command } from 'commander';
import { loadNodeConfig } from '../config/node-config.js';
import { runServer } from './run-server.js';

/** `svc-serving controller serve --config FILE`. */
export function registerControllerCommands(program: Command): void {
  const controller = program
    .command('controller')
    .description('the node controller: folds owner observations, serves node_workloads');
  controller
    .command('serve')
    .description(
      'run the node controller ([node] host_id, listen, nats_url?, authorization_policy, stale_after_seconds, state_dir)',
    )
    .requiredOption('--config <file>', 'node configuration (TOML)')
    .addHelpText(
      'after',
      `
Configuration keys (docs/reference/config.md, examples/node.toml):
  [node]      host_id, listen, authorization_policy, stale_after_seconds, state_dir,
              recipes_dir, manifests_dir, container_socket, router_url, router_key_env,
              media_dir, metrics_require_auth,
              tls_cert_file, tls_key_file (HTTPS; re-read on SIGHUP),
              nats_url, nats_user, nats_password_env, nats_token_env (optional: without
              nats_url the bus is in-process; docs/reference/nats.md)`,
    )
    .action(async (opts: { config: string }) => {
      await runServer('controller', async (logger) =>
        (await import('../controller/controller.js')).startController(loadNodeConfig(opts.config), { logger }),
      );
    });
}
