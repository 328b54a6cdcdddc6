import { rootCertificates } from 'node:tls';
import type { Command } from 'commander';
import { envVar } from '../config/env-var.js';
import { readSmallFile } from '../config/read-small-file.js';

/** The commands that read a server over HTTP(S), by path: they take `--ca-file`. */
export const HTTPS_CLIENT_COMMANDS: ReadonlySet<string> = new Set([
  'router workloads',
  'router diagnose',
  'fleet workloads',
  'fleet diagnose',
  'bench run',
  'bench cancel',
  'recipe apply',
  'recipe stop',
]);

const MAX_CA_BYTES = 1024 * 1024;
const PEM_CERT = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/**
 * The CAs the CLI's reads trust: Node's bundled roots plus the certificates of `--ca-file`
 * (else the file `SVC_CA_FILE` names), or undefined when neither is given (the bundled roots
 * alone). The origin rules are unchanged: plain HTTP still goes to loopback and private IP
 * literals only, and a name or date the certificate does not cover is still refused.
 * Thrown when: the file is unreadable or holds no PEM certificate (Error; the caller says so
 * in fixed words).
 */
export function trustedCas(option: string | undefined, env: NodeJS.ProcessEnv): string[] | undefined {
  const file = option ?? (envVar(env, 'SVC_CA_FILE') || undefined);
  if (file === undefined) return undefined;
  const certs = readSmallFile(file, MAX_CA_BYTES).match(PEM_CERT);
  if (!certs) throw new Error('no PEM certificate');
  return [...rootCertificates, ...certs];
}

let extraCas: readonly string[] | undefined;

/** What SafeReader connects with (undefined: the bundled roots). */
export function currentCas(): readonly string[] | undefined {
  return extraCas;
}

/** Adds `--ca-file` to every HTTPS client command and reads it (or SVC_CA_FILE) before the action. */
export function addCaFileOption(cmd: Command): void {
  cmd.option(
    '--ca-file <file>',
    'also trust the CA certificates of this PEM file for HTTPS (default: the file SVC_CA_FILE names)',
  );
  cmd.hook('preAction', (self) => {
    extraCas = undefined;
    try {
      extraCas = trustedCas(self.getOptionValue('caFile') as string | undefined, process.env);
    } catch {
      self.error('--ca-file (or SVC_CA_FILE) names a file that is not readable or holds no PEM certificate', {
        code: 'svc.caFile',
        exitCode: 2,
      });
    }
  });
}
