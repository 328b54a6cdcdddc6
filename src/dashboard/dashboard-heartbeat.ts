/** How often each page's socket is pinged, and sent `beat` when nothing else went to it (told to the page in `hello`). */
export const HEARTBEAT_MS = 5_000;
/** A socket that answered no ping and sent nothing for this many heartbeats is cut. */
export const SILENT_BEATS = 3;
/** The frame a page is sent when it was sent nothing else for a heartbeat. */
export const BEAT_FRAME = '{"type":"beat"}';

/** The subset of the `ws` socket the heartbeat uses. */
export interface HeartbeatSocket {
  readonly readyState: number;
  ping(): void;
  send(data: string): void;
  terminate(): void;
}

/**
 * Keeps both ends of every page's WebSocket honest about a link that went silent (decision
 * 0037): a laptop that slept, a network that changed or a proxy that dropped the connection
 * without a FIN leaves a TCP connection that neither side sees close for many minutes.
 * - Server side: each socket is pinged every interval (the browser answers pings itself,
 *   even for a background tab); one that answered nothing and sent nothing for
 *   SILENT_BEATS intervals is cut, so a dead tab does not hold one of the 16 sockets its
 *   address may have (decision 0023).
 * - Page side: a socket that was sent nothing else for an interval is sent `beat`, so a page
 *   that hears nothing at all for several intervals knows its link is gone (app.js) and
 *   opens a new one, instead of saying "connected" for good.
 */
export class Heartbeat {
  private readonly live = new Map<HeartbeatSocket, { sentAt: number; heardAt: number }>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly intervalMs: number = HEARTBEAT_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /** Follows a socket from now on (call `forget` when it closes). */
  add(socket: HeartbeatSocket): void {
    const t = this.now();
    this.live.set(socket, { sentAt: t, heardAt: t });
  }

  forget(socket: HeartbeatSocket): void {
    this.live.delete(socket);
  }

  /** The page answered a ping or sent a message. */
  heard(socket: HeartbeatSocket): void {
    const s = this.live.get(socket);
    if (s) s.heardAt = this.now();
  }

  /** A frame went to the page. */
  sent(socket: HeartbeatSocket): void {
    const s = this.live.get(socket);
    if (s) s.sentAt = this.now();
  }

  start(): void {
    if (this.timer !== undefined) return;
    this.timer = setInterval(() => this.tick(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    this.live.clear();
  }

  /** One round: cut the silent sockets, ping the others, and send `beat` where nothing else went. */
  tick(): void {
    const t = this.now();
    for (const [socket, s] of this.live) {
      if (socket.readyState !== 1) continue;
      if (t - s.heardAt > SILENT_BEATS * this.intervalMs) {
        this.live.delete(socket);
        socket.terminate();
        continue;
      }
      try {
        socket.ping();
        if (t - s.sentAt >= this.intervalMs) {
          socket.send(BEAT_FRAME);
          s.sentAt = t;
        }
      } catch {
        // A socket closing as we write: its close handler forgets it.
      }
    }
  }
}
