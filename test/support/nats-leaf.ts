import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { freePort } from './free-port.js';
import { copyShipped, monitor, startShipped, type ShippedServer } from './nats-cluster.js';
import { eventually } from './processes.js';

export interface NatsLeafSetup {
  readonly hub: ShippedServer;
  readonly site: ShippedServer;
  /** The hub's leaf node port (loopback). */
  readonly leafPort: number;
  stop(): Promise<void>;
}

/**
 * deploy/nats-leaf on loopback: hub.conf, and site-east.conf as a leaf node of it. Free client,
 * leaf and monitoring ports; the passwords and the site's hub URL in nats-server's environment
 * as the files say. Resolves once the hub sees the site's leaf connection.
 */
export async function startShippedLeaf(env: Record<string, string>): Promise<NatsLeafSetup> {
  const copy = copyShipped('nats-leaf');
  const leafPort = await freePort();
  copy.edit('hub.conf', 'leafnodes {\n  port: 7422\n}', `leafnodes {\n  host: 127.0.0.1\n  port: ${leafPort}\n}`);
  const started: ShippedServer[] = [];
  const stop = async (): Promise<void> => {
    for (const s of started.reverse()) await s.stop();
    copy.remove();
  };
  try {
    const hub = await startShipped('hub', join(copy.dir, 'hub.conf'), env);
    started.push(hub);
    const hubLeafUrl = `nats-leaf://site-east:${env['SITE_EAST_LEAF_PASSWORD']}@127.0.0.1:${leafPort}`;
    const site = await startShipped('site-east', join(copy.dir, 'site-east.conf'), {
      ...env,
      HUB_LEAF_URL: hubLeafUrl,
    });
    started.push(site);
    await eventually(async () => (await monitor<{ leafnodes: number }>(hub, '/leafz')).leafnodes === 1, 10_000, 100);
    return { hub, site, leafPort, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/**
 * A leaf node connection spoken by hand: what a site's server could send if it ignored the
 * permissions the hub announces to it (a modified or misconfigured server; nats-server itself
 * obeys them). It logs in as a leaf user and sends LMSG frames straight to the hub.
 */
export class RawLeaf {
  readonly #socket: Socket;
  #received = '';

  private constructor(socket: Socket) {
    this.#socket = socket;
    socket.on('data', (d: Buffer) => {
      this.#received += d.toString('latin1');
      // Keep the link alive however long the test holds it.
      if (this.#received.endsWith('PING\r\n')) socket.write('PONG\r\n');
    });
  }

  /** Thrown when: the hub does not answer the login with PONG within 3 s (refused credentials). */
  static async login(port: number, user: string, pass: string): Promise<RawLeaf> {
    const socket = connect({ host: '127.0.0.1', port });
    const leaf = new RawLeaf(socket);
    await eventually(() => leaf.#received.startsWith('INFO '), 3000, 20);
    socket.write(`CONNECT ${JSON.stringify({ user, pass, name: 'raw-leaf', hub: false, headers: true })}\r\nPING\r\n`);
    await eventually(() => leaf.#received.includes('PONG\r\n'), 3000, 20);
    return leaf;
  }

  /** Sends one message into the hub as if the site had published it. */
  publish(subject: string, data: Uint8Array): void {
    this.#socket.write(`LMSG ${subject} ${data.length}\r\n`);
    this.#socket.write(data);
    this.#socket.write('\r\n');
  }

  /** Resolves once the hub has read everything sent before (PING answered). */
  async flush(): Promise<void> {
    const pongs = (): number => this.#received.split('PONG\r\n').length;
    const before = pongs();
    this.#socket.write('PING\r\n');
    await eventually(() => pongs() > before, 3000, 20);
  }

  close(): void {
    this.#socket.destroy();
  }
}
