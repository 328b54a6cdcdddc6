import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A throwaway CA made with `openssl` in a temp dir, and server certificates it signs. */
export interface TestPki {
  readonly dir: string;
  readonly caFile: string;
  /** A certificate for `san` (an openssl subjectAltName value); `days` < 0 makes an expired one. */
  issue(name: string, opts: { san: string; serial: number; days?: number }): { certFile: string; keyFile: string };
}

const openssl = (args: string[], cwd: string): void => {
  execFileSync('openssl', args, { cwd, stdio: 'ignore' });
};

export function makePki(): TestPki {
  const dir = mkdtempSync(join(tmpdir(), 'svc-pki-'));
  openssl(
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      'ca.key',
      '-out',
      'ca.pem',
      '-days',
      '2',
      '-subj',
      '/CN=svc test CA',
    ],
    dir,
  );
  return {
    dir,
    caFile: join(dir, 'ca.pem'),
    issue(name, opts) {
      writeFileSync(join(dir, `${name}.ext`), `subjectAltName=${opts.san}\n`);
      openssl(
        [
          'req',
          '-newkey',
          'rsa:2048',
          '-nodes',
          '-keyout',
          `${name}.key`,
          '-out',
          `${name}.csr`,
          '-subj',
          `/CN=${name}`,
        ],
        dir,
      );
      openssl(
        [
          'x509',
          '-req',
          '-in',
          `${name}.csr`,
          '-CA',
          'ca.pem',
          '-CAkey',
          'ca.key',
          '-set_serial',
          String(opts.serial),
          '-days',
          String(opts.days ?? 2),
          '-extfile',
          `${name}.ext`,
          '-out',
          `${name}.pem`,
        ],
        dir,
      );
      return { certFile: join(dir, `${name}.pem`), keyFile: join(dir, `${name}.key`) };
    },
  };
}
