import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** One message delivered to a raw connection. */
export interface RawMsg {
  readonly subject: string;
  readonly reply: string | undefined;
  readonly payload: Buffer;
}

/**
 * A NATS client that speaks the text protocol itself, as an attacker with a stolen (or merely
 * least-privileged) credential would: no client library deciding what may be sent. It keeps
 * every `-ERR` line and every message, and counts the bytes it received.
 */
export class RawNats {
  readonly errors: string[] = [];
  readonly msgs: RawMsg[] = [];
  bytesIn = 0;
  #buf = Buffer.alloc(0);
  #sid = 0;
  #pongs = 0;

  private constructor(private readonly sock: Socket) {
    sock.on('data', (chunk: Buffer) => {
      this.bytesIn += chunk.length;
      this.#buf = Buffer.concat([this.#buf, chunk]);
      this.#parse();
    });
    sock.on('error', () => undefined);
  }

  /** Connects and authenticates; resolves after the server's PONG (the CONNECT was accepted). Thrown when: the server refuses the credentials. */
  static async open(port: number, user: string, pass: string): Promise<RawNats> {
    const sock = connect({ host: '127.0.0.1', port });
    await new Promise<void>((resolve, reject) => {
      sock.once('connect', () => resolve());
      sock.once('error', reject);
    });
    const c = new RawNats(sock);
    sock.write(
      `CONNECT ${JSON.stringify({ verbose: false, pedantic: false, user, pass, name: `raw-${user}`, lang: 'raw', version: '0', protocol: 1, echo: false })}\r\nPING\r\n`,
    );
    await c.#waitPongs(1);
    if (c.errors.some((e) => /authorization/i.test(e))) throw new Error(`raw connect refused for ${user}`);
    return c;
  }

  sub(subject: string): void {
    this.sock.write(`SUB ${subject} ${++this.#sid}\r\n`);
  }

  pub(subject: string, payload: string | Buffer = '', reply?: string): void {
    const body = typeof payload === 'string' ? Buffer.from(payload) : payload;
    this.sock.write(
      Buffer.concat([
        Buffer.from(`PUB ${subject}${reply ? ` ${reply}` : ''} ${body.length}\r\n`),
        body,
        Buffer.from('\r\n'),
      ]),
    );
  }

  /** Resolves once the server has processed everything sent so far (a PING answered). */
  async flush(): Promise<void> {
    const want = this.#pongs + 1;
    this.sock.write('PING\r\n');
    await this.#waitPongs(want);
  }

  close(): void {
    this.sock.destroy();
  }

  async #waitPongs(n: number): Promise<void> {
    const deadline = Date.now() + 5_000;
    while (this.#pongs < n) {
      if (Date.now() > deadline || this.sock.destroyed)
        throw new Error(`no PONG from the server (errors: ${this.errors.join('; ')})`);
      await sleep(5);
    }
  }

  #parse(): void {
    for (;;) {
      const eol = this.#buf.indexOf('\r\n');
      if (eol < 0) return;
      const line = this.#buf.subarray(0, eol).toString('latin1');
      if (line.startsWith('MSG ')) {
        // MSG <subject> <sid> [reply] <#bytes>
        const parts = line.split(' ');
        const size = Number(parts[parts.length - 1]);
        if (this.#buf.length < eol + 2 + size + 2) return;
        const payload = Buffer.from(this.#buf.subarray(eol + 2, eol + 2 + size));
        this.msgs.push({ subject: parts[1]!, reply: parts.length === 5 ? parts[3] : undefined, payload });
        this.#buf = this.#buf.subarray(eol + 2 + size + 2);
        continue;
      }
      this.#buf = this.#buf.subarray(eol + 2);
      if (line === 'PING') this.sock.write('PONG\r\n');
      else if (line === 'PONG') this.#pongs++;
      else if (line.startsWith('-ERR')) this.errors.push(line);
    }
  }
}

/** Bytes each authenticated user has sent to the server so far, from its `/connz` monitoring endpoint. */
export async function bytesSentByUser(monitorUrl: string): Promise<Map<string, number>> {
  const res = await fetch(`${monitorUrl}/connz?auth=true&limit=4096`);
  const body = (await res.json()) as { connections?: Array<{ authorized_user?: string; in_bytes?: number }> };
  const out = new Map<string, number>();
  for (const c of body.connections ?? []) {
    const user = c.authorized_user ?? '';
    out.set(user, (out.get(user) ?? 0) + (c.in_bytes ?? 0));
  }
  return out;
}
