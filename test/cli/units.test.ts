import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkOrigin } from '../../src/auth/origin-policy.js';
import { UsageFailure } from '../../src/cli/read-errors.js';
import { readCredentialFile, resolveDiagnoseSettings } from '../../src/cli/settings.js';
import { detectStyle, formatAge, formatFleetResult } from '../../src/cli/format-workloads.js';
import { filterQuery, filtersFromOptions } from '../../src/cli/workloads-command.js';
import { INTERPRETATION_CODES, interpret, terminalEvidence } from '../../src/schema/diagnosis.js';
import { terminalRecord } from './fake-servers.js';
import { formatRequest } from '../../src/cli/format-diagnosis.js';

const usageKey = (f: () => unknown): string => {
  try {
    f();
  } catch (err) {
    if (err instanceof UsageFailure) return err.key;
    throw err;
  }
  return 'accepted';
};

describe('origin policy', () => {
  it('accepts loopback and private IP literals over HTTP, normalizing other spellings first', () => {
    const cases: [string, string][] = [
      ['http://127.0.0.1:8000', 'http://127.0.0.1:8000'],
      ['http://127.0.0.1:8000/', 'http://127.0.0.1:8000'],
      ['HTTP://127.0.0.1', 'http://127.0.0.1'],
      ['http://0x7f.1', 'http://127.0.0.1'],
      ['http://2130706433:9', 'http://127.0.0.1:9'],
      ['http://017700000001', 'http://127.0.0.1'],
      ['http://127.1', 'http://127.0.0.1'],
      ['http://0xa.1', 'http://10.0.0.1'],
      ['http://10.1.2.3', 'http://10.1.2.3'],
      ['http://172.16.0.1', 'http://172.16.0.1'],
      ['http://172.31.255.255', 'http://172.31.255.255'],
      ['http://192.168.1.1:80', 'http://192.168.1.1'],
      ['http://[::1]:8000', 'http://[::1]:8000'],
      ['http://[0:0:0:0:0:0:0:1]', 'http://[::1]'],
      ['http://[fd12:3456::1]', 'http://[fd12:3456::1]'],
      ['http://[fc00::]', 'http://[fc00::]'],
      ['http://[::ffff:127.0.0.1]', 'http://[::ffff:7f00:1]'],
      ['http://[::ffff:10.0.0.1]', 'http://[::ffff:a00:1]'],
      ['http://[::ffff:c0a8:101]', 'http://[::ffff:c0a8:101]'],
      ['https://example.com', 'https://example.com'],
      ['https://router.internal:8443/', 'https://router.internal:8443'],
      ['https://8.8.8.8', 'https://8.8.8.8'],
    ];
    for (const [raw, origin] of cases) assert.equal(checkOrigin(raw).origin, origin, raw);
  });

  it('refuses plain HTTP to public addresses, special ranges and DNS names', () => {
    for (const raw of [
      'http://8.8.8.8',
      'http://0x08080808',
      'http://172.32.0.1',
      'http://172.15.255.255',
      'http://192.169.0.1',
      'http://11.0.0.1',
      'http://0.0.0.0',
      'http://169.254.169.254',
      'http://[::]',
      'http://[fe80::1]',
      'http://[2001:db8::1]',
      'http://[::ffff:8.8.8.8]',
      'http://[::127.0.0.1]',
      'http://[64:ff9b::7f00:1]',
      'http://localhost:8000',
      'http://example.com',
      'http://127.0.0.1.nip.io',
    ]) {
      assert.equal(
        usageKey(() => checkOrigin(raw)),
        'plainHttp',
        raw,
      );
    }
  });

  it('refuses anything that is not a bare origin', () => {
    for (const raw of [
      '',
      '127.0.0.1:8000',
      'ftp://127.0.0.1',
      'file:///etc/passwd',
      'http://127.0.0.1/v1',
      'http://127.0.0.1//',
      'http://127.0.0.1/?',
      'http://127.0.0.1?a=1',
      'http://127.0.0.1#x',
      'http://user:pw@127.0.0.1',
      'http://@127.0.0.1',
      'http:\\\\127.0.0.1',
      ' http://127.0.0.1',
      'http://127.0.0.1 ',
      'http://127.0.\t0.1',
      'http://',
      'http://[::1',
      'http://127.0.0.1:99999',
      `http://127.0.0.1:1${'0'.repeat(3000)}`,
      'http://127.0.0.1:',
      'http://127.0.0.1:/',
      'http://127.0.0.1:0',
      'http://127.0.0.1:00',
      'http://[::1]:',
    ]) {
      assert.equal(
        usageKey(() => checkOrigin(raw)),
        'origin',
        JSON.stringify(raw),
      );
    }
  });
});

describe('interpret', () => {
  const codes = (over: Parameters<typeof terminalRecord>[0]) => interpret(terminalEvidence(terminalRecord(over)));

  it('describes timing by the first content against half of the total', () => {
    assert.deepEqual(codes({ latency_ms: 1000, time_to_first_content_ms: 501 }), ['startup_dominated']);
    assert.deepEqual(codes({ latency_ms: 1000, time_to_first_content_ms: 500 }), ['completion_dominated']);
    assert.deepEqual(codes({ time_to_first_content_ms: null }), []);
    assert.deepEqual(codes({ latency_ms: null }), []);
  });

  it('names finishes, rejections, failures and provenance', () => {
    assert.deepEqual(codes({ finish_reason: 'length', time_to_first_content_ms: null }), ['length_finish']);
    assert.deepEqual(codes({ finish_reason: 'tool_calls', time_to_first_content_ms: null }), ['tool_call_transition']);
    assert.deepEqual(codes({ outcome: 'rejected', status_code: 400, time_to_first_content_ms: null }), [
      'context_rejected',
    ]);
    assert.deepEqual(
      codes({ outcome: 'rejected', status_code: 429, time_to_first_content_ms: null, upstream_duration_ms: null }),
      ['admission_rejected'],
    );
    // The engine's own 429 (the router called it): not the router's admission.
    assert.deepEqual(
      codes({ outcome: 'rejected', status_code: 429, time_to_first_content_ms: null, upstream_duration_ms: 1.5 }),
      ['upstream_rate_limited'],
    );
    assert.deepEqual(codes({ outcome: 'rejected', status_code: 502, time_to_first_content_ms: null }), [
      'upstream_not_ready',
    ]);
    assert.deepEqual(codes({ outcome: 'disconnected', time_to_first_content_ms: null }), ['client_cancelled']);
    assert.deepEqual(codes({ outcome: 'cancelled', time_to_first_content_ms: null }), ['client_cancelled']);
    assert.deepEqual(codes({ outcome: 'error', time_to_first_content_ms: null }), ['upstream_failed']);
    assert.deepEqual(codes({ outcome: 'error', status_code: 502, time_to_first_content_ms: null }), [
      'upstream_failed',
    ]);
    // What the router itself ended (its stop, or a kill recorded at the next start) is not blamed on the engine.
    assert.deepEqual(codes({ outcome: 'error', status_code: 503, time_to_first_content_ms: null }), ['router_ended']);
    assert.deepEqual(codes({ outcome: 'error', status_code: 0, time_to_first_content_ms: null }), ['router_ended']);
    assert.deepEqual(
      codes({ outcome: 'error', status_code: 200, finish_reason: 'cancelled', time_to_first_content_ms: null }),
      ['router_ended'],
    );
    assert.deepEqual(
      codes({ outcome: 'error', status_code: 200, finish_reason: 'error', time_to_first_content_ms: null }),
      ['upstream_failed'],
    );
    assert.deepEqual(codes({ outcome: 'disconnected', status_code: 0, time_to_first_content_ms: null }), [
      'client_cancelled',
    ]);
    assert.deepEqual(codes({ outcome: 'timeout', time_to_first_content_ms: null }), ['upstream_timeout']);
    assert.deepEqual(
      codes({
        time_to_first_content_ms: null,
        usage: { prompt_tokens: 1, completion_tokens: null, prompt_source: 'estimated', completion_source: 'unknown' },
      }),
      ['usage_estimated', 'usage_unknown'],
    );
    assert.deepEqual(
      codes({ time_to_first_content_ms: null, output_limit: { requested: 9000, effective: 16, clamped: true } }),
      ['output_clamped'],
    );
  });

  it('reports the legacy embeddings latency 0 as null and unmeasured', () => {
    const ev = terminalEvidence(
      terminalRecord({ route: 'embeddings', latency_ms: 0, time_to_first_content_ms: null, output_limit: null }),
    );
    assert.equal(ev.latency_ms, null);
    assert.deepEqual(interpret(ev), ['latency_unmeasured']);
    assert.equal(terminalEvidence(terminalRecord({ route: 'chat.completions', latency_ms: 0 })).latency_ms, 0);
  });

  it('explains a chat record without an output limit as unrecorded, not as a route without limits', () => {
    const interrupted = terminalRecord({
      route: 'chat.completions',
      output_limit: null,
      outcome: 'error',
      status_code: 0,
    });
    const text = formatRequest(interrupted, interpret(interrupted), { unavailable: true });
    assert.match(text, /Output limit: not recorded for this request/);
    const embed = terminalRecord({ route: 'embeddings', output_limit: null });
    assert.match(
      formatRequest(embed, interpret(embed), { unavailable: true }),
      /Output limit: none recorded for this route/,
    );
  });

  it('emits codes only from the fixed list, in its order', () => {
    const all = codes({
      finish_reason: 'length',
      outcome: 'disconnected',
      output_limit: { requested: 1, effective: 1, clamped: true },
    });
    assert.deepEqual(
      all,
      [...all].sort((a, b) => INTERPRETATION_CODES.indexOf(a) - INTERPRETATION_CODES.indexOf(b)),
    );
  });
});

describe('settings', () => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-settings-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const write = (name: string, text: string): string => {
    const p = join(dir, name);
    writeFileSync(p, text);
    return p;
  };

  it('applies options, then the environment, then the file, then defaults', () => {
    const cfg = write('a.toml', 'router_url = "http://10.0.0.9:8000"\nauth_env = "FILE_TOKEN"\ntimeout = 7\n');
    const s1 = resolveDiagnoseSettings({ config: cfg }, { FILE_TOKEN: 'f' });
    assert.deepEqual([s1.origin.origin, s1.token, s1.timeoutS], ['http://10.0.0.9:8000', 'f', 7]);
    const s2 = resolveDiagnoseSettings(
      { config: cfg },
      { FILE_TOKEN: 'f', SVC_ROUTER_TOKEN: 'e', SVC_ROUTER_URL: 'http://10.0.0.8' },
    );
    assert.deepEqual([s2.origin.origin, s2.token], ['http://10.0.0.8', 'e']);
    const s3 = resolveDiagnoseSettings(
      { config: cfg, routerUrl: 'http://10.0.0.7', authEnv: 'OPT', timeout: '0.5' },
      { OPT: 'o', SVC_ROUTER_TOKEN: 'e', SVC_ROUTER_URL: 'http://10.0.0.8' },
    );
    assert.deepEqual([s3.origin.origin, s3.token, s3.timeoutS], ['http://10.0.0.7', 'o', 0.5]);
    const s4 = resolveDiagnoseSettings({}, { SVC_SERVING_HOME: join(dir, 'none'), SVC_ROUTER_TOKEN: 't' });
    assert.deepEqual([s4.origin.origin, s4.timeoutS], ['http://127.0.0.1:8000', 5]);
  });

  it('reads a declared credential file only, relative to the settings file', () => {
    write('cred.env', '# comment\nexport OTHER=1\nMY_TOKEN="from-file"\n');
    const cfg = write('b.toml', 'auth_env = "MY_TOKEN"\ncredential_env_file = "cred.env"\n');
    assert.equal(resolveDiagnoseSettings({ config: cfg }, {}).token, 'from-file');
    assert.equal(resolveDiagnoseSettings({ config: cfg }, { MY_TOKEN: 'env-wins' }).token, 'env-wins');
    assert.equal(
      usageKey(() => resolveDiagnoseSettings({ config: write('c.toml', 'auth_env = "MY_TOKEN"\n') }, {})),
      'noCredential',
    );
    assert.equal(
      usageKey(() => readCredentialFile(write('bad.env', 'not a pair\n'))),
      'credentialFile',
    );
  });

  it('refuses unknown keys, wrong types, a missing explicit file and bad timeouts', () => {
    const env = { SVC_ROUTER_TOKEN: 't' };
    assert.equal(
      usageKey(() => resolveDiagnoseSettings({ config: write('d.toml', 'routerurl = "x"\n') }, env)),
      'settingsInvalid',
    );
    assert.equal(
      usageKey(() => resolveDiagnoseSettings({ config: write('e.toml', 'timeout = "5"\n') }, env)),
      'settingsInvalid',
    );
    assert.equal(
      usageKey(() => resolveDiagnoseSettings({ config: write('f.toml', 'timeout = 31\n') }, env)),
      'settingsInvalid',
    );
    assert.equal(
      usageKey(() => resolveDiagnoseSettings({ config: write('g.toml', '[x\n') }, env)),
      'settingsInvalid',
    );
    assert.equal(
      usageKey(() => resolveDiagnoseSettings({ config: join(dir, 'missing.toml') }, env)),
      'settingsUnreadable',
    );
    for (const t of ['0', '30.5', '-1', 'abc', '1e1', ''])
      assert.equal(
        usageKey(() => resolveDiagnoseSettings({ timeout: t, config: write('h.toml', '') }, env)),
        'timeout',
        t,
      );
    // Inside the range however it is written: a leading dot, many decimals.
    for (const [t, want] of [
      ['.5', 0.5],
      ['0.0000001', 1e-7],
      ['30', 30],
      ['2.', 2],
    ] as const) {
      assert.equal(resolveDiagnoseSettings({ timeout: t, config: write('h.toml', '') }, env).timeoutS, want, t);
    }
    for (const t of ['.', '0.', '.0', '+1', '0x1'])
      assert.equal(
        usageKey(() => resolveDiagnoseSettings({ timeout: t, config: write('h.toml', '') }, env)),
        'timeout',
        t,
      );
  });
});

describe('colour', () => {
  it('only on a terminal and without NO_COLOR (an empty NO_COLOR does not count)', () => {
    const tty = { isTTY: true } as NodeJS.WriteStream;
    const pipe = { isTTY: false } as unknown as NodeJS.WriteStream;
    assert.equal(detectStyle(tty, {}).color, true);
    assert.equal(detectStyle(tty, { NO_COLOR: '1' }).color, false);
    assert.equal(detectStyle(tty, { NO_COLOR: '' }).color, true);
    assert.equal(detectStyle(pipe, {}).color, false);
  });
});

describe('formatAge', () => {
  it('prints kubectl-style ages', () => {
    assert.deepEqual([0, 12_400, 180_000, 7_200_000, 200_000_000, -5].map(formatAge), [
      '0s',
      '12s',
      '3m',
      '2h',
      '2d',
      '0s',
    ]);
  });
});

describe('CLI filters', () => {
  it('become the shared arguments object with only present filters, and the query in contract order', () => {
    const f = filtersFromOptions({
      limit: '5',
      owner: 'media',
      activeOnly: true,
      recentSeconds: '60',
      host: 'node-b',
      state: 'running',
      kind: 'media-job',
    });
    assert.deepEqual(f, {
      owner: 'media',
      kind: 'media-job',
      state: 'running',
      host: 'node-b',
      active_only: true,
      recent_seconds: 60,
      limit: 5,
    });
    assert.equal(
      filterQuery(f),
      '?owner=media&kind=media-job&state=running&host=node-b&active_only=true&recent_seconds=60&limit=5',
    );
    assert.deepEqual(filtersFromOptions({}), {});
    assert.equal(filterQuery({}), '');
  });

  it('refuses bad spellings, grammar and bounds', () => {
    const bad = [
      { owner: 'Router' },
      { owner: 'rout' },
      { owner: '' },
      { kind: 'router_request' },
      { state: 'RUNNING' },
      { state: 'done' },
      { host: '9node' },
      { host: 'a'.repeat(65) },
      { host: 'node a' },
      { limit: '0' },
      { limit: '1001' },
      { limit: '01' },
      { limit: '1e2' },
      { limit: '+5' },
      { limit: ' 5' },
      { recentSeconds: '0' },
      { recentSeconds: '86401' },
      { recentSeconds: '-5' },
      { recentSeconds: '3.5' },
    ];
    // Each names its own option (and what it must be), never the value.
    const keyOf: Record<string, string> = {
      owner: 'filterOwner',
      kind: 'filterKind',
      state: 'filterState',
      host: 'filterHost',
      limit: 'filterLimit',
      recentSeconds: 'filterRecentSeconds',
    };
    for (const o of bad)
      assert.equal(
        usageKey(() => filtersFromOptions(o)),
        keyOf[Object.keys(o)[0]!],
        JSON.stringify(o),
      );
  });
});

describe('fleet text output', () => {
  it('tells a node that could not be read from one that answered without a readable source', () => {
    const at = '2026-11-26T00:00:00.000Z';
    const unknown = { returned: 0, omitted: null };
    const answered = {
      schema: 'svc-workloads/v1' as const,
      expected_host: 'node-a',
      status: 'unavailable' as const,
      collected_at: at,
      truncation: unknown,
      sources: [
        {
          owner: 'router' as const,
          status: 'unavailable' as const,
          reason: 'timeout' as const,
          records: [],
          truncation: unknown,
        },
      ],
    };
    const gone = {
      schema: 'svc-workloads/v1' as const,
      expected_host: 'node-b',
      status: 'unavailable' as const,
      collected_at: at,
      truncation: unknown,
      sources: [],
      condition: 'unreachable' as const,
    };
    const text = formatFleetResult(
      {
        schema: 'svc-workloads/v1',
        status: 'unavailable',
        collected_at: at,
        nodes: [answered, gone],
        truncation: unknown,
      },
      { color: false },
    );
    assert.match(
      text,
      /node node-a: unavailable — NOT idle: the node answered, but no source asked about could be read;/,
    );
    assert.match(text, /node node-b: unavailable — NOT idle: the node could not be read \(unreachable\);/);
  });
});
