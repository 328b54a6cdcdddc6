import { InvalidArgumentError, type Command } from 'commander';
import { ensureLocalCredentials } from '../config/local-home.js';
import { isHostId } from '../schema/primitives.js';
import { parseNatsServers } from '../config/nats-url.js';
import { ConfigError, ErrorCode, SvcError } from '../errors.js';
import { runServer } from './run-server.js';

function port(value: string): number {
  const n = /^[0-9]{1,5}$/.test(value) ? Number(value) : Number.NaN;
  if (!(n >= 0 && n <= 65535)) throw new InvalidArgumentError('expected a port');
  return n;
}
function hostId(value: string): string {
  if (!isHostId(value))
    throw new InvalidArgumentError('expected a host ID (1-64 ASCII letters, digits, "-" or "_"; first a letter)');
  return value;
}
/** The same grammar as `nats_url`: one server, or a cluster's servers separated by commas. */
function natsUrl(value: string): string[] {
  try {
    return parseNatsServers(value, '--nats-url');
  } catch (err) {
    if (err instanceof ConfigError) throw new InvalidArgumentError(err.message);
    throw err;
  }
}

/** `svc-serving up [--nats-url URL] [--demo-traffic]`: the whole node in one process. */
export function registerUpCommand(program: Command): void {
  program
    .command('up')
    .description(
      'run a whole node in one process: engine sim, router, controller and dashboard on the in-process bus (or NATS)',
    )
    .option(
      '--nats-url <urls>',
      'run the same node on NATS instead of the in-process bus (one server, or several separated by commas)',
      natsUrl,
    )
    .option('--demo-traffic', 'keep a gentle stream of requests going so the inventory shows live work')
    .option('--host-id <id>', "this node's host ID", hostId, 'local')
    .option('--router-port <port>', 'router port', port, 8000)
    .option('--controller-port <port>', 'controller port', port, 8100)
    .option('--dashboard-port <port>', 'dashboard port', port, 8200)
    .action(
      async (flags: {
        natsUrl?: string[];
        demoTraffic?: boolean;
        hostId: string;
        routerPort: number;
        controllerPort: number;
        dashboardPort: number;
      }) => {
        await runServer('up', async (logger) => {
          const creds = ensureLocalCredentials();
          let node: Awaited<ReturnType<typeof import('../up/local-node.js')['startLocalNode']>>;
          try {
            node = await (await import('../up/local-node.js')).startLocalNode({
              hostId: flags.hostId,
              bindHost: '127.0.0.1',
              routerPort: flags.routerPort,
              controllerPort: flags.controllerPort,
              natsUrl: flags.natsUrl,
              demoTraffic: flags.demoTraffic === true,
              creds,
              logger,
              dashboardPort: flags.dashboardPort,
            });
          } catch (err) {
            // `up` has no configuration of the user's: what its parts call a configuration error
            // is about the state it keeps under the service home.
            if (!(err instanceof ConfigError) || !/decision_log_path|state_dir/.test(err.message)) throw err;
            if (/in use by another running/.test(err.message)) {
              throw new SvcError(
                ErrorCode.UNAVAILABLE,
                `${creds.home} is in use by another running svc-serving up (stop it first, or set SVC_SERVING_HOME to another directory)`,
              );
            }
            throw new SvcError(
              ErrorCode.UNAVAILABLE,
              `the node's state under ${creds.home} cannot be used (${err.message.replace(/^(router|node) configuration: /, '')})`,
            );
          }
          process.stderr.write(
            [
              '',
              `svc-serving node "${flags.hostId}" is up (${flags.natsUrl ? 'NATS' : 'in-process bus'}).`,
              `  router      ${node.routerUrl}   (OpenAI-compatible; model alias "sim-chat")`,
              `  controller  ${node.controllerUrl}   (POST /tools/call node_workloads)`,
              `  dashboard   ${node.dashboardUrl}   (open it; paste the contents of ${creds.readerTokenFile} into the Workloads tab)`,
              `  credentials ${creds.readerTokenFile} (workloads:read, requests:read), ${creds.routerKeyFile} (router data-plane key)`,
              '',
              '  Read the inventory:',
              `    curl -s -X POST ${node.controllerUrl}/tools/call -H "Authorization: Bearer $(cat ${creds.readerTokenFile})" \\`,
              `      -H 'content-type: application/json' -d '{"name":"node_workloads","arguments":{}}'`,
              '',
            ].join('\n') + '\n',
          );
          return node;
        });
      },
    );
}
