import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { INSTALL_TIMEOUT_MS, PKG, ROOT, packCleanCopy, registryUnreachable, run } from '../support/packed-package.js';

/**
 * The container image's production install, run here because no image can be built here: the
 * packed tarball unpacked with package-lock.json, then `npm ci --omit=dev` with better-sqlite3
 * built from source, as the Dockerfile's install stage does (decision 0066). Only an
 * unreachable npm registry skips it.
 */
const skip = registryUnreachable();

describe("the container image's install of the packed package", { skip, timeout: INSTALL_TIMEOUT_MS + 120_000 }, () => {
  const imagePrefix = join(mkdtempSync(join(tmpdir(), 'svc-image-')), 'opt', 'svc-serving');

  before(
    async () => {
      const pack = await packCleanCopy();
      mkdirSync(imagePrefix, { recursive: true });
      const untar = spawnSync('tar', ['-xzf', pack.tarball, '-C', imagePrefix, '--strip-components=1']);
      assert.equal(untar.status, 0);
      copyFileSync(join(ROOT, 'package-lock.json'), join(imagePrefix, 'package-lock.json'));
      await run('npm', ['ci', '--omit=dev', '--strict-allow-scripts', '--no-audit', '--no-fund'], imagePrefix, {
        npm_config_build_from_source: 'true',
      });
    },
    { timeout: INSTALL_TIMEOUT_MS + 60_000 },
  );

  it('is the install the Dockerfile runs', () => {
    const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
    assert.match(dockerfile, /tar -xzf \/tmp\/svc-serving-\*\.tgz -C \/opt\/svc-serving --strip-components=1/);
    assert.match(dockerfile, /cp package-lock\.json \/opt\/svc-serving\//);
    assert.match(dockerfile, /npm_config_build_from_source=true npm ci --omit=dev --strict-allow-scripts/);
  });

  it("the image's install (npm ci --omit=dev over the unpacked tarball) runs, with SQLite", () => {
    const v = spawnSync(process.execPath, [join(imagePrefix, 'dist/cli/main.js'), '--version'], { encoding: 'utf8' });
    assert.equal(v.status, 0, v.stderr);
    assert.equal(v.stdout.trim(), PKG.version);
    const db = spawnSync(
      process.execPath,
      [
        '-e',
        "const D = require('better-sqlite3'); console.log(new D(':memory:').prepare('select 40 + 2 as x').get().x)",
      ],
      { cwd: imagePrefix, encoding: 'utf8' },
    );
    assert.equal(db.stdout.trim(), '42', db.stderr);
    assert.ok(!existsSync(join(imagePrefix, 'node_modules/typescript')), 'no devDependencies');
  });
});
