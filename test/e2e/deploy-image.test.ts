import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { validate, ValidationSeverity, type ValidatorSettings } from 'dockerfile-utils';

/**
 * The container recipe. Images cannot be built here (no base-image registry, no container
 * runtime): the Dockerfile is linted with dockerfile-utils, and the install its runtime stage
 * runs is run for real by test/package/packed-install.test.ts.
 */
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const DOCKERFILE = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
const STRICT: ValidatorSettings = {
  deprecatedMaintainer: ValidationSeverity.ERROR,
  directiveCasing: ValidationSeverity.ERROR,
  emptyContinuationLine: ValidationSeverity.ERROR,
  instructionCasing: ValidationSeverity.ERROR,
  instructionCmdMultiple: ValidationSeverity.ERROR,
  instructionEntrypointMultiple: ValidationSeverity.ERROR,
  instructionHealthcheckMultiple: ValidationSeverity.ERROR,
  instructionJSONInSingleQuotes: ValidationSeverity.ERROR,
  instructionWorkdirRelative: ValidationSeverity.ERROR,
};

/** The instructions of the last stage (the image that runs), continuation lines joined. */
function runtimeStage(text: string): string[] {
  const lines = text.replace(/\\\n/g, ' ').split('\n');
  const from = lines.map((l, i) => (/^FROM /.test(l) ? i : -1)).filter((i) => i >= 0);
  return lines.slice(from.at(-1)).filter((l) => l.trim() && !l.startsWith('#'));
}

describe('the Dockerfile', () => {
  it('passes dockerfile-utils with every rule an error (and the linter does catch a broken one)', () => {
    const problems = validate(DOCKERFILE, STRICT).map((d) => `${d.range.start.line + 1}: ${d.message}`);
    assert.deepEqual(problems, []);
    const broken = DOCKERFILE.replace('--interval=10s', '--interval=10x').replace('USER svc:svc', 'user svc:svc');
    assert.equal(validate(broken, STRICT).length, 2);
  });

  it('runs on a current Node LTS slim image as a non-root user, with a HEALTHCHECK on /healthz and svc-serving as its entrypoint', () => {
    const node = /^ARG NODE_VERSION=(\d+)$/m.exec(DOCKERFILE);
    assert.ok(node && Number(node[1]) >= 22 && Number(node[1]) % 2 === 0, 'an even (LTS) Node major of 22 or later');
    const stage = runtimeStage(DOCKERFILE);
    assert.match(stage[0]!, /^FROM node:\$\{NODE_VERSION\}-bookworm-slim AS runtime$/);
    const user = stage.find((l) => l.startsWith('USER '));
    assert.ok(user && !/^USER (root|0)\b/.test(user), 'a USER other than root');
    assert.ok(!stage.some((l) => /apt-get install|g\+\+/.test(l)), 'no toolchain in the runtime stage');
    assert.ok(stage.some((l) => /^ENV .*SVC_HEALTHCHECK_URL=http:\/\/127\.0\.0\.1:8000\/healthz/.test(l)));
    assert.ok(stage.some((l) => /^HEALTHCHECK .*CMD \["node", "-e", ".*SVC_HEALTHCHECK_URL/.test(l)));
    assert.ok(stage.includes('ENTRYPOINT ["svc-serving"]'));
    // better-sqlite3 is compiled in the install stage, from source, by the production install.
    assert.match(DOCKERFILE, /npm_config_build_from_source=true npm ci --omit=dev/);
    assert.match(DOCKERFILE, /^FROM node:\$\{NODE_VERSION\}-bookworm-slim AS toolchain$/m, 'the same base image');
  });

  it('.dockerignore keeps local builds, dependencies, state and secrets out, and what npm pack needs in', () => {
    const ignored = readFileSync(join(ROOT, '.dockerignore'), 'utf8')
      .split('\n')
      .filter((l) => l && !l.startsWith('#'));
    for (const p of ['node_modules', 'dist', 'build', '.git', '.env', 'state', 'examples/state'])
      assert.ok(ignored.includes(p), `${p} is ignored`);
    for (const p of ['src', 'web', 'docs', 'examples', 'deploy', 'package.json', 'package-lock.json', 'tsconfig.json'])
      assert.ok(!ignored.includes(p), `${p} is sent`);
  });
});
