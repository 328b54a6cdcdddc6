import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server,
  type ServerOptions,
  type ServerResponse,
} from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Server as TlsServer } from 'node:tls';
import type { Logger } from 'pino';
import { readTlsPair, type TlsFiles, type TlsPair } from '../config/tls-settings.js';
import { ConfigError } from '../errors.js';

/**
 * A listener's certificate and key (CONTRACT.md revision 2: `tls_cert_file`, `tls_key_file`),
 * re-read on SIGHUP. A pair that fails to load on reload leaves the one in use in place.
 * Logs say which files were (or could not be) loaded; key material never reaches a log.
 */
export class ReloadableTls {
  private pair: TlsPair;
  private readonly servers = new Set<TlsServer>();

  /** Thrown when: the files cannot be read or are not one PEM certificate and key (ConfigError). */
  constructor(
    readonly files: TlsFiles,
    private readonly what: string,
    private readonly logger: Logger,
  ) {
    this.pair = readTlsPair(files, what);
  }

  /** The certificate and key in use, as node:https options. */
  get options(): { readonly cert: Buffer; readonly key: Buffer } {
    return { cert: this.pair.cert, key: this.pair.key };
  }

  /**
   * Re-reads both files; when they load, every watched server presents them to new
   * connections (connections already open keep theirs). Returns whether they were taken.
   */
  reload(): boolean {
    let next: TlsPair;
    try {
      next = readTlsPair(this.files, this.what);
    } catch (err) {
      const reason = err instanceof ConfigError ? err.message : 'the files could not be loaded';
      this.logger.warn({ reason }, 'tls reload failed: keeping the certificate in use');
      return false;
    }
    for (const s of this.servers) s.setSecureContext({ cert: next.cert, key: next.key });
    this.pair = next;
    this.logger.info({ cert_file: this.files.certFile, key_file: this.files.keyFile }, 'tls certificate reloaded');
    return true;
  }

  /** Reloads for `server` on every SIGHUP until the returned function is called. */
  watch(server: TlsServer): () => void {
    this.servers.add(server);
    const onHup = (): void => {
      this.reload();
    };
    process.on('SIGHUP', onHup);
    return () => {
      this.servers.delete(server);
      process.off('SIGHUP', onHup);
    };
  }
}

/** The reloadable pair of a listener's `tls` settings, or undefined for plain HTTP. Thrown when: as ReloadableTls. */
export function reloadableTls(files: TlsFiles | undefined, what: string, logger: Logger): ReloadableTls | undefined {
  return files === undefined ? undefined : new ReloadableTls(files, what, logger);
}

/** A node:http server, or a node:https one with the same options when `tls` is set (the router's own server). */
export function createNodeServer(
  tls: ReloadableTls | undefined,
  options: ServerOptions,
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Server {
  // An https.Server is an http.Server over TLS: every request and connection API is the same.
  return tls
    ? (createHttpsServer({ ...options, ...tls.options }, handler) as unknown as Server)
    : createHttpServer(options, handler);
}
