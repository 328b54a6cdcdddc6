import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { eventually, spawnNode, type RunningProcess } from '../support/processes.js';

/**
 * The package as a user gets it: packed from a clean copy of the checkout (so `prepack` must
 * build the program), installed without devDependencies, and run. Two production installs run
 * side by side (better-sqlite3 compiles in each, one core apiece): the npm user's
 * (`npm install --omit=dev svc-serving-X.tgz` into an empty project) and the container image's
 * (the unpacked tarball with package-lock.json, `npm ci --omit=dev`, as the Dockerfile's
 * install stage runs it). Only an unreachable npm registry skips it.
 */
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  version: string;
  devDependencies: Record<string, string>;
};
// About 2 minutes on an idle 2-core machine; far more while other work shares the cores.
const INSTALL_TIMEOUT_MS = 480_000;

function registryUnreachable(): string | undefined {
  const r = spawnSync('npm', ['ping'], { encoding: 'utf8', timeout: 20_000 });
  return r.status === 0 ? undefined : `npm registry unreachable (npm ping: ${r.error?.message ?? `exit ${r.status}`})`;
}

/** Runs a command to completion without blocking the event loop; rejects with its output when it fails. */
function run(cmd: string, args: string[], cwd: string, env: Record<string, string> = {}): Promise<string> {
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

interface PackResult {
  filename: string;
  size: number;
  unpackedSize: number;
  files: { path: string }[];
}

const skip = registryUnreachable();

describe('the packed npm package, installed for production', { skip, timeout: 600_000 }, () => {
  const work = mkdtempSync(join(tmpdir(), 'svc-pack-'));
  let pack: PackResult;
  let tarball = '';
  const npmPrefix = join(work, 'npm-user');
  const imagePrefix = join(work, 'image', 'opt', 'svc-serving');
  const bin = join(npmPrefix, 'node_modules', '.bin', 'svc-serving');

  before(
    async () => {
      // A clean copy of the checkout: no dist/ or build/, so only prepack can put the program in.
      const clone = join(work, 'clone');
      cpSync(ROOT, clone, {
        recursive: true,
        filter: (src) => !/[/\\](node_modules|dist|build|\.git|test-artifacts)$/.test(src),
      });
      symlinkSync(join(ROOT, 'node_modules'), join(clone, 'node_modules'), 'dir');
      const out = await run('npm', ['pack', '--json', '--pack-destination', work], clone);
      pack = (JSON.parse(out.slice(out.indexOf('[\n'))) as PackResult[])[0]!;
      tarball = join(work, pack.filename);

      mkdirSync(npmPrefix);
      writeFileSync(
        join(npmPrefix, 'package.json'),
        JSON.stringify({ name: 'npm-user', private: true, allowScripts: { 'better-sqlite3': true } }),
      );
      mkdirSync(imagePrefix, { recursive: true });
      spawnSync('tar', ['-xzf', tarball, '-C', imagePrefix, '--strip-components=1']);
      copyFileSync(join(ROOT, 'package-lock.json'), join(imagePrefix, 'package-lock.json'));
      const quiet = ['--no-audit', '--no-fund', '--strict-allow-scripts'];
      await Promise.all([
        run('npm', ['install', '--omit=dev', ...quiet, tarball], npmPrefix),
        run('npm', ['ci', '--omit=dev', ...quiet], imagePrefix, { npm_config_build_from_source: 'true' }),
      ]);
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
    for (const dev of Object.keys(PKG.devDependencies))
      assert.ok(!existsSync(join(npmPrefix, 'node_modules', dev)), `devDependency ${dev} is not installed`);
    assert.ok(existsSync(join(npmPrefix, 'node_modules/better-sqlite3/build/Release/better_sqlite3.node')));
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

  it('config check accepts the shipped examples (when the installed program has config check)', (t) => {
    const help = spawnSync(bin, ['config', 'check', '--help'], { encoding: 'utf8' });
    if (help.status !== 0) {
      // TODO(lead): `config check` is being added in parallel; once merged this branch never runs.
      t.skip('this build has no `svc-serving config check`');
      return;
    }
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
          sources: { owner: string; status: string }[];
        };
      };
      const result = await eventually(async () => {
        const r = await read();
        return r.sources[0]?.status === 'complete' ? r : undefined;
      }, 10_000);
      assert.equal(result.schema, 'svc-workloads/v1');
      assert.equal(result.expected_host, 'local');
      assert.deepEqual(
        result.sources.map((s) => s.owner),
        ['router'],
      );
    });

    it("the Dockerfile's HEALTHCHECK command passes on a live /healthz and fails on a dead port", async (t) => {
      const probe = await fetch(`${routerUrl}/healthz`);
      if (probe.status === 404) {
        // TODO(lead): GET /healthz is being added in parallel (CONTRACT.md HTTP); once merged this branch never runs.
        t.skip('this build has no GET /healthz');
        return;
      }
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
