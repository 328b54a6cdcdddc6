import { spawn, spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The checkout's root. */
export const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  version: string;
  devDependencies: Record<string, string>;
};
// A production install compiles better-sqlite3: about 1.5 minutes on an idle 2-core machine,
// far more while other work shares the cores.
export const INSTALL_TIMEOUT_MS = 230_000;

/** Why the packaging tests cannot run (the npm registry does not answer), or undefined. */
export function registryUnreachable(): string | undefined {
  const r = spawnSync('npm', ['ping'], { encoding: 'utf8', timeout: 20_000 });
  return r.status === 0 ? undefined : `npm registry unreachable (npm ping: ${r.error?.message ?? `exit ${r.status}`})`;
}

/** Runs a command to completion without blocking the event loop. Thrown when: it fails (with its output). */
export function run(cmd: string, args: string[], cwd: string, env: Record<string, string> = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => p.kill('SIGKILL'), INSTALL_TIMEOUT_MS);
    p.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`${cmd} ${args.join(' ')} (in ${cwd}) ended ${code ?? signal}:\n${out.slice(-4000)}`));
    });
  });
}

export interface PackResult {
  filename: string;
  size: number;
  unpackedSize: number;
  files: { path: string }[];
  /** Absolute path of the tarball. */
  tarball: string;
}

/**
 * `npm pack` of a clean copy of the checkout (no dist/ or build/: only prepack can put the
 * program in), into a new temporary directory.
 */
export async function packCleanCopy(): Promise<PackResult> {
  const work = mkdtempSync(join(tmpdir(), 'svc-pack-'));
  const clone = join(work, 'clone');
  cpSync(ROOT, clone, {
    recursive: true,
    filter: (src) => !/[/\\](node_modules|dist|build|\.git|test-artifacts)$/.test(src),
  });
  symlinkSync(join(ROOT, 'node_modules'), join(clone, 'node_modules'), 'dir');
  const out = await run('npm', ['pack', '--json', '--pack-destination', work], clone);
  const pack = (JSON.parse(out.slice(out.indexOf('[\n'))) as Omit<PackResult, 'tarball'>[])[0]!;
  return { ...pack, tarball: join(work, pack.filename) };
}
