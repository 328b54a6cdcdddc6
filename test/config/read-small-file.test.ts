import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readSmallFile } from '../../src/config/read-small-file.js';
import { runCli } from '../cli/run-cli.js';

describe('configuration, policy, settings and credential files are read bounded and never block', () => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-small-'));
  const fifo = join(dir, 'fifo');
  execFileSync('mkfifo', [fifo]);

  it('reads a regular file; refuses a FIFO, a device and a directory at once, and a file over the bound', () => {
    const ok = join(dir, 'ok.toml');
    writeFileSync(ok, 'a = 1\n');
    assert.equal(readSmallFile(ok), 'a = 1\n');
    assert.throws(() => readSmallFile(fifo), { code: 'ENOTREG' });
    assert.throws(() => readSmallFile('/dev/zero'), { code: 'ENOTREG' });
    assert.throws(() => readSmallFile(dir), { code: 'ENOTREG' });
    const big = join(dir, 'big');
    writeFileSync(big, 'x'.repeat(101));
    assert.equal(readSmallFile(big, 101).length, 101);
    assert.throws(() => readSmallFile(big, 100), { code: 'EFBIG' });
  });

  it('a FIFO given as a server configuration, a diagnosis settings file or a policy is a usage error (exit 2), not a hang', async () => {
    const serve = await runCli(['router', 'serve', '--config', fifo], {}, { timeoutMs: 10_000 });
    assert.equal(serve.code, 2, serve.stderr);
    assert.match(serve.stderr, /configuration file is not readable/);
    const diag = await runCli(['router', 'diagnose', '--active', '--config', fifo], {}, { timeoutMs: 10_000 });
    assert.equal(diag.code, 2, diag.stderr);
    const policyToml = join(dir, 'router.toml');
    writeFileSync(
      policyToml,
      [
        '[server]',
        'host_id = "r"',
        'listen = "127.0.0.1:0"',
        'api_keys_env = "K"',
        `authorization_policy = ${JSON.stringify(fifo)}`,
        '',
        '[[models]]',
        'alias = "m"',
        'upstream = "http://127.0.0.1:1/v1"',
        '',
      ].join('\n'),
    );
    const policy = await runCli(
      ['router', 'serve', '--config', policyToml],
      { K: 'key-0123456789' },
      { timeoutMs: 10_000 },
    );
    assert.equal(policy.code, 2, policy.stderr);
    assert.match(policy.stderr, /authorization policy file is not readable/);
  });
});
