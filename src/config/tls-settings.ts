import { resolve } from 'node:path';
import { createSecureContext } from 'node:tls';
import { Type } from '@sinclair/typebox';
import { ConfigError } from '../errors.js';
import { readSmallFile } from './read-small-file.js';

/** `tls_cert_file` and `tls_key_file` (PEM; both or neither) of `[server]`, `[node]` and `[fleet]`. */
export const TlsSettings = {
  /** PEM certificate chain (the server's certificate first): the listener then speaks HTTPS. */
  tls_cert_file: Type.Optional(Type.String({ minLength: 1, maxLength: 4096 })),
  /** PEM private key of tls_cert_file (unencrypted); re-read with the certificate on SIGHUP. */
  tls_key_file: Type.Optional(Type.String({ minLength: 1, maxLength: 4096 })),
};

/** Where a listener's certificate and key live (absolute paths). */
export interface TlsFiles {
  readonly certFile: string;
  readonly keyFile: string;
}

/** The PEM bytes of a certificate chain and its key, checked to load together. */
export interface TlsPair {
  readonly cert: Buffer;
  readonly key: Buffer;
}

/**
 * The TLS files of a config section (relative paths from the file's folder), or undefined
 * when it names neither. Thrown when: only one is named (ConfigError naming the missing one).
 */
export function tlsFiles(
  s: { readonly tls_cert_file?: string | undefined; readonly tls_key_file?: string | undefined },
  dir: string,
  what: string,
): TlsFiles | undefined {
  if (s.tls_cert_file === undefined && s.tls_key_file === undefined) return undefined;
  if (s.tls_key_file === undefined)
    throw new ConfigError(
      `${what} configuration: tls_key_file is missing (tls_cert_file and tls_key_file go together)`,
    );
  if (s.tls_cert_file === undefined)
    throw new ConfigError(
      `${what} configuration: tls_cert_file is missing (tls_cert_file and tls_key_file go together)`,
    );
  return { certFile: resolve(dir, s.tls_cert_file), keyFile: resolve(dir, s.tls_key_file) };
}

/** Largest certificate chain or key file read. */
const MAX_PEM_BYTES = 256 * 1024;

/** Why a PEM file cannot be used, in fixed words (never its path or content). */
function unreadable(err: unknown): string {
  const code = (err as { code?: unknown })?.code;
  if (code === 'ENOENT') return 'does not exist';
  if (code === 'ENOTREG' || code === 'EISDIR') return 'is not a regular file';
  if (code === 'EFBIG') return 'is larger than 256 KiB';
  return 'is not readable';
}

/**
 * Reads and checks a certificate chain and its key: both readable, PEM, and one pair (the
 * key belongs to the certificate). Thrown when: any of that fails (ConfigError naming the
 * member, `tls_cert_file` or `tls_key_file`, never a path or key material).
 */
export function readTlsPair(files: TlsFiles, what: string): TlsPair {
  const read = (path: string, member: string): Buffer => {
    let text: string;
    try {
      text = readSmallFile(path, MAX_PEM_BYTES);
    } catch (err) {
      throw new ConfigError(`${what} configuration: ${member} ${unreadable(err)}`);
    }
    return Buffer.from(text, 'utf8');
  };
  const cert = read(files.certFile, 'tls_cert_file');
  const key = read(files.keyFile, 'tls_key_file');
  if (!/-----BEGIN CERTIFICATE-----/.test(cert.toString('latin1')))
    throw new ConfigError(`${what} configuration: tls_cert_file holds no PEM certificate`);
  if (!/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(key.toString('latin1')))
    throw new ConfigError(`${what} configuration: tls_key_file holds no PEM private key`);
  try {
    // OpenSSL's own check: parses both and refuses a key that is not the certificate's.
    createSecureContext({ cert, key });
  } catch {
    throw new ConfigError(
      `${what} configuration: tls_cert_file and tls_key_file are not a valid PEM certificate and its private key`,
    );
  }
  return { cert, key };
}
