import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import {
  INSTALL_TIMEOUT_MS,
  PKG,
  ROOT,
  packCleanCopy,
  registryUnreachable,
  run,
  type PackResult,
} from '../support/packed-package.js';

/**
 * The package as an npm user gets it: packed from a clean copy of the checkout (so `prepack`
 * must build the program), installed with `npm install --omit=dev svc-serving-X.tgz` into an
 * empty project that approves better-sqlite3's install script (`--strict-allow-scripts`: no
 * other dependency may need one), and run. Then the same tarball installed the container
 * image's way (below). Only an unreachable npm registry skips them.
 */
const skip = registryUnreachable();

// One pack for both installs (prepack builds the program: once is enough).
let packing: Promise<PackResult> | undefined;
const packed = (): Promise<PackResult> => (packing ??= packCleanCopy());
// Where the npm user's install compiled better-sqlite3, once it has.
let userInstall: string | undefined;

describe('the packed npm package, installed for production', { skip, timeout: INSTALL_TIMEOUT_MS + 120_000 }, () => {
  const npmPrefix = join(mkdtempSync(join(tmpdir(), 'svc-npm-user-')), 'project');
  const bin = join(npmPrefix, 'node_modules', '.bin', 'svc-serving');
  let pack: PackResult;

  before(
    async () => {
      pack = await packed();
      mkdirSync(npmPrefix);
      writeFileSync(
        join(npmPrefix, 'package.json'),
        JSON.stringify({
          name: 'npm-user',
          private: true,
          allowScripts: { 'better-sqlite3': true, protobufjs: false },
        }),
      );
      await run(
        'npm',
        ['install', '--omit=dev', '--no-audit', '--no-fund', '--strict-allow-scripts', pack.tarball],
        npmPrefix,
      );
      userInstall = npmPrefix;
    },
    { timeout: INSTALL_TIMEOUT_MS + 60_000 },
  );

  it('the tarball holds the built program, the page, docs and examples, and no tests, build output, sources or secrets', () => {
    const paths = pack.files.map((f) => f.path);
    console.log(`# ${pack.filename}: ${pack.size} bytes packed, ${pack.unpackedSize} unpacked, ${paths.length} files`);
    for (const p of [
      'package.json',
      'README.md',
      'dist/cli/main.js',
      'dist/index.js',
      'dist/index.d.ts',
      'web/index.html',
      'docs/operations.md',
      'docs/reference/config.md',
      'examples/router.toml',
      'deploy/systemd/svc-serving-router.service',
    ])
      assert.ok(paths.includes(p), `the tarball has ${p}`);
    for (const p of paths) {
      assert.doesNotMatch(p, /^(test|build|src|bench|tools|node_modules|examples\/state|state)\//, p);
      assert.doesNotMatch(p, /\.map$|\.test\.|(^|\/)\.env|\.npmrc$|\.(pem|key|token)$|package-lock\.json$/, p);
    }
    assert.ok(pack.size < 2 * 1024 * 1024, `packed size ${pack.size} bytes stays under 2 MiB`);
  });

  it('the npm user gets a svc-serving command without devDependencies, better-sqlite3 compiled', () => {
    const v = spawnSync(bin, ['--version'], { encoding: 'utf8' });
    assert.equal(v.status, 0, v.stderr);
    assert.equal(v.stdout.trim(), PKG.version);
    // A devDependency that a production dependency also needs is installed for that one
    // (@types/node under protobufjs): only those none of the production tree asks for must be absent.
    const prodTree = spawnSync('npm', ['ls', '--all', '--omit=dev', '--parseable'], {
      cwd: npmPrefix,
      encoding: 'utf8',
    });
    for (const dev of Object.keys(PKG.devDependencies)) {
      if (prodTree.stdout.split('\n').some((p) => p.endsWith(`/node_modules/${dev}`))) continue;
      assert.ok(!existsSync(join(npmPrefix, 'node_modules', dev)), `devDependency ${dev} is not installed`);
    }
    assert.ok(!existsSync(join(npmPrefix, 'node_modules/typescript')), 'no compiler in a production install');
    assert.ok(existsSync(join(npmPrefix, 'node_modules/better-sqlite3/build/Release/better_sqlite3.node')));
  });

  it('config check accepts the shipped examples', () => {
    const examples = join(npmPrefix, 'node_modules/svc-serving/examples');
    const r = spawnSync(
      bin,
      [
        'config',
        'check',
        ...['router.toml', 'node.toml', 'policy.toml', 'node-policy.toml'].map((f) => join(examples, f)),
      ],
      {
        encoding: 'utf8',
        env: {
          PATH: process.env['PATH'] ?? '',
          SVC_READER_TOKEN: 'example-reader-token-0123',
          SVC_ADMIN_TOKEN: 'example-admin-token-0123',
          SVC_ROUTER_KEYS: 'example-router-key-0123',
        },
      },
    );
    assert.equal(r.status, 0, r.stdout + r.stderr);
  });

  describe('svc-serving up from the installed package', () => {
    const home = mkdtempSync(join(tmpdir(), 'svc-pack-home-'));
    let node: RunningProcess;
    let routerUrl = '';
    let controllerUrl = '';
    before(async () => {
      node = await spawnNode(bin, ['up', '--router-port', '0', '--controller-port', '0', '--dashboard-port', '0'], {
        env: { SVC_SERVING_HOME: home },
        cwd: home,
      });
      await eventually(() => /controller +(http:\/\/\S+)/.test(node.output()), 15_000);
      routerUrl = /router +(http:\/\/\S+)/.exec(node.output())![1]!;
      controllerUrl = /controller +(http:\/\/\S+)/.exec(node.output())![1]!;
    });
    after(async () => {
      assert.equal(await node.stop(), 0, 'exits 0 on SIGTERM');
    });

    it('answers a chat completion, then node_workloads shows the router source', async () => {
      const key = readFileSync(join(home, 'router.key'), 'utf8').trim();
      const chat = await fetch(`${routerUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-chat', messages: [{ role: 'user', content: 'hello' }] }),
      });
      assert.equal(chat.status, 200);
      const answer = (await chat.json()) as { choices: { message: { content: string } }[] };
      assert.ok(answer.choices[0]!.message.content.length > 0);

      const reader = readFileSync(join(home, 'reader.token'), 'utf8').trim();
      const read = async () => {
        const res = await fetch(`${controllerUrl}/tools/call`, {
          method: 'POST',
          headers: { authorization: `Bearer ${reader}`, 'content-type': 'application/json' },
          body: JSON.stringify({ name: 'node_workloads', arguments: { owner: 'router' } }),
        });
        assert.equal(res.status, 200);
        return (await res.json()) as {
          schema: string;
          expected_host: string;
          sources: { owner: string; status: string; records: { owner: string; kind: string }[] }[];
        };
      };
      // The router's record of the chat completion reaches the controller's view.
      const router = await eventually(async () => {
        const source = (await read()).sources.find((s) => s.owner === 'router');
        return source?.status === 'complete' && source.records.length > 0 ? source : undefined;
      }, 10_000);
      assert.ok(router.records.every((r) => r.owner === 'router'));
      const result = await read();
      assert.equal(result.schema, 'svc-workloads/v1');
      assert.equal(result.expected_host, 'local');
    });

    it("the Dockerfile's HEALTHCHECK command passes on a live /healthz and fails on a dead port", async () => {
      const probe = await fetch(`${routerUrl}/healthz`);
      assert.equal(probe.status, 200);
      const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
      const cmd = JSON.parse(/^\s*CMD (\[.*\])\s*$/m.exec(dockerfile.slice(dockerfile.indexOf('HEALTHCHECK')))![1]!);
      assert.equal(cmd[0], 'node');
      const check = (url: string) =>
        spawnSync(process.execPath, cmd.slice(1), {
          env: { SVC_HEALTHCHECK_URL: url },
          encoding: 'utf8',
          timeout: 10_000,
        });
      assert.equal(check(`${routerUrl}/healthz`).status, 0);
      assert.equal(check('http://127.0.0.1:9/healthz').status, 1);
    });
  });
});

/**
 * The container image's production install, run here because no image can be built here: the
 * packed tarball unpacked with package-lock.json, then `npm ci --omit=dev`, as the Dockerfile's
 * install stage does (decision 0066). The dependency tree is resolved exactly as the image
 * resolves it. The native build of better-sqlite3 is the npm user's above when both installs
 * resolve the same better-sqlite3 version (it is the same compile: one is enough for CI's
 * time), else this install compiles it from source as the image does.
 */
describe("the container image's install of the packed package", { skip, timeout: INSTALL_TIMEOUT_MS + 120_000 }, () => {
  const imagePrefix = join(mkdtempSync(join(tmpdir(), 'svc-image-')), 'opt', 'svc-serving');

  before(
    async () => {
      const pack = await packed();
      mkdirSync(imagePrefix, { recursive: true });
      const untar = spawnSync('tar', ['-xzf', pack.tarball, '-C', imagePrefix, '--strip-components=1']);
      assert.equal(untar.status, 0);
      copyFileSync(join(ROOT, 'package-lock.json'), join(imagePrefix, 'package-lock.json'));
      const sqliteVersion = (prefix: string): string | undefined => {
        const f = join(prefix, 'node_modules/better-sqlite3/package.json');
        return existsSync(f) ? (JSON.parse(readFileSync(f, 'utf8')) as { version: string }).version : undefined;
      };
      const ci = ['ci', '--omit=dev', '--strict-allow-scripts', '--no-audit', '--no-fund'];
      await run('npm', [...ci, '--ignore-scripts'], imagePrefix);
      const built = userInstall && join(userInstall, 'node_modules/better-sqlite3/build');
      if (built && existsSync(built) && sqliteVersion(userInstall!) === sqliteVersion(imagePrefix))
        cpSync(built, join(imagePrefix, 'node_modules/better-sqlite3/build'), { recursive: true });
      else
        await run('npm', ['rebuild', 'better-sqlite3'], imagePrefix, {
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
