import type { Command } from 'commander';
import { loadRouterConfig } from '../config/router-config.js';
import { runServer } from './run-server.js';

/** `svc-serving router serve --config FILE` (the read commands join this group in the CLI issue). */
export function registerRouterCommands(program: Command): Command {
  const router = program
    .command('router')
    .description('the OpenAI-compatible router: relay, decision records, request lookups');
  router
    .command('serve')
    .description(
      'run the router ([server] host_id, listen, api_keys_env, authorization_policy, decision_log_path; [[models]])',
    )
    .requiredOption('--config <file>', 'router configuration (TOML)')
    .addHelpText(
      'after',
      `
Configuration keys (docs/reference/config.md, examples/router.toml):
  [server]    host_id, listen, api_keys_env, authorization_policy, decision_log_path,
              decision_log_max_bytes, decision_log_max_files, buffer_size, readiness_ttl_ms,
              metrics_require_auth, stale_after_seconds, max_body_bytes,
              tls_cert_file, tls_key_file (HTTPS; re-read on SIGHUP),
              nats_url, nats_user, nats_password_env, nats_token_env (optional: without
              nats_url the bus is in-process; docs/reference/nats.md)
  [[models]]  alias, upstream or upstreams (replicas), max_attempts, upstream_model,
              upstream_api_key_env, max_output_tokens, max_concurrency, max_queue,
              queue_timeout_ms, upstream_timeout_ms, readiness_path
SIGHUP re-reads [[models]]; requests in flight finish on the configuration they began with.`,
    )
    .action(async (opts: { config: string }) => {
      let reload: (() => void) | undefined;
      // SIGHUP re-reads `[[models]]` (docs/operations.md); one during the start is ignored, not fatal.
      process.on('SIGHUP', () => reload?.());
      await runServer('router', async (logger) => {
        const handle = await (await import('../router/router.js')).startRouter(loadRouterConfig(opts.config), {
          logger,
        });
        reload = () => handle.reload(() => loadRouterConfig(opts.config));
        return handle;
      });
    });
  return router;
}
