import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';

export interface TestPolicy {
  readonly dir: string;
  readonly path: string;
  readonly env: Record<string, string>;
  /** Tokens by role: reader has workloads:read; requests has requests:read only; others neither. */
  readonly tokens: { reader: string; lifecycle: string; bootstrap: string; media: string; requests: string };
}

/** Writes a policy file with five clients whose tokens live in env vars (returned in `env`). */
export function writeTestPolicy(dir = mkdtempSync(join(tmpdir(), 'svc-policy-'))): TestPolicy {
  const tok = (role: string) => `${role}-${randomBytes(12).toString('hex')}`;
  const tokens = {
    reader: tok('reader'),
    lifecycle: tok('lifecycle'),
    bootstrap: tok('bootstrap'),
    media: tok('media'),
    requests: tok('requests'),
  };
  const env = {
    SVC_TEST_READER: tokens.reader,
    SVC_TEST_LIFECYCLE: tokens.lifecycle,
    SVC_TEST_BOOTSTRAP: tokens.bootstrap,
    SVC_TEST_MEDIA: tokens.media,
    SVC_TEST_REQUESTS: tokens.requests,
  };
  const path = join(dir, 'policy.toml');
  writeFileSync(
    path,
    [
      '[[clients]]',
      'id = "ops-reader"',
      'grants = ["workloads:read"]',
      'credential_env = "SVC_TEST_READER"',
      '',
      '[[clients]]',
      'id = "lifecycle-only"',
      'grants = ["node-admin:lifecycle"]',
      'credential_env = "SVC_TEST_LIFECYCLE"',
      '',
      '[[clients]]',
      'id = "bootstrap-only"',
      'grants = ["node-admin:bootstrap"]',
      'credential_env = "SVC_TEST_BOOTSTRAP"',
      '',
      '[[clients]]',
      'id = "media-only"',
      'grants = ["media:submit"]',
      'credential_env = "SVC_TEST_MEDIA"',
      '',
      '[[clients]]',
      'id = "request-reader"',
      'grants = ["requests:read"]',
      'credential_env = "SVC_TEST_REQUESTS"',
      '',
    ].join('\n'),
  );
  return { dir, path, env, tokens };
}
