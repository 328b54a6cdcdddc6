import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { looksLikeStackTrace, runCliBatch } from './run-cli.js';

describe('usage errors of every command (built CLI)', () => {
  it('a mistyped option is reported as unknown, also where a required option is missing too', async () => {
    const commands = [
      ['router', 'serve'], ['controller', 'serve'], ['fleet', 'serve'], ['bench', 'run'], ['recipe', 'apply', 'qwen'], ['recipe', 'stop', 'qwen'],
    ];
    const cases = commands.flatMap((c) => [
      { args: [...c, '--bogus-Zq1'], want: /unknown option/ },
      { args: c, want: /a required option is missing/ },
    ]);
    const results = await runCliBatch(cases.map((c) => ({ args: c.args })));
    results.forEach((r, i) => {
      const c = cases[i]!;
      assert.equal(r.code, 2, `${c.args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, c.want, c.args.join(' '));
      assert.ok(!r.stderr.includes('Zq1') && !looksLikeStackTrace(r.stderr), r.stderr);
      assert.deepEqual(r.uncaught, []);
    });
  });

  it('required options given: the command goes on to check their values', async () => {
    const [r] = await runCliBatch([{ args: ['recipe', 'apply', 'qwen', '--controller-url', 'http://127.0.0.1:9', '--auth-env', 'UNSET_Zq1'] }]);
    assert.equal(r!.code, 2);
    assert.match(r!.stderr, /unset or empty/);
  });
});
