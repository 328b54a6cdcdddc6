import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { closeSync, existsSync, mkdtempSync, openSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { logLevel } from '../../src/logger.js';
import { ModelSchema, RouterConfigSchema } from '../../src/config/router-config.js';
import { NodeConfigSchema } from '../../src/config/node-config.js';
import { FleetConfigSchema } from '../../src/config/fleet-config.js';
import { spawn, spawnSync } from 'node:child_process';
import { CLI } from '../support/processes.js';
import { looksLikeStackTrace, runCli, runCliBatch } from './run-cli.js';

describe('usage errors of every command (built CLI)', () => {
  it('too few file descriptors to load the program: one line and exit 1, never a stack trace', () => {
    for (const args of [['--version'], ['router', 'serve', '--config', 'x.toml'], ['engine', 'sim']]) {
      // The shell lowers its own limit, then becomes the CLI.
      const r = spawnSync('/bin/sh', ['-c', 'ulimit -n 48 && exec "$0" "$@"', process.execPath, CLI, ...args], {
        encoding: 'utf8',
        timeout: 30_000,
      });
      assert.equal(r.status, 1, r.stderr);
      assert.match(
        r.stderr,
        /^svc-serving: error: cannot start: (too many open files \(raise the limit: ulimit -n\)|the program could not be loaded \([A-Z_]+\): check the open-file limit \(ulimit -n\) and the installation)\n$/,
      );
      assert.ok(!looksLikeStackTrace(r.stderr), r.stderr);
      assert.equal(r.stdout, '');
    }
  });

  it('a mistyped option is reported as unknown, also where a required option is missing too', async () => {
    const commands = [
      ['router', 'serve'],
      ['controller', 'serve'],
      ['fleet', 'serve'],
      ['bench', 'run'],
      ['bench', 'cancel'],
      ['recipe', 'apply', 'qwen'],
      ['recipe', 'stop', 'qwen'],
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

  it('a command group without its subcommand is invalid usage (exit 2, one fixed line); --help is not', async () => {
    for (const args of [[], ['router'], ['fleet'], ['bench'], ['recipe'], ['controller'], ['engine']]) {
      const r = await runCli(args);
      assert.equal(r.code, 2, args.join(' '));
      // The help to read is the group's own, which lists its subcommands.
      assert.equal(
        r.stderr,
        `svc-serving: error: a command is missing (see svc-serving ${args.length > 0 ? `${args[0]} ` : ''}--help)\n`,
      );
      assert.equal(r.stdout, '');
    }
    const leadingZero = await runCli([
      'bench',
      'run',
      '--controller-url',
      'http://127.0.0.1:1',
      '--auth-env',
      'X',
      '--alias',
      'm',
      '--requests',
      '01',
    ]);
    assert.equal(leadingZero.code, 2, 'a non-canonical integer is refused as by the read commands');
    const help = await runCli(['router', '--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /Usage: svc-serving router/);
    // The `help` command the help lists works as it says.
    const [top, sub, unknown] = await Promise.all([
      runCli(['help']),
      runCli(['help', 'router']),
      runCli(['help', 'nosuch']),
    ]);
    assert.deepEqual([top.code, top.stderr], [0, '']);
    assert.match(top.stdout, /Usage: svc-serving /);
    assert.deepEqual([sub.code, sub.stderr], [0, '']);
    assert.match(sub.stdout, /Usage: svc-serving router/);
    assert.equal(unknown.code, 2);
    assert.equal(unknown.stderr, 'svc-serving: error: unknown command (see svc-serving --help)\n');
    // `help` takes command names only: an option after it is an unknown option, exit 2.
    const withOptions = await Promise.all(
      [
        ['help', '--bogus-Zq1'],
        ['router', 'help', '--bogus-Zq1'],
        ['help', 'router', '--bogus-Zq1'],
        ['help', 'router', 'diagnose', '--json'],
      ].map((a) => runCli(a)),
    );
    for (const r of withOptions) {
      assert.equal(r.code, 2);
      assert.equal(r.stdout, '');
      assert.match(r.stderr, /^svc-serving: error: unknown option \(see svc-serving (router )?--help\)\n$/);
      assert.ok(!r.stderr.includes('Zq1'));
    }
    assert.equal((await runCli(['help', '--help'])).code, 0);
  });

  it("output nobody reads is no crash: a closed pipe ends quietly with the command's own code; a full disk is one line and exit 1", async () => {
    // The reader closes its end at once (`| true`): the help is still the command's success.
    const closed = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, [CLI, 'router', 'diagnose', '--help'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child.stdout.destroy();
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      child.on('close', (code) => resolve({ code, stderr }));
    });
    assert.deepEqual(closed, { code: 0, stderr: '' });
    if (existsSync('/dev/full')) {
      const full = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const out = openSync('/dev/full', 'w');
        const child = spawn(process.execPath, [CLI, '--help'], { stdio: ['ignore', out, 'pipe'] });
        closeSync(out);
        let stderr = '';
        child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
        child.on('close', (code) => resolve({ code, stderr }));
      });
      assert.deepEqual(full, { code: 1, stderr: 'svc-serving: error: cannot write the output (ENOSPC)\n' });
    }
  });

  it('a node configuration with router_url but no router_key_env is refused at start (jobs could never run)', async () => {
    const d = mkdtempSync(join(tmpdir(), 'svc-node-cfg-'));
    writeFileSync(
      join(d, 'policy.toml'),
      '[[clients]]\nid = "r"\ngrants = ["workloads:read"]\ncredential_env = "X_TOK"\n',
    );
    writeFileSync(
      join(d, 'node.toml'),
      '[node]\nhost_id = "n"\nlisten = "127.0.0.1:0"\nauthorization_policy = "policy.toml"\nrouter_url = "http://127.0.0.1:9"\n',
    );
    const r = await runCli(['controller', 'serve', '--config', join(d, 'node.toml')], { X_TOK: 'abcdefgh12345678' });
    assert.equal(r.code, 2);
    assert.match(r.stderr, /router_url and router_key_env go together/);
  });

  it("a usage error names the option the command defines (never the value typed) and the command's own help", async () => {
    const cases: [string[], string][] = [
      [
        ['bench', 'run', '--controller-url', 'http://127.0.0.1:9', '--auth-env', 'X', '--yes'],
        'a required option is missing: --alias (see svc-serving bench run --help)',
      ],
      [['controller', 'serve'], 'a required option is missing: --config (see svc-serving controller serve --help)'],
      [
        ['up', '--router-port', 'Zq1-port'],
        'invalid option value: --router-port (expected a port) (see svc-serving up --help)',
      ],
      [['up', '--router-port'], 'an option needs a value: --router-port (see svc-serving up --help)'],
      [['bench', 'run', '--controler-url-Zq1', 'x'], 'unknown option (see svc-serving bench run --help)'],
      [
        ['router', 'diagnose', 'req_0123'],
        'the credential environment variable is unset or empty (see svc-serving router diagnose --help)',
      ],
    ];
    const results = await runCliBatch(cases.map(([args]) => ({ args })));
    results.forEach((r, i) => {
      assert.equal(r.code, 2, cases[i]![0].join(' '));
      assert.equal(r.stderr, `svc-serving: error: ${cases[i]![1]}\n`);
      assert.ok(!r.stderr.includes('Zq1'));
    });
  });

  it('a router key no header can carry stops the controller at start (exit 2), naming the variable, never the key', async () => {
    const d = mkdtempSync(join(tmpdir(), 'svc-node-cfg-'));
    writeFileSync(
      join(d, 'policy.toml'),
      '[[clients]]\nid = "r"\ngrants = ["workloads:read"]\ncredential_env = "X_TOK"\n',
    );
    writeFileSync(
      join(d, 'node.toml'),
      '[node]\nhost_id = "n"\nlisten = "127.0.0.1:0"\nauthorization_policy = "policy.toml"\nrouter_url = "http://127.0.0.1:9"\nrouter_key_env = "X_KEY"\n',
    );
    const r = await runCli(['controller', 'serve', '--config', join(d, 'node.toml')], {
      X_TOK: 'abcdefgh12345678',
      X_KEY: 'CANARY key with spaces',
    });
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /X_KEY \(router_key_env\) holds a key that is not 1-4096 printable ASCII/);
    assert.doesNotMatch(r.stderr, /CANARY/);
  });

  it('required options given: the command goes on to check their values', async () => {
    const [r] = await runCliBatch([
      { args: ['recipe', 'apply', 'qwen', '--controller-url', 'http://127.0.0.1:9', '--auth-env', 'UNSET_Zq1'] },
    ]);
    assert.equal(r!.code, 2);
    assert.match(r!.stderr, /unset or empty/);
  });

  it('an option given twice is invalid usage on every command, also options that have a default', async () => {
    const cases = [
      ['dashboard', 'serve', '--port', '0', '--port', '1'],
      ['dashboard', 'serve', '--host', '127.0.0.1', '--host', '127.0.0.2'],
      ['up', '--router-port', '0', '--router-port', '0'],
      ['up', '--demo-traffic', '--demo-traffic'],
      ['engine', 'sim', '--listen', '127.0.0.1:0', '--listen', '127.0.0.1:0'],
      ['router', 'serve', '--config', 'a.toml', '--config', 'b.toml'],
      ['router', 'diagnose', '--active', '--active'],
    ];
    const results = await runCliBatch(cases.map((args) => ({ args })));
    results.forEach((r, i) => {
      assert.equal(r.code, 2, `${cases[i]!.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr + r.stdout, /given more than once/, cases[i]!.join(' '));
      assert.deepEqual(r.uncaught, []);
    });
  });

  it('up refuses a host ID outside the grammar before starting anything', async () => {
    const results = await runCliBatch(
      [
        ['up', '--host-id', '1bad'],
        ['up', '--host-id', 'a'.repeat(65)],
        ['up', '--host-id', 'bad id'],
      ].map((args) => ({ args })),
    );
    for (const r of results) {
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, /invalid option value/);
      assert.ok(!r.stderr.includes('1bad') && !r.stderr.includes('bad id'));
    }
  });

  it('help texts show plain defaults and the right command in examples', async () => {
    const [sim, stop] = await runCliBatch([
      { args: ['engine', 'sim', '--help'] },
      { args: ['recipe', 'stop', '--help'] },
    ]);
    assert.match(sim!.stdout, /\(default: 127\.0\.0\.1:8001\)/);
    assert.ok(!sim!.stdout.includes('{"host"'));
    assert.match(stop!.stdout, /svc-serving recipe stop qwen-7b/);
    assert.ok(!stop!.stdout.includes('recipe apply'));
  });

  it("every command's own help lists its exit codes, 130 for Ctrl-C included", async () => {
    const commands = [
      ['up'],
      ['bench', 'run'],
      ['bench', 'cancel'],
      ['router', 'serve'],
      ['router', 'workloads'],
      ['router', 'diagnose'],
      ['fleet', 'serve'],
      ['fleet', 'workloads'],
      ['fleet', 'diagnose'],
      ['controller', 'serve'],
      ['engine', 'sim'],
      ['dashboard', 'serve'],
      ['recipe', 'status'],
      ['recipe', 'apply'],
      ['recipe', 'stop'],
    ];
    const results = await runCliBatch(commands.map((c) => ({ args: [...c, '--help'] })));
    for (const [i, r] of results.entries()) {
      assert.equal(r.code, 0, commands[i]!.join(' '));
      assert.match(r.stdout, /Exit codes:[\s\S]*\b2\b[\s\S]*\b130 interrupted/, commands[i]!.join(' '));
      // A read starts nothing and runs no job: its 1 is a bug only.
      const read = [
        'router workloads',
        'router diagnose',
        'fleet workloads',
        'fleet diagnose',
        'recipe status',
      ].includes(commands[i]!.join(' '));
      const text = r.stdout.replace(/\s+/g, ' ');
      if (read) assert.match(text, /1 only an unexpected internal error/, commands[i]!.join(' '));
      // A read follows no job and asks for no confirmation.
      if (read) assert.doesNotMatch(text, /following a job|confirmation prompt/, commands[i]!.join(' '));
      assert.equal(
        /a server that cannot start|cannot start \(/.test(text),
        ['up', 'router serve', 'fleet serve', 'controller serve', 'engine sim', 'dashboard serve'].includes(
          commands[i]!.join(' '),
        ),
        commands[i]!.join(' '),
      );
    }
  });

  it("each server command's help names every key its configuration takes", async () => {
    const [router, controller, fleet] = await runCliBatch([
      { args: ['router', 'serve', '--help'] },
      { args: ['controller', 'serve', '--help'] },
      { args: ['fleet', 'serve', '--help'] },
    ]);
    const keys = (o: { properties: Record<string, unknown> }, table: string): string[] =>
      Object.keys((o.properties[table] as { properties: Record<string, unknown> }).properties);
    const cases: Array<[string, string[]]> = [
      [router!.stdout, [...keys(RouterConfigSchema, 'server'), ...Object.keys(ModelSchema.properties)]],
      [controller!.stdout, keys(NodeConfigSchema, 'node')],
      [
        fleet!.stdout,
        [
          ...keys(FleetConfigSchema, 'fleet'),
          ...Object.keys(
            (FleetConfigSchema.properties.nodes as unknown as { items: { properties: Record<string, unknown> } }).items
              .properties,
          ),
        ],
      ],
    ];
    for (const [text, names] of cases) for (const k of names) assert.match(text, new RegExp(`\\b${k}\\b`), k);
  });

  it('help names commands at any depth: `help router diagnose` is the diagnose help; an unknown name after help is an unknown command', async () => {
    const [deep, unknownSub, unknownTop, bare, extra] = await runCliBatch([
      { args: ['help', 'router', 'diagnose'] },
      { args: ['router', 'help', 'nope'] },
      { args: ['help', 'nope'] },
      { args: ['router', 'help'] },
      { args: ['help', 'recipe', 'status', 'qwen'] },
    ]);
    // Help never runs the command it names, whatever follows it.
    assert.equal(extra!.code, 0, extra!.stderr);
    assert.match(extra!.stdout, /^Usage: svc-serving recipe status /);
    assert.equal(deep!.code, 0);
    assert.match(deep!.stdout, /^Usage: svc-serving router diagnose /);
    assert.equal(unknownSub!.code, 2);
    assert.equal(unknownSub!.stderr, 'svc-serving: error: unknown command (see svc-serving router --help)\n');
    assert.equal(unknownTop!.code, 2);
    assert.match(unknownTop!.stderr, /unknown command/);
    assert.equal(bare!.code, 0);
    assert.match(bare!.stdout, /^Usage: svc-serving router /);
  });

  it('an environment variable named like a JavaScript object member (constructor, __proto__) is unset, not a crash', async () => {
    const results = await runCliBatch([
      {
        args: [
          'router',
          'workloads',
          '--router-url',
          'http://127.0.0.1:1',
          '--auth-env',
          'constructor',
          '--expected-node',
          'a',
        ],
      },
      { args: ['router', 'diagnose', '--active', '--router-url', 'http://127.0.0.1:1', '--auth-env', 'toString'] },
      {
        args: [
          'bench',
          'cancel',
          '--controller-url',
          'http://127.0.0.1:1',
          '--auth-env',
          '__proto__',
          '--job',
          'bench_0123456789abcdef01234567',
        ],
      },
    ]);
    for (const r of results) {
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, /unset or empty/);
      assert.deepEqual(r.uncaught, []);
    }
  });

  it('router serve on a file that breaks the schema names the member and points at config check for the reason, never the value', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-serve-schema-'));
    const cfg = join(dir, 'router.toml');
    writeFileSync(
      cfg,
      [
        '[server]',
        'host_id = "gpu-1"',
        'listen = "127.0.0.1:0"',
        'api_keys_env = "KEYS"',
        '[[models]]',
        'alias = "m"',
        'upstrem = "http://127.0.0.1:9/v1-Zq1"',
        '',
      ].join('\n'),
    );
    const r = await runCli(['router', 'serve', '--config', cfg], { KEYS: 'k' });
    assert.equal(r.code, 2, r.stderr);
    assert.match(
      r.stderr,
      /invalid configuration: router configuration: invalid member \/models\/0\/upstrem \(svc-serving config check FILE says why\)\n$/,
    );
    assert.ok(!r.stderr.includes('Zq1') && !r.stderr.includes(dir), r.stderr);
  });

  it('SVC_LOG_LEVEL: empty is the default; a name that is no level stops a server at start with exit 2, naming the variable', async () => {
    assert.deepEqual(
      [logLevel({}), logLevel({ SVC_LOG_LEVEL: '' }), logLevel({ SVC_LOG_LEVEL: ' Debug ' })],
      ['info', 'info', 'debug'],
    );
    const bogus = await runCli(['engine', 'sim', '--listen', '127.0.0.1:0'], { SVC_LOG_LEVEL: 'loud' });
    assert.equal(bogus!.code, 2);
    assert.match(
      bogus!.stderr,
      /invalid configuration: environment variable SVC_LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent/,
    );
  });
});
