import { InvalidArgumentError, type Command } from 'commander';
import { ConfigError } from '../errors.js';
import { runServer } from './run-server.js';

function port(value: string): number {
  const n = /^[0-9]{1,5}$/.test(value) ? Number(value) : Number.NaN;
  if (!(n >= 0 && n <= 65535)) throw new InvalidArgumentError('expected a port');
  return n;
}

// Commander lets the last of a repeated option win; a server started with two different
// policies or controllers would silently use one of them, so a repeat is refused instead.
function once(): (value: string, previous: unknown) => string {
  return (value, previous) => {
    if (previous !== undefined) throw new InvalidArgumentError('given more than once');
    return value;
  };
}

interface DashboardFlags {
  host: string;
  port: number;
  authEnv?: string;
  workloadControllerUrl?: string;
  workloadExpectedNode?: string;
  workloadAuthorizationPolicy?: string;
  workloadFleetUrl?: string;
  tlsCertFile?: string;
  tlsKeyFile?: string;
  routerUrl?: string;
  routerAuthEnv?: string;
}

/**
 * `svc-serving dashboard serve --host H --port P [--auth-env E] [--workload-controller-url U
 * --workload-expected-node N --workload-authorization-policy F]` (CONTRACT.md).
 */
export function registerDashboardCommand(program: Command): void {
  const dashboard = program.command('dashboard').description('the local observability dashboard');
  dashboard
    .command('serve')
    .description('serve the dashboard: GPU telemetry, and workload reads when all three --workload-* options are valid')
    .option('--host <host>', 'address to listen on (without --auth-env, loopback only)', '127.0.0.1')
    .option('--port <port>', 'port to listen on (0 picks a free one)', port, 8200)
    .option(
      '--auth-env <ENV_NAME>',
      'environment variable holding the telemetry credential (required off loopback)',
      once(),
    )
    .option(
      '--workload-controller-url <url>',
      'node controller origin for workload reads (http only to loopback/private IPs)',
      once(),
    )
    .option('--workload-expected-node <host_id>', 'host ID the controller must answer for', once())
    .option(
      '--workload-authorization-policy <path>',
      'policy file checked before a credential is forwarded (needs workloads:read)',
      once(),
    )
    .option(
      '--workload-fleet-url <url>',
      'fleet controller origin for the Fleet view (with the three --workload-* options; --workload-expected-node must be one of its nodes)',
      once(),
    )
    .option(
      '--tls-cert-file <path>',
      'PEM certificate chain: serve HTTPS (with --tls-key-file; re-read on SIGHUP)',
      once(),
    )
    .option('--tls-key-file <path>', 'PEM private key of --tls-cert-file', once())
    .option('--router-url <url>', 'router origin the Requests view reads (http only to loopback/private IPs)', once())
    .option(
      '--router-auth-env <ENV_NAME>',
      'environment variable holding the router credential (a data-plane key or a requests:read token)',
      once(),
    )
    .action(async (flags: DashboardFlags) => {
      await runServer('dashboard', async (logger) => {
        if (flags.host.length === 0 || flags.host.length > 255) throw new ConfigError('--host is not an address');
        return (await import('../dashboard/dashboard.js')).startDashboard(
          {
            host: flags.host,
            port: flags.port,
            authEnv: flags.authEnv,
            workloadControllerUrl: flags.workloadControllerUrl,
            workloadExpectedNode: flags.workloadExpectedNode,
            workloadAuthorizationPolicy: flags.workloadAuthorizationPolicy,
            workloadFleetUrl: flags.workloadFleetUrl,
            tlsCertFile: flags.tlsCertFile,
            tlsKeyFile: flags.tlsKeyFile,
            routerUrl: flags.routerUrl,
            routerAuthEnv: flags.routerAuthEnv,
          },
          { logger },
        );
      });
    });
}
