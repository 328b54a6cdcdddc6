import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { RECIPE_ERRORS } from '../../src/cli/recipe-command.js';
import { RECIPE_PLAN_FAILURES, RECIPE_REASONS } from '../../src/cli/recipe-lifecycle-command.js';
import { looksLikeStackTrace, runCli, type CliResult } from '../cli/run-cli.js';
import { ENV_CANARY, startRecipeNode, type RecipeNode } from './recipe-node.js';

describe('`svc-serving recipe apply|stop` (built CLI) against a controller on the recorded runtime', () => {
  let node: RecipeNode;
  const outputs: CliResult[] = [];
  before(async () => {
    node = await startRecipeNode();
  });
  after(async () => {
    await node.close();
  });
  const run = async (args: string[], token = node.policy.tokens.lifecycle): Promise<CliResult> => {
    const r = await runCli(['recipe', ...args, '--controller-url', node.ctl.url, '--auth-env', 'RECIPE_TOKEN'], {
      RECIPE_TOKEN: token,
    });
    outputs.push(r);
    return r;
  };

  it('without --yes and without a terminal it asks for confirmation (exit 2) and changes nothing', async () => {
    const r = await run(['apply', 'mistral-7b']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /Plan \(confirm within 2 minutes\):\n {2}- start recipe mistral-7b/);
    assert.match(r.stderr, /confirmation required: re-run with --yes \(see svc-serving recipe apply --help\)/);
    assert.equal(node.fake.createBodies.length, 0);
  });

  it('apply --yes --json follows the operation to its end and prints the status (exit 0)', async () => {
    const r = await run(['apply', 'mistral-7b', '--yes', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const s = JSON.parse(r.stdout) as { state: string; outcome: string; summary: unknown };
    assert.deepEqual([s.state, s.outcome, s.summary], ['succeeded', 'success', { action: 'created', containers: 1 }]);
    assert.match(r.stderr, /operation op_[0-9a-f]{24}\n/);
    assert.match(r.stderr, / {2}succeeded\n/);
    // Nothing was asked, so nothing says "confirm": the plan is shown as what is applied.
    assert.match(r.stderr, /^Plan \(applying it: --yes\):\n {2}- /m);
    assert.doesNotMatch(r.stderr, /confirm/);
    assert.equal(node.fake.createBodies.length, 1);
  });

  it('stop --yes prints one readable line (exit 0); apply of another recipe version fails (exit 1) with its reason', async () => {
    const stop = await run(['stop', 'mistral-7b', '--yes']);
    assert.equal(stop.code, 0, stop.stderr);
    assert.equal(stop.stdout, 'recipe mistral-7b: stop succeeded: stopped its running container(s)\n');
    const refused = await run(['apply', 'whisper-small', '--yes']);
    assert.equal(refused.code, 1);
    assert.equal(
      refused.stdout,
      `recipe whisper-small: apply failed: ${RECIPE_REASONS['container-digest-mismatch']}\n`,
    );
  });

  it('an unknown recipe and a read-only credential exit 4 with fixed messages', async () => {
    const unknown = await run(['apply', 'no-such-recipe', '--yes']);
    assert.equal(unknown.code, 4);
    assert.equal(unknown.stderr, `svc-serving: error: ${RECIPE_PLAN_FAILURES[404]}\n`);
    const reader = await run(['stop', 'mistral-7b', '--yes'], node.policy.tokens.reader);
    assert.equal(reader.code, 4);
    assert.match(reader.stderr, /HTTP 403/);
    assert.ok(!reader.stderr.includes(node.policy.tokens.reader) && !reader.stderr.includes(node.ctl.url));
  });

  it('a malformed name exits 2 and echoes nothing; a missing credential is a usage error', async () => {
    const bad = await run(['apply', '../canary', '--yes']);
    assert.equal(bad.code, 2);
    assert.equal(bad.stderr, `svc-serving: error: ${RECIPE_ERRORS.name}\n`);
    const noCred = await runCli([
      'recipe',
      'stop',
      'mistral-7b',
      '--controller-url',
      node.ctl.url,
      '--auth-env',
      'UNSET_TOKEN',
      '--yes',
    ]);
    assert.equal(noCred.code, 2);
    assert.ok(!looksLikeStackTrace(noCred.stderr));
  });

  it('--help says what the command does and its exit codes', async () => {
    for (const verb of ['apply', 'stop']) {
      const r = await runCli(['recipe', verb, '--help']);
      assert.equal(r.code, 0);
      for (const want of ['--controller-url', '--auth-env', '--yes', '--json', 'node-admin:lifecycle', 'Exit codes'])
        assert.ok(r.stdout.includes(want), `${verb}: ${want}`);
    }
  });

  it('no CLI output carries the env value, and none is a stack trace', () => {
    for (const r of outputs) {
      assert.ok(!r.stdout.includes(ENV_CANARY) && !r.stderr.includes(ENV_CANARY));
      assert.ok(!looksLikeStackTrace(r.stderr), r.stderr);
    }
  });
});
