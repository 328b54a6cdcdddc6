import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runCli } from './run-cli.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'svc-config-check-'));
let n = 0;

function write(text: string, name = `f${++n}.toml`): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

/** Every TOML file under `sub` of the checkout. */
function tomlFiles(sub: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d)) {
      const p = join(d, e);
      if (statSync(p).isDirectory()) walk(p);
      else if (e.endsWith('.toml')) out.push(relative(ROOT, p));
    }
  };
  walk(join(ROOT, sub));
  return out;
}

const POLICY = write(
  '[[clients]]\nid = "reader"\ngrants = ["workloads:read"]\ncredential_env = "CC_READER"\n',
  'policy.toml',
);

describe('config check: router, node, fleet, policy, recipe and manifest files (built CLI)', () => {
  it('every shipped example (deploy/, examples/, the recipe fixtures) is valid: one "ok" line each, exit 0', async () => {
    const files = [...tomlFiles('deploy'), ...tomlFiles('examples'), ...tomlFiles('test/recipes/config')];
    assert.ok(files.length >= 12, files.join(' '));
    const r = await runCli(['config', 'check', ...files], {}, { cwd: ROOT });
    assert.equal(r.code, 0, r.stdout + r.stderr);
    for (const f of files)
      assert.match(r.stdout, new RegExp(`^${f}: ok \\((router|node|fleet|policy|recipe|manifest)\\)$`, 'm'));
    assert.match(r.stdout, /^deploy\/fleet\.toml: ok \(fleet\)$/m);
    assert.match(r.stdout, /^examples\/router\.toml: ok \(router\)$/m);
    assert.match(r.stdout, /^test\/recipes\/config\/manifests\/node-a\.toml: ok \(manifest\)$/m);
    assert.match(r.stdout, /^test\/recipes\/config\/recipes\/qwen-7b\.toml: ok \(recipe\)$/m);
    // The runtime environment is not here: a warning each, which changes nothing.
    assert.match(
      r.stdout,
      /^examples\/router\.toml:6: server\.api_keys_env: warning: environment variable SVC_ROUTER_KEYS is not set here$/m,
    );
    assert.equal(r.stderr, '');
  });

  it('every problem of a file at once, as file:line: key: reason, exit 2; never a value, not even a secret written inline', async () => {
    const canary = 'sk-canary-7f3a9e1d0c';
    const f = write(
      [
        '[server]', // 1
        'host_id = "not a host id"', // 2
        'listen = "127.0.0.1:99999"', // 3
        'api_keys_env = "CC_KEYS"', // 4
        `api_key = "${canary}"`, // 5
        `"${canary}" = 1`, // 6
        'buffer_size = 2.0', // 7
        'tls_cert_file = "cert.pem"', // 8
        '', // 9
        '[[models]]', // 10
        'alias = "m1"', // 11
        'upstream = "ftp://engine/v1"', // 12
        'max_concurrency = 0', // 13
        '', // 14
        '[[models]]', // 15
        'alias = "m2"', // 16
        'upstream = "http://127.0.0.1:1/v1"', // 17
        'max_queue = -1', // 18
        '',
      ].join('\n'),
    );
    const r = await runCli(['config', 'check', f], { CC_KEYS: 'k1' });
    assert.equal(r.code, 2, r.stdout + r.stderr);
    assert.equal(
      r.stdout,
      [
        `${f}:1: server.tls_key_file: is missing (tls_cert_file and tls_key_file go together)`,
        `${f}:2: server.host_id: does not have the expected form`,
        `${f}:3: server.listen: must be HOST:PORT (port 0 to 65535)`,
        `${f}:5: server.api_key: unknown key (not allowed here)`,
        `${f}:6: server.?: unknown key (not allowed here)`,
        `${f}:7: server.buffer_size: must be an integer (no decimal point)`,
        `${f}:12: models[0].upstream: does not have the expected form (an http:// or https:// URL with no spaces and no user:password@; an engine key goes in upstream_api_key_env)`,
        `${f}:13: models[0].max_concurrency: expected integer to be greater or equal to 1`,
        `${f}:18: models[1].max_queue: expected integer to be greater or equal to 0`,
        '',
      ].join('\n'),
    );
    const json = await runCli(['config', 'check', '--json', f], { CC_KEYS: 'k1' });
    assert.equal(json.code, 2);
    const doc = JSON.parse(json.stdout) as {
      schema: string;
      ok: boolean;
      files: { kind: string; problems: unknown[] }[];
    };
    assert.equal(doc.schema, 'svc-config-check/v1');
    assert.equal(doc.ok, false);
    assert.equal(doc.files[0]!.kind, 'router');
    assert.equal(doc.files[0]!.problems.length, 9);
    for (const out of [r.stdout, r.stderr, json.stdout, json.stderr]) {
      assert.ok(!out.includes(canary), out);
      assert.ok(!out.includes('not a host id') && !out.includes('ftp:') && !out.includes('99999'), out);
    }
  });

  it('the rules across keys the server checks (a model alias declared twice) and the files a key names', async () => {
    const dup = write(
      [
        '[server]',
        'host_id = "node-a"',
        'api_keys_env = "CC_KEYS"',
        'authorization_policy = "missing-policy.toml"',
        '[[models]]',
        'alias = "m1"',
        'upstream = "http://127.0.0.1:1/v1"',
        '[[models]]',
        'alias = "m1"',
        'upstream = "http://127.0.0.1:2/v1"',
        '',
      ].join('\n'),
    );
    const r = await runCli(['config', 'check', dup], { CC_KEYS: 'k' });
    assert.equal(r.code, 2, r.stdout);
    assert.equal(
      r.stdout,
      `${dup}:4: server.authorization_policy: names a file that does not exist\n${dup}:9: models[1].alias: model alias is declared twice\n`,
    );
    const node = write(
      [
        '[node]',
        'host_id = "node-a"',
        `authorization_policy = "${POLICY}"`,
        'tls_key_file = "key.pem"',
        'router_url = "http://127.0.0.1:8000"',
        '',
      ].join('\n'),
    );
    const n2 = await runCli(['config', 'check', node], { CC_READER: 't' });
    assert.equal(n2.code, 2, n2.stdout);
    assert.equal(
      n2.stdout,
      `${node}:1: node.tls_cert_file: is missing (tls_cert_file and tls_key_file go together)\n${node}:5: node.router_url: router_url and router_key_env go together (benchmark and media jobs need both)\n`,
    );
    const policy = write(
      [
        '[[clients]]',
        'id = "a"',
        'grants = ["workloads:read", "nope:write"]',
        'credential_env = "CC_A"',
        'credential_file = "a.txt"',
        '[[clients]]',
        'id = "b"',
        'grants = []',
        'credential_file = "no-such-file"',
        '',
      ].join('\n'),
    );
    const p = await runCli(['config', 'check', policy]);
    assert.equal(p.code, 2);
    assert.equal(
      p.stdout,
      `${policy}:3: clients[0].grants[1]: must be one of: workloads:read, requests:read, node-admin:lifecycle, node-admin:bootstrap, media:submit\n${policy}:4: clients[0].credential_env: warning: environment variable CC_A is not set here\n`,
    );
    const p2 = write(
      [
        '[[clients]]',
        'id = "b"',
        'grants = []',
        'credential_file = "no-such-file"',
        '[[clients]]',
        'id = "b"',
        'grants = []',
        'credential_env = "CC_B"',
        '',
      ].join('\n'),
    );
    const q = await runCli(['config', 'check', p2], { CC_B: 'x' });
    assert.equal(q.code, 2);
    assert.equal(
      q.stdout,
      `${p2}:4: clients[0].credential_file: warning: names a file that does not exist here\n${p2}:6: clients[1].id: client is declared twice\n`,
    );
    // A credential file not there yet (systemd hands it over at run time) alone is a warning:
    // exit 0, or 2 with --strict; one that is there but empty is an error.
    const p3 = join(dir, 'p3.toml');
    writeFileSync(p3, '[[clients]]\nid = "a"\ngrants = []\ncredential_file = "later.token"\n');
    const later = await runCli(['config', 'check', p3]);
    assert.equal(later.code, 0, later.stdout);
    assert.match(
      later.stdout,
      /p3\.toml:4: clients\[0\]\.credential_file: warning: names a file that does not exist here\n.*p3\.toml: ok \(policy\)/s,
    );
    assert.equal((await runCli(['config', 'check', '--strict', p3])).code, 2);
    writeFileSync(join(dir, 'later.token'), '');
    const empty = await runCli(['config', 'check', p3]);
    assert.equal(empty.code, 2);
    assert.match(empty.stdout, /credential_file: names a file that is empty/);
  });

  it('every rule across keys a file breaks, in one run, each on its own key (not only the first the server meets)', async () => {
    const r1 = write(
      [
        '[server]', // 1
        'host_id = "node-a"', // 2
        'api_keys_env = "CC_KEYS"', // 3
        'nats_url = "nats://127.0.0.1:4222,nats://127.0.0.1:4222"', // 4
        '', // 5
        '[[models]]', // 6
        'alias = "m1"', // 7
        'upstream = "http://127.0.0.1:1/v1"', // 8
        '[[models]]', // 9
        'alias = "m1"', // 10
        'upstream = "http://127.0.0.1:2/v1"', // 11
        '[[models]]', // 12
        'alias = "m2"', // 13
        '[[models]]', // 14
        'alias = "m3"', // 15
        'upstreams = ["http://127.0.0.1:3/v1", "http://127.0.0.1:3/v1/"]', // 16
        '[[models]]', // 17
        'alias = "m1"', // 18
        'upstream = "http://127.0.0.1:4/v1?key=sk-canary-5150"', // 19
        '',
      ].join('\n'),
    );
    const r = await runCli(['config', 'check', r1], { CC_KEYS: 'k' });
    assert.equal(r.code, 2, r.stdout + r.stderr);
    assert.equal(
      r.stdout,
      [
        `${r1}:4: server.nats_url: nats_url lists the same server twice`,
        `${r1}:10: models[1].alias: model alias is declared twice`,
        `${r1}:12: models[2]: must set exactly one of upstream and upstreams (it sets neither)`,
        `${r1}:16: models[3].upstreams[1]: repeats an earlier replica of the same alias`,
        `${r1}:18: models[4].alias: model alias is declared twice`,
        `${r1}:19: models[4].upstream: must be a plain origin and path`,
        '',
      ].join('\n'),
    );
    assert.ok(!r.stdout.includes('sk-canary-5150') && !r.stdout.includes('127.0.0.1'), r.stdout);
    const f1 = write(
      [
        '[fleet]', // 1
        `authorization_policy = "${POLICY}"`, // 2
        '[[nodes]]', // 3
        'host_id = "n1"', // 4
        '[[nodes]]', // 5
        'host_id = "n1"', // 6
        '[[nodes]]', // 7
        'host_id = "n2"', // 8
        '[[nodes]]', // 9
        'host_id = "n1"', // 10
        '',
      ].join('\n'),
    );
    const f = await runCli(['config', 'check', '--json', f1], { CC_READER: 't' });
    assert.equal(f.code, 2, f.stdout);
    const doc = JSON.parse(f.stdout) as { ok: boolean; files: { ok: boolean; problems: unknown[] }[] };
    assert.equal(doc.ok, false);
    assert.deepEqual(doc.files[0]!.problems, [
      { line: 1, key: 'fleet.nats_url', severity: 'error', reason: 'nats_url is required (nodes answer over NATS)' },
      { line: 6, key: 'nodes[1].host_id', severity: 'error', reason: 'node is declared twice' },
      { line: 10, key: 'nodes[3].host_id', severity: 'error', reason: 'node is declared twice' },
    ]);
  });

  it('the directories a file names: a file where a directory must be is a problem; one missing, or that this user cannot write in or read, a warning (a problem with --strict)', async () => {
    const sub = mkdtempSync(join(dir, 'dirs-'));
    writeFileSync(join(sub, 'a-file'), 'x');
    mkdirSync(join(sub, 'recipes'));
    const node = (lines: string[]): string =>
      write(['[node]', 'host_id = "node-a"', `authorization_policy = "${POLICY}"`, ...lines, ''].join('\n'));
    const n1 = node([
      `state_dir = "${join(sub, 'a-file')}"`, // 4
      `media_dir = "${join(sub, 'no-media')}"`, // 5
      `recipes_dir = "${join(sub, 'recipes')}"`, // 6
      `manifests_dir = "${join(sub, 'a-file', 'manifests')}"`, // 7
    ]);
    const r1 = await runCli(['config', 'check', n1], { CC_READER: 't' });
    assert.equal(r1.code, 2, r1.stdout);
    assert.equal(
      r1.stdout,
      [
        `${n1}:4: node.state_dir: names a file, not a directory`,
        `${n1}:5: node.media_dir: warning: names a directory that does not exist here`,
        `${n1}:7: node.manifests_dir: names a path under a file`,
        '',
      ].join('\n'),
    );
    // A state directory the controller makes at start (its parent is writable) is fine; one
    // it cannot make or write in (/proc/sys: read-only even for root) is a warning here.
    const made = node([`state_dir = "${join(sub, 'new', 'state')}"`]);
    assert.equal(
      (await runCli(['config', 'check', made], { CC_READER: 't' })).stdout,
      `${made}: ok (node)
`,
    );
    const cannot = node(['state_dir = "/proc/sys/svc-state"']);
    const c = await runCli(['config', 'check', cannot], { CC_READER: 't' });
    assert.equal(c.code, 0, c.stdout);
    assert.equal(
      c.stdout,
      `${cannot}:4: node.state_dir: warning: names a directory that does not exist here and cannot be made by this user
${cannot}: ok (node)
`,
    );
    const readOnly = node(['state_dir = "/proc/sys"']);
    const ro = await runCli(['config', 'check', '--strict', '--json', readOnly], { CC_READER: 't' });
    assert.equal(ro.code, 2, ro.stdout);
    assert.deepEqual((JSON.parse(ro.stdout) as { files: { problems: unknown[] }[] }).files[0]!.problems, [
      { line: 4, key: 'node.state_dir', severity: 'error', reason: 'names a directory this user cannot write in' },
    ]);
    // The router's decision log: its folder is made when missing; a directory in its place or
    // a file above it is a problem, beside every other problem of the file.
    const router = (logPath: string): string =>
      write(
        [
          '[server]',
          'host_id = "node-a"',
          'api_keys_env = "CC_KEYS"',
          `decision_log_path = "${logPath}"`, // 4
          '[[models]]',
          'alias = "m1"',
          'upstream = "http://127.0.0.1:1/v1"',
          '[[models]]',
          'alias = "m1"', // 9
          'upstream = "http://127.0.0.1:2/v1"',
          '',
        ].join('\n'),
      );
    const asDir = router(join(sub, 'recipes'));
    const underFile = router(join(sub, 'a-file', 'decisions.jsonl'));
    const fine = router(join(sub, 'logs', 'decisions.jsonl'));
    const d = await runCli(['config', 'check', asDir, underFile, fine], { CC_KEYS: 'k' });
    assert.equal(d.code, 2);
    assert.equal(
      d.stdout,
      [
        `${asDir}:4: server.decision_log_path: names a directory, not a file`,
        `${asDir}:9: models[1].alias: model alias is declared twice`,
        `${underFile}:4: server.decision_log_path: names a path under a file`,
        `${underFile}:9: models[1].alias: model alias is declared twice`,
        `${fine}:9: models[1].alias: model alias is declared twice`,
        '',
      ].join('\n'),
    );
    for (const out of [r1.stdout, c.stdout, ro.stdout, d.stdout]) assert.ok(!out.includes(sub), 'no path printed');
  });

  it('warnings (a variable not set here) leave exit 0, or make it 2 with --strict; a set variable is no warning', async () => {
    const f = write(
      '[fleet]\nnats_url = "nats://127.0.0.1:4222"\nauthorization_policy = "policy.toml"\nnats_token_env = "CC_NATS"\n[[nodes]]\nhost_id = "n1"\n',
    );
    const plain = await runCli(['config', 'check', f]);
    assert.equal(plain.code, 0, plain.stdout);
    assert.equal(
      plain.stdout,
      `${f}:4: fleet.nats_token_env: warning: environment variable CC_NATS is not set here\n${f}: ok (fleet)\n`,
    );
    const strict = await runCli(['config', 'check', '--strict', f]);
    assert.equal(strict.code, 2);
    assert.equal(strict.stdout, `${f}:4: fleet.nats_token_env: environment variable CC_NATS is not set here\n`);
    const set = await runCli(['config', 'check', '--strict', f], { CC_NATS: 'secret-value-1' });
    assert.equal(set.code, 0);
    assert.equal(set.stdout, `${f}: ok (fleet)\n`);
  });

  it('a file that is not TOML (its line, never its text), of no known kind, a directory, a missing and an unreadable file', async () => {
    const bad = write('[server]\nhost_id = "a"\nsecret = = "sk-not-toml-canary"\n');
    const none = write('[something]\nx = 1\n');
    const both = write('[server]\n[node]\n');
    const fifo = join(dir, 'fifo.toml');
    execFileSync('mkfifo', [fifo]);
    const r = await runCli(['config', 'check', bad, none, both, dir, join(dir, 'absent.toml'), fifo]);
    assert.equal(r.code, 2);
    assert.equal(
      r.stdout,
      [
        `${bad}:3: -: not valid TOML`,
        `${none}:0: -: none of the tables of a router, node, fleet, policy, recipe or manifest file`,
        `${both}:0: -: holds the tables of several kinds of file (router, node): one kind per file`,
        `${dir}:0: -: is a directory`,
        `${join(dir, 'absent.toml')}:0: -: does not exist`,
        `${fifo}:0: -: is not a regular file`,
        '',
      ].join('\n'),
    );
    assert.ok(!r.stdout.includes('canary'));
    // Root reads every file whatever its mode: the unreadable case needs another user.
    if (process.getuid?.() !== 0) {
      const locked = write('[[clients]]\n');
      chmodSync(locked, 0);
      const u = await runCli(['config', 'check', locked]);
      assert.equal(u.stdout, `${locked}:0: -: is not readable\n`);
      assert.equal(u.code, 2);
    }
  });

  it('a path with a newline cannot forge a line; no file at all is invalid usage', async () => {
    const sub = join(dir, 'x\ny');
    mkdirSync(sub);
    const r = await runCli(['config', 'check', sub]);
    assert.equal(r.stdout, `${JSON.stringify(sub)}:0: -: is a directory\n`);
    const none = await runCli(['config', 'check']);
    assert.equal(none.code, 2);
    assert.match(
      none.stderr,
      /^svc-serving: error: a required argument is missing \(see svc-serving config check --help\)\n$/,
    );
  });
});
