import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { AuthorizationPolicy, bearerToken } from '../../src/auth/policy.js';
import { ConfigError, ForbiddenError, UnauthenticatedError } from '../../src/errors.js';
import { writeTestPolicy } from '../support/policy.js';

describe('authorization policy', () => {
  it('grants workloads:read only to clients that hold it', () => {
    const p = writeTestPolicy();
    const policy = AuthorizationPolicy.load(p.path, p.env);
    assert.equal(policy.authorize(`Bearer ${p.tokens.reader}`, 'workloads:read').id, 'ops-reader');
    for (const t of [p.tokens.lifecycle, p.tokens.bootstrap, p.tokens.media]) {
      assert.throws(() => policy.authorize(`Bearer ${t}`, 'workloads:read'), ForbiddenError);
    }
  });
  it('a missing, malformed or unknown credential is unauthenticated', () => {
    const p = writeTestPolicy();
    const policy = AuthorizationPolicy.load(p.path, p.env);
    for (const h of [
      undefined,
      '',
      'Bearer',
      `Basic ${p.tokens.reader}`,
      `Bearer ${p.tokens.reader}x`,
      'Bearer not-a-token',
      ['Bearer a', 'Bearer b'],
    ]) {
      assert.throws(() => policy.authorize(h as never, 'workloads:read'), UnauthenticatedError, String(h));
    }
    assert.equal(
      policy.authorize(`bearer ${p.tokens.reader}`, 'workloads:read').id,
      'ops-reader',
      'the scheme is case-insensitive',
    );
  });
  it('reads credentials from files relative to the policy', () => {
    const p = writeTestPolicy();
    writeFileSync(join(p.dir, 'reader.token'), 'file-token-0123456789\n');
    writeFileSync(
      join(p.dir, 'p2.toml'),
      '[[clients]]\nid = "filer"\ngrants = ["workloads:read"]\ncredential_file = "reader.token"\n',
    );
    const policy = AuthorizationPolicy.load(join(p.dir, 'p2.toml'), {});
    assert.equal(policy.authorize('Bearer file-token-0123456789', 'workloads:read').id, 'filer');
  });
  const broken: [string, string, RegExp][] = [
    [
      'unknown grant',
      '[[clients]]\nid = "a"\ngrants = ["workloads:write"]\ncredential_env = "X_TOKEN"\n',
      /^authorization policy: client "a": invalid member grants\/0$/,
    ],
    [
      'repeated grant',
      '[[clients]]\nid = "a"\ngrants = ["workloads:read", "workloads:read"]\ncredential_env = "X_TOKEN"\n',
      /client "a": invalid member grants/,
    ],
    [
      'malformed variable name',
      '[[clients]]\nid = "a"\ngrants = []\ncredential_env = "1X"\n',
      /client "a": invalid member credential_env/,
    ],
    [
      'both credential sources',
      '[[clients]]\nid = "a"\ngrants = []\ncredential_env = "X_TOKEN"\ncredential_file = "f"\n',
      /exactly one/,
    ],
    ['no credential source', '[[clients]]\nid = "a"\ngrants = []\n', /exactly one/],
    [
      'unset variable',
      '[[clients]]\nid = "a"\ngrants = []\ncredential_env = "UNSET_VAR_XYZ"\n',
      /client "a": environment variable UNSET_VAR_XYZ is not set/,
    ],
    [
      'duplicate id',
      '[[clients]]\nid = "a"\ngrants = []\ncredential_env = "X_TOKEN"\n[[clients]]\nid = "a"\ngrants = []\ncredential_env = "Y_TOKEN"\n',
      /declared twice/,
    ],
    [
      'shared credential',
      '[[clients]]\nid = "a"\ngrants = []\ncredential_env = "X_TOKEN"\n[[clients]]\nid = "b"\ngrants = []\ncredential_env = "X_TOKEN"\n',
      /share one credential/,
    ],
    ['bad id', '[[clients]]\nid = "1a"\ngrants = []\ncredential_env = "X_TOKEN"\n', /invalid member/],
    [
      'extra member',
      '[[clients]]\nid = "a"\ngrants = []\ncredential_env = "X_TOKEN"\ntoken = "inline"\n',
      /invalid member/,
    ],
    ['not toml', '[[clients]\n', /not valid TOML/],
  ];
  it('says a credential variable that is set but empty is empty, not unset', () => {
    const p = writeTestPolicy();
    writeFileSync(join(p.dir, 'empty.toml'), '[[clients]]\nid = "a"\ngrants = []\ncredential_env = "EMPTY_VAR_XYZ"\n');
    assert.throws(
      () => AuthorizationPolicy.load(join(p.dir, 'empty.toml'), { EMPTY_VAR_XYZ: ' ' }),
      /client "a": environment variable EMPTY_VAR_XYZ is empty/,
    );
  });
  for (const [name, text, re] of broken) {
    it(`refuses to start on ${name}, without echoing a secret`, () => {
      const p = writeTestPolicy();
      const path = join(p.dir, 'bad.toml');
      writeFileSync(path, text);
      const env = { X_TOKEN: 'SECRET-CANARY-1234567890', Y_TOKEN: 'other-secret-0987654321' };
      try {
        AuthorizationPolicy.load(path, env);
        assert.fail('loaded');
      } catch (err) {
        assert.ok(err instanceof ConfigError);
        assert.match((err as Error).message, re);
        assert.doesNotMatch((err as Error).message, /CANARY|inline/);
      }
    });
  }
  it('bounds the number of clients', () => {
    const p = writeTestPolicy();
    const path = join(p.dir, 'many.toml');
    const env: Record<string, string> = {};
    let text = '';
    for (let i = 0; i < 257; i++) {
      env[`T_${i}`] = `token-${i}-abcdefgh`;
      text += `[[clients]]\nid = "c${i}"\ngrants = []\ncredential_env = "T_${i}"\n`;
    }
    writeFileSync(path, text);
    assert.throws(() => AuthorizationPolicy.load(path, env), ConfigError);
  });
  it('parses bearer headers strictly', () => {
    assert.equal(bearerToken('Bearer abc'), 'abc');
    assert.equal(bearerToken('Bearer a b'), undefined);
    assert.equal(bearerToken('Bearer abc\r\nX: y'), undefined);
  });
});
