import { readFileSync } from 'node:fs';

// dist/version.js sits one level under the package root; build/src/version.js (tests) two.
function readVersion(): string {
  for (const rel of ['../package.json', '../../package.json']) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(rel, import.meta.url), 'utf8')) as {
        name?: string;
        version?: string;
      };
      if (pkg.name === 'svc-serving' && pkg.version) return pkg.version;
    } catch {
      // try the next candidate
    }
  }
  return '0.0.0';
}

/** This package's version, read once from its package.json. */
export const PACKAGE_VERSION: string = readVersion();
