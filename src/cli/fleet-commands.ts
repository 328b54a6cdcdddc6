import type { Command } from 'commander';
import { loadFleetConfig } from '../config/fleet-config.js';
import { runServer } from './run-server.js';

/** The `fleet` command group: `fleet serve` (the read commands join it in read-commands.ts). */
export function registerFleetCommands(program: Command): Command {
  const fleet = program.command('fleet').description('the fleet controller and fleet-wide reads');
  fleet
    .command('serve')
    .description(
      'run the fleet controller ([fleet] listen, nats_url, authorization_policy, node_timeout_ms; [[nodes]] host_id, sleeping)',
    )
    .requiredOption('--config <file>', 'fleet configuration (TOML)')
    .addHelpText(
      'after',
      `
Configuration keys (docs/reference/config.md, deploy/fleet.toml):
  [fleet]     listen, authorization_policy, node_timeout_ms, metrics_require_auth,
              tls_cert_file, tls_key_file (HTTPS; re-read on SIGHUP),
              nats_url, nats_user, nats_password_env, nats_token_env (see docs/reference/nats.md)
  [[nodes]]   host_id, sleeping`,
    )
    .action(async (opts: { config: string }) => {
      await runServer('fleet', async (logger) =>
        (await import('../fleet/fleet.js')).startFleet(loadFleetConfig(opts.config), { logger }),
      );
    });
  return fleet;
}
