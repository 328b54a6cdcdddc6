import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import type { NodeResult, SourceResult } from '../../src/schema/envelopes.js';
import type { WorkloadRecord } from '../../src/schema/record.js';
import { writeTestPolicy } from '../support/policy.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';

describe('benchmark and media jobs through a real router, seen by node_workloads', () => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-jobs-'));
  const policy = writeTestPolicy(dir);
  // The router takes a list (key rotation); the controller may name the same list and sends its first key.
  const env = {
    ...policy.env,
    SVC_ROUTER_KEYS: 'jobs-router-key,next-router-key',
    NODE_ROUTER_KEY: ' jobs-router-key,next-router-key',
  };
  let sim: RunningProcess;
  let router: RunningProcess;
  let controller: RunningProcess;
  const cfg = join(dir, 'node.toml');

  const startController = async (): Promise<void> => {
    controller = await spawnNode(CLI, ['controller', 'serve', '--config', cfg], { env });
  };
  const call = (path: string, token: string, body?: unknown): Promise<Response> =>
    fetch(`${controller.url}${path}`, {
      method: body === undefined ? 'GET' : 'POST',
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  const read = async (args: Record<string, unknown> = {}): Promise<NodeResult> =>
    (await (
      await call('/tools/call', policy.tokens.reader, { name: 'node_workloads', arguments: args })
    ).json()) as NodeResult;
  const source = (r: NodeResult, owner: string): SourceResult => r.sources.find((s) => s.owner === owner)!;
  const start = async (command: string, params: unknown): Promise<{ operation_id: string; job_id: string }> => {
    const plan = await call('/v1/lifecycle/plan', policy.tokens.lifecycle, { command, params });
    assert.equal(plan.status, 201);
    const p = (await plan.json()) as { confirmation_token: string; plan: string[] };
    assert.ok(p.plan.length > 0);
    const applied = await call('/v1/lifecycle/apply', policy.tokens.lifecycle, {
      confirmation_token: p.confirmation_token,
    });
    assert.equal(applied.status, 200);
    return (await applied.json()) as { operation_id: string; job_id: string };
  };

  before(async () => {
    sim = await spawnNode(CLI, [
      'engine',
      'sim',
      '--listen',
      '127.0.0.1:0',
      '--ttft-ms',
      '5',
      '--token-delay-ms',
      '10',
      '--tokens',
      '8',
    ]);
    writeFileSync(
      join(dir, 'router.toml'),
      [
        '[server]',
        'host_id = "node-j"',
        'listen = "127.0.0.1:0"',
        'api_keys_env = "SVC_ROUTER_KEYS"',
        '',
        '[[models]]',
        'alias = "m"',
        `upstream = "${sim.url}/v1"`,
        'upstream_model = "sim-model"',
        'max_concurrency = 16',
      ].join('\n'),
    );
    router = await spawnNode(CLI, ['router', 'serve', '--config', join(dir, 'router.toml')], { env });
    writeFileSync(
      cfg,
      [
        '[node]',
        'host_id = "node-j"',
        'listen = "127.0.0.1:0"',
        'authorization_policy = "policy.toml"',
        'stale_after_seconds = 5',
        'state_dir = "state"',
        `router_url = "${router.url}"`,
        'router_key_env = "NODE_ROUTER_KEY"',
        'media_dir = "media"',
      ].join('\n'),
    );
    mkdirSync(join(dir, 'media'));
    await startController();
  });
  after(async () => {
    await Promise.all([controller?.stop(), router?.stop(), sim?.stop()]);
  });

  it('the job owners are live sources of the node (complete, not unavailable)', async () => {
    const r = await eventually(async () => {
      const x = await read();
      return ['controller', 'benchmark', 'media'].every((o) => source(x, o).status === 'complete') ? x : undefined;
    }, 5000);
    assert.equal(source(r, 'controller').records.length, 0);
  });

  it('lifecycle needs its own grant: a workloads:read token cannot start anything, and reads create no operation', async () => {
    for (const t of [policy.tokens.reader, policy.tokens.media, policy.tokens.bootstrap]) {
      assert.equal((await call('/v1/lifecycle/plan', t, { command: 'benchmark.start', params: {} })).status, 403);
    }
    assert.equal(
      (await call('/v1/lifecycle/plan', 'nope-nope-nope', { command: 'benchmark.start', params: {} })).status,
      401,
    );
    assert.equal((await call('/tools/call', policy.tokens.lifecycle, { name: 'node_workloads' })).status, 403);
    for (let i = 0; i < 3; i++) await read();
    assert.equal(source(await read(), 'controller').records.length, 0, 'no read creates a controller operation record');
  });

  it("apply needs the plan's token; a wrong or reused token is refused", async () => {
    const bad = await call('/v1/lifecycle/apply', policy.tokens.lifecycle, { confirmation_token: 'f'.repeat(48) });
    assert.equal(bad.status, 400);
    const malformed = await call('/v1/lifecycle/plan', policy.tokens.lifecycle, {
      command: 'benchmark.start',
      params: { alias: 'm', requests: 0 },
    });
    assert.equal(malformed.status, 400);
    // Cancelling a job this controller never had is refused before anyone confirms it.
    const unknown = await call('/v1/lifecycle/plan', policy.tokens.lifecycle, {
      command: 'media.cancel',
      params: { job_id: 'media_' + '0'.repeat(24) },
    });
    assert.equal(unknown.status, 404);
    // No lifecycle route takes a query string: refused, never ignored (nothing is planned).
    const before = source(await read(), 'controller').records.length;
    assert.equal(
      (
        await call('/v1/lifecycle/plan?x=1', policy.tokens.lifecycle, {
          command: 'benchmark.start',
          params: { alias: 'm', requests: 2 },
        })
      ).status,
      400,
    );
    assert.equal(
      (await call('/v1/lifecycle/apply?x=1', policy.tokens.lifecycle, { confirmation_token: 'f'.repeat(48) })).status,
      400,
    );
    assert.equal((await call(`/v1/lifecycle/status/bench_${'0'.repeat(24)}?x=1`, policy.tokens.lifecycle)).status, 400);
    assert.equal(source(await read(), 'controller').records.length, before, 'nothing was planned');
  });

  it('a benchmark shows queued/running with progress, then its terminal outcome and summary', async () => {
    const { job_id, operation_id } = await start('benchmark.start', {
      alias: 'm',
      requests: 40,
      concurrency: 2,
      prompt_tokens: 16,
      max_tokens: 8,
    });
    assert.match(job_id, /^bench_[0-9a-f]{24}$/);
    const seen = new Set<string>();
    let lastProgress = -1;
    const fin = await eventually(
      async () => {
        const rec = source(await read({ owner: 'benchmark' }), 'benchmark').records[0];
        if (!rec) return undefined;
        seen.add(rec.state);
        if (rec.progress) {
          assert.ok(rec.progress.completed >= lastProgress, 'progress never goes backwards');
          lastProgress = rec.progress.completed;
          assert.equal(rec.progress.unit, 'requests');
          assert.equal(rec.progress.total, 40);
        }
        return rec.state === 'terminal' ? rec : undefined;
      },
      30_000,
      50,
    );
    assert.ok(seen.has('running'), `saw ${[...seen]}`);
    assert.equal(fin.outcome, 'success');
    assert.equal(fin.progress?.completed, 40);
    const status = (await (await call(`/v1/lifecycle/status/${job_id}`, policy.tokens.lifecycle)).json()) as {
      summary: { completed: number; outcomes: Record<string, number> };
    };
    assert.equal(status.summary.completed, 40);
    assert.equal(status.summary.outcomes['success'], 40);
    const ops = source(await read({ owner: 'controller' }), 'controller').records;
    const op = ops.find((r: WorkloadRecord) => r.state === 'terminal' && r.outcome === 'success');
    assert.ok(op, `the command is a controller operation record (${operation_id})`);
    // Cancelling the finished job succeeds and changes nothing; its token works once.
    const plan = (await (
      await call('/v1/lifecycle/plan', policy.tokens.lifecycle, { command: 'benchmark.cancel', params: { job_id } })
    ).json()) as { confirmation_token: string };
    assert.equal(
      (await call('/v1/lifecycle/apply', policy.tokens.lifecycle, { confirmation_token: plan.confirmation_token }))
        .status,
      200,
    );
    assert.equal(
      (await call('/v1/lifecycle/apply', policy.tokens.lifecycle, { confirmation_token: plan.confirmation_token }))
        .status,
      400,
      'a token works once',
    );
    const after = (await (await call(`/v1/lifecycle/status/${job_id}`, policy.tokens.lifecycle)).json()) as {
      state: string;
    };
    assert.equal(after.state, 'succeeded');
  });

  it('a media job transcribes files through the router; its records hold no file path', async () => {
    const files = [0, 1, 2].map((i) => {
      writeFileSync(join(dir, 'media', `secret-name-${i}.wav`), Buffer.alloc(2048, i));
      return `secret-name-${i}.wav`;
    });
    const { job_id } = await start('media.submit', { alias: 'm', files });
    const fin = await eventually(
      async () => {
        const r = await read({ owner: 'media' });
        const rec = source(r, 'media').records.find((x) => x.state === 'terminal');
        if (rec) assert.ok(!JSON.stringify(r).includes('secret-name'), 'no file name in the inventory');
        return rec;
      },
      15_000,
      100,
    );
    assert.equal(fin.outcome, 'success');
    assert.deepEqual(fin.progress, { completed: 3, total: 3, unit: 'items' });
    const status = await (await call(`/v1/lifecycle/status/${job_id}`, policy.tokens.lifecycle)).text();
    assert.ok(!status.includes('secret-name') && !status.includes(dir));
  });

  it('media files come only from the media directory; a FIFO, a link out or a device cannot hold or leak anything', async () => {
    // Named outside it: refused at plan time, no operation made.
    for (const files of [['/etc/passwd'], ['../node.toml'], ['a/../../node.toml'], ['x\\y.wav']]) {
      const plan = await call('/v1/lifecycle/plan', policy.tokens.lifecycle, {
        command: 'media.submit',
        params: { alias: 'm', files },
      });
      assert.equal(plan.status, 400, JSON.stringify(files));
    }
    // Inside it by name, but not a readable regular file of its own: each is an error, at once.
    execFileSync('mkfifo', [join(dir, 'media', 'fifo.wav')]);
    symlinkSync('/etc/passwd', join(dir, 'media', 'out.wav'));
    symlinkSync('/dev/zero', join(dir, 'media', 'dev.wav'));
    const { job_id } = await start('media.submit', {
      alias: 'm',
      files: ['fifo.wav', 'out.wav', 'dev.wav', 'missing.wav'],
    });
    const status = await eventually(
      async () => {
        const s = (await (await call(`/v1/lifecycle/status/${job_id}`, policy.tokens.lifecycle)).json()) as {
          state: string;
          summary?: { outcomes: Record<string, number> };
        };
        return s.state === 'failed' || s.state === 'succeeded' ? s : undefined;
      },
      10_000,
      100,
    );
    assert.deepEqual(status.summary?.outcomes, { error: 4 });
    // Cancelling the job now that it has ended: nothing to do, not "unknown job".
    const cancel = await start('media.cancel', { job_id });
    assert.match(cancel.operation_id, /^op_/);
    const after = (await (await call(`/v1/lifecycle/status/${job_id}`, policy.tokens.lifecycle)).json()) as {
      state: string;
    };
    assert.equal(after.state, status.state, 'the ended job is unchanged');
  });

  it('svc-serving bench run plans, needs confirmation, applies and follows the job to its summary', async () => {
    const run = (args: string[], token: string) =>
      new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
        const p = spawn(
          process.execPath,
          [
            CLI,
            'bench',
            'run',
            '--controller-url',
            controller.url,
            '--auth-env',
            'BENCH_TOKEN',
            '--alias',
            'm',
            ...args,
          ],
          {
            env: { PATH: process.env['PATH'] ?? '', BENCH_TOKEN: token },
            stdio: ['ignore', 'pipe', 'pipe'],
          },
        );
        let stdout = '';
        let stderr = '';
        p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
        p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
        p.on('exit', (code) => resolve({ code, stdout, stderr }));
      });
    const unconfirmed = await run(['--requests', '3'], policy.tokens.lifecycle);
    assert.equal(unconfirmed.code, 2);
    assert.match(unconfirmed.stderr, /confirmation required/);
    const ok = await run(['--requests', '6', '--concurrency', '2', '--yes', '--json'], policy.tokens.lifecycle);
    assert.equal(ok.code, 0, ok.stderr);
    const status = JSON.parse(ok.stdout) as { state: string; summary: { completed: number } };
    assert.equal(status.state, 'succeeded');
    assert.equal(status.summary.completed, 6);
    const denied = await run(['--requests', '3', '--yes'], policy.tokens.reader);
    assert.equal(denied.code, 4);
    assert.ok(!denied.stderr.includes(policy.tokens.reader) && !denied.stderr.includes(controller.url));
  });

  it("a second controller on the same state_dir is refused before it touches the first one's running job", async () => {
    const { job_id } = await start('benchmark.start', {
      alias: 'm',
      requests: 60,
      concurrency: 1,
      prompt_tokens: 8,
      max_tokens: 8,
    });
    await eventually(
      async () =>
        (source(await read({ owner: 'benchmark' }), 'benchmark').records.find((r) => r.state === 'running')?.progress
          ?.completed ?? 0) > 2,
      15_000,
      50,
    );
    const second = spawnSync(process.execPath, [CLI, 'controller', 'serve', '--config', cfg], {
      env: { PATH: process.env['PATH'] ?? '', ...env },
      encoding: 'utf8',
      timeout: 30_000,
    });
    assert.equal(second.status, 2, second.stderr);
    assert.match(second.stderr, /state_dir is in use by another running controller process/);
    assert.ok(!second.stderr.includes(dir), 'the message names the setting, not the path');
    // The first controller's job runs on to its own end, never marked interrupted.
    const fin = await eventually(
      async () => {
        const rec = source(await read({ owner: 'benchmark' }), 'benchmark').records.find(
          (r) => r.state === 'terminal' && r.progress?.total === 60,
        );
        return rec;
      },
      30_000,
      100,
    );
    assert.equal(fin.outcome, 'success');
    const status = (await (await call(`/v1/lifecycle/status/${job_id}`, policy.tokens.lifecycle)).json()) as {
      state: string;
    };
    assert.equal(status.state, 'succeeded');
  });

  it('a controller killed mid-job keeps its store and reports the job honestly after restart', async () => {
    const { job_id } = await start('benchmark.start', {
      alias: 'm',
      requests: 500,
      concurrency: 1,
      prompt_tokens: 8,
      max_tokens: 8,
    });
    await eventually(
      async () =>
        (source(await read({ owner: 'benchmark' }), 'benchmark').records.find((r) => r.state === 'running')?.progress
          ?.completed ?? 0) > 2,
      15_000,
      50,
    );
    await controller.stop('SIGKILL');
    await startController();
    const r = await eventually(async () => {
      const x = await read({ owner: 'benchmark' });
      return source(x, 'benchmark').status === 'complete' ? x : undefined;
    }, 5000);
    const recs = source(r, 'benchmark').records;
    assert.equal(recs.length, 4, 'every benchmark job survived the restart');
    const killed = recs.find((x) => x.outcome !== 'success')!;
    assert.equal(killed.state, 'terminal');
    assert.equal(killed.outcome, 'unknown', 'interrupted: never shown as still running, never as a success');
    assert.ok((killed.progress?.completed ?? 0) > 0);
    const status = (await (await call(`/v1/lifecycle/status/${job_id}`, policy.tokens.lifecycle)).json()) as {
      state: string;
    };
    assert.equal(status.state, 'interrupted');
  });

  it('bench run: Ctrl-C says the job goes on and how to stop it; bench cancel stops it; an unknown alias is not a success', async () => {
    const cli = (args: string[]) =>
      spawn(
        process.execPath,
        [CLI, 'bench', ...args, '--controller-url', controller.url, '--auth-env', 'BENCH_TOKEN'],
        {
          env: { PATH: process.env['PATH'] ?? '', BENCH_TOKEN: policy.tokens.lifecycle },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
    const collect = (p: ReturnType<typeof cli>) => {
      const out = { stdout: '', stderr: '', code: undefined as number | null | undefined };
      p.stdout!.on('data', (d: Buffer) => (out.stdout += d.toString()));
      p.stderr!.on('data', (d: Buffer) => (out.stderr += d.toString()));
      const exited = new Promise<void>((r) => p.on('exit', (code) => ((out.code = code), r())));
      return { out, exited };
    };
    const long = cli([
      'run',
      '--alias',
      'm',
      '--requests',
      '100000',
      '--concurrency',
      '1',
      '--prompt-tokens',
      '4',
      '--max-tokens',
      '4',
      '--yes',
    ]);
    const l = collect(long);
    const jobId = await eventually(() => /started (bench_[0-9a-f]{24})/.exec(l.out.stderr)?.[1], 15_000);
    await eventually(
      async () =>
        (
          (await (await call(`/v1/lifecycle/status/${jobId}`, policy.tokens.lifecycle)).json()) as {
            progress: { completed: number };
          }
        ).progress.completed > 3,
      10_000,
      50,
    );
    long.kill('SIGINT');
    await l.exited;
    assert.equal(l.out.code, 130);
    assert.match(
      l.out.stderr,
      new RegExp(
        `interrupted: ${jobId} keeps running on the controller; stop it with svc-serving bench cancel --job ${jobId}`,
      ),
    );
    const running = (await (await call(`/v1/lifecycle/status/${jobId}`, policy.tokens.lifecycle)).json()) as {
      state: string;
    };
    assert.equal(running.state, 'running', 'following stopped, the job did not');

    const c = collect(cli(['cancel', '--job', jobId, '--yes']));
    await c.exited;
    assert.equal(c.out.code, 0, c.out.stderr);
    assert.match(c.out.stdout, new RegExp(`^benchmark ${jobId}: cancelled\n  finished +\\d+ of 100000 requests`));
    const ended = (await (await call(`/v1/lifecycle/status/${jobId}`, policy.tokens.lifecycle)).json()) as {
      state: string;
      progress: { completed: number };
      summary: { completed: number };
    };
    assert.equal(ended.state, 'cancelled');
    assert.equal(ended.progress.completed, ended.summary.completed, 'the progress shown and the summary agree');

    const unknownJob = collect(cli(['cancel', '--job', `bench_${'0'.repeat(24)}`, '--yes']));
    await unknownJob.exited;
    assert.equal(unknownJob.out.code, 4);
    assert.match(unknownJob.out.stderr, /no benchmark job with this id on this controller/);

    const wrong = collect(cli(['run', '--alias', 'no-such-alias', '--requests', '3', '--concurrency', '1', '--yes']));
    await wrong.exited;
    assert.equal(wrong.out.code, 1);
    assert.match(wrong.out.stdout, /: failed\n {2}finished +3 of 3 requests .*, 0 succeeded\n/);
    assert.match(wrong.out.stdout, /no request succeeded: check that the router serves this alias/);
  });

  // Last: it deletes the controller's state.
  it('state_dir deleted under a running controller: its job stops, lifecycle is 503, nothing is written where nobody reads it', async () => {
    const { job_id } = await start('benchmark.start', {
      alias: 'm',
      requests: 100_000,
      concurrency: 1,
      prompt_tokens: 8,
      max_tokens: 8,
    });
    const status = async (): Promise<{ state: string; outcome: string | null }> =>
      (await (await call(`/v1/lifecycle/status/${job_id}`, policy.tokens.lifecycle)).json()) as {
        state: string;
        outcome: string | null;
      };
    await eventually(async () => (await status()).state === 'running', 10_000);
    rmSync(join(dir, 'state'), { recursive: true, force: true });
    // The job can no longer record its progress: stopped, and its end answered at once.
    await eventually(async () => (await status()).state === 'failed', 10_000);
    assert.equal((await status()).outcome, 'error');
    // A plan would be recorded in a file that is gone: refused, not accepted and lost.
    const plan = await call('/v1/lifecycle/plan', policy.tokens.lifecycle, {
      command: 'benchmark.start',
      params: { alias: 'm', requests: 1, concurrency: 1, prompt_tokens: 8, max_tokens: 8 },
    });
    assert.equal(plan.status, 503);
    assert.deepEqual(await plan.json(), {
      type: 'urn:svc-serving:problem:unavailable',
      title: 'Service unavailable',
      status: 503,
      code: 'unavailable',
    });
    assert.equal(source(await read({ owner: 'benchmark' }), 'benchmark').status, 'unavailable');
    assert.equal(existsSync(join(dir, 'state')), false, "no store made again behind the operator's back");
    // A restart makes a new store, and work is taken again.
    await controller.stop();
    await startController();
    await start('benchmark.start', { alias: 'm', requests: 2, concurrency: 1, prompt_tokens: 8, max_tokens: 8 });
  });
});
