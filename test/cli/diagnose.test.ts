import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../support/free-port.js';
import { startRouterHarness, type RouterHarness } from '../support/router-harness.js';
import { ROUTER_STATUS, sendJson, startFake, startRelay, terminalRecord } from './fake-servers.js';
import { looksLikeStackTrace, runCli, runCliBatch } from './run-cli.js';

const TOKEN_VAR = 'SVC_CLI_DIAG_TOKEN';

describe('router diagnose against a real router', () => {
  let h: RouterHarness;
  let closedUrl: string;
  const temp = mkdtempSync(join(tmpdir(), 'svc-cli-diag-'));
  const env = (): Record<string, string> => ({ [TOKEN_VAR]: h.key });

  /** One streamed chat request; returns its X-Svc-Request-Id. */
  async function chat(prompt: string, extra: { max_tokens?: number; session?: string } = {}): Promise<string> {
    const { data, response } = await h
      .client()
      .chat.completions.create(
        {
          model: 'chat',
          messages: [{ role: 'user', content: prompt }],
          stream: true,
          ...(extra.max_tokens ? { max_tokens: extra.max_tokens } : {}),
        },
        extra.session ? { headers: { 'X-Svc-Session-Id': extra.session } } : {},
      )
      .withResponse();
    for await (const _chunk of data) {
      // drain: the record is terminal once the stream ends
    }
    return response.headers.get('x-svc-request-id')!;
  }

  before(async () => {
    h = await startRouterHarness({ models: [{ alias: 'chat', max_output_tokens: 16 }] });
    closedUrl = `http://127.0.0.1:${await freePort()}`;
  });
  after(async () => {
    await h?.stop();
    rmSync(temp, { recursive: true, force: true });
  });

  it('explains a slow start as startup dominated, in under a second of diagnosis', async () => {
    const id = await chat('sim:ttft_ms=700 sim:tokens=3 sim:token_delay_ms=5');
    await h.idle();
    const relay = await startRelay(h.routerUrl);
    // The explicit option wins over SVC_ROUTER_URL (which points at a closed port).
    const r = await runCli(['router', 'diagnose', id, '--router-url', relay.url, '--auth-env', TOKEN_VAR], {
      ...env(),
      SVC_ROUTER_URL: closedUrl,
    });
    const s = relay.stats();
    await relay.close();
    assert.equal(r.code, 0, r.stderr);
    assert.match(
      r.stdout,
      /Timing: startup dominated: the first content came after more than half of the recorded time/,
    );
    assert.match(r.stdout, /it is not a root cause/);
    assert.match(r.stdout, /Where the time went/);
    assert.match(r.stdout, /readiness check\s+\d+ ms/);
    assert.match(
      r.stdout,
      /Current router \(a separate status read, now\): host node-a, version \S+, routing configuration hash [0-9a-f]{64}/,
    );
    assert.match(r.stdout, /does not prove which configuration served an earlier request/);
    assert.ok(s.connections >= 1 && s.connections <= 2, `${s.connections} connections`);
    assert.ok(s.lastClose - s.firstOpen < 1000, `the diagnosis took ${s.lastClose - s.firstOpen} ms`);
  });

  it('--json: completion dominated, length finish and a clamped output limit, with the current router', async () => {
    const id = await chat('sim:ttft_ms=5 sim:tokens=12 sim:token_delay_ms=40 sim:finish=length', { max_tokens: 500 });
    await h.idle();
    const r = await runCli(
      ['router', 'diagnose', id, '--json', '--router-url', h.routerUrl, '--auth-env', TOKEN_VAR],
      env(),
    );
    assert.equal(r.code, 0, r.stderr);
    const e = JSON.parse(r.stdout);
    assert.equal(e.schema, 'svc-router-diagnosis/v1');
    assert.equal(e.request.request_id, id);
    assert.deepEqual(e.request.output_limit, { requested: 500, effective: 16, clamped: true });
    for (const code of ['completion_dominated', 'length_finish', 'output_clamped'])
      assert.ok(e.interpretation.includes(code), code);
    assert.equal(e.current_router.host, 'node-a');
    assert.equal(e.requests, undefined);
  });

  it('a lookup that finds nothing lists the four causes and exits 0', async () => {
    const missing = 'req_0000000000000000000000000000dead';
    const [human, json] = await Promise.all([
      runCli(['router', 'diagnose', missing, '--router-url', h.routerUrl, '--auth-env', TOKEN_VAR], env()),
      runCli(['router', 'diagnose', missing, '--json', '--router-url', h.routerUrl, '--auth-env', TOKEN_VAR], env()),
    ]);
    assert.equal(human.code, 0, human.stderr);
    for (const cause of [/still active/, /evicted/, /outside the retained history/, /does not serve request lookup/])
      assert.match(human.stdout, cause);
    assert.equal(json.code, 0, json.stderr);
    const e = JSON.parse(json.stdout);
    assert.equal(e.request, null);
    assert.deepEqual(e.interpretation, ['not_found_maybe_active_or_evicted']);
  });

  it('--active shows requests in flight with engine counts apart from estimates', async () => {
    const inFlight = h.client().chat.completions.create({
      model: 'chat',
      messages: [{ role: 'user', content: 'sim:ttft_ms=4000 sim:tokens=2' }],
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    const r = await runCli(
      ['router', 'diagnose', '--active', '--router-url', h.routerUrl, '--auth-env', TOKEN_VAR],
      env(),
    );
    await inFlight;
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /Requests in flight on this router: 1 shown, 0 more not shown/);
    assert.match(
      r.stdout,
      /PHASE\s+ELAPSED\s+SINCE-UPSTREAM\s+ADMISSION-WAIT\s+PROMPT-ENGINE\s+PROMPT-EST\s+COMPLETION-ENGINE\s+COMPLETION-EST/,
    );
    assert.match(r.stdout, /chat\.completions\s+(dispatched|streaming)\s+[\d.]+ m?s/);
    assert.match(r.stdout, /EST columns are the router's local estimates/);
  });

  it('--session-id lists retained requests newest first, with settings from SVC_SERVING_HOME and a credential file', async () => {
    const first = await chat('sim:ttft_ms=5 sim:tokens=2', { session: 'sess-cli-1' });
    const second = await chat('sim:ttft_ms=5 sim:tokens=2 sim:finish=tool_calls', { session: 'sess-cli-1' });
    await h.idle();
    const home = mkdtempSync(join(temp, 'home-'));
    writeFileSync(
      join(home, 'router-diagnostics.toml'),
      `router_url = "${h.routerUrl}"\nauth_env = "FROM_FILE_TOKEN"\ncredential_env_file = "creds.env"\ntimeout = 3\n`,
    );
    writeFileSync(join(home, 'creds.env'), `# declared in the settings file\nFROM_FILE_TOKEN=${h.key}\n`);
    const r = await runCli(['router', 'diagnose', '--session-id', 'sess-cli-1'], { SVC_SERVING_HOME: home });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /Session sess-cli-1: 2 retained requests, newest first; 0 more not shown/);
    assert.ok(r.stdout.indexOf(second) < r.stdout.indexOf(first) && r.stdout.indexOf(first) > 0, r.stdout);
    assert.match(r.stdout, /tool-call transition/);
  });

  it('invalid usage is exit 2 with fixed messages', async () => {
    const badHome = mkdtempSync(join(temp, 'bad-'));
    writeFileSync(
      join(badHome, 'router-diagnostics.toml'),
      'router_url = "http://127.0.0.1:8000"\nunknown_key_Zq1 = 1\n',
    );
    const emptyHome = join(badHome, 'empty');
    mkdirSync(emptyHome);
    const cases: [string[], Record<string, string>, RegExp][] = [
      [[], { SVC_ROUTER_TOKEN: 't' }, /exactly one of/],
      [['req_x', '--active'], { SVC_ROUTER_TOKEN: 't' }, /exactly one of/],
      [['bad id Zq1'], { SVC_ROUTER_TOKEN: 't' }, /not a valid request identifier/],
      [['--session-id', 'sp ace'], { SVC_ROUTER_TOKEN: 't' }, /not a valid session identifier/],
      [['--active', '--timeout', '31'], { SVC_ROUTER_TOKEN: 't' }, /--timeout must be/],
      [
        ['--active', '--config', '/nonexistent/Zq1.toml'],
        { SVC_ROUTER_TOKEN: 't' },
        /settings file given with --config is not readable/,
      ],
      [['--active'], { SVC_ROUTER_TOKEN: 't', SVC_SERVING_HOME: badHome }, /settings file is not valid/],
      [['--active'], { SVC_SERVING_HOME: emptyHome }, /unset or empty/],
      [['--active', '--router-url', 'http://localhost:8000'], { SVC_ROUTER_TOKEN: 't' }, /plain HTTP is allowed only/],
      [['--active', '--active'], { SVC_ROUTER_TOKEN: 't' }, /more than once/],
    ];
    const results = await runCliBatch(cases.map(([args, env]) => ({ args: ['router', 'diagnose', ...args], env })));
    results.forEach((r, j) => {
      assert.equal(r.code, 2, `${cases[j]![0].join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, cases[j]![2]);
      assert.deepEqual(r.uncaught, []);
      assert.ok(!r.stderr.includes('Zq1') && !looksLikeStackTrace(r.stderr), r.stderr);
    });
  });
});

describe('router diagnose against in-test routers', () => {
  it('a failing status route does not spoil the diagnosis; exactly two GETs are sent', async () => {
    const record = terminalRecord({
      route: 'embeddings',
      latency_ms: 0,
      time_to_first_content_ms: null,
      output_limit: null,
      finish_reason: null,
    });
    const s = await startFake((req, res) => {
      if (req.url === '/v1/router/status') sendJson(res, 500, { title: 'x' });
      else sendJson(res, 200, { request: record });
    });
    const [human, json] = await Promise.all([
      runCli(['router', 'diagnose', record.request_id, '--router-url', s.url], { SVC_ROUTER_TOKEN: 'tok' }),
      runCli(['router', 'diagnose', record.request_id, '--router-url', s.url, '--json'], { SVC_ROUTER_TOKEN: 'tok' }),
    ]);
    assert.equal(human.code, 0, human.stderr);
    assert.match(human.stdout, /Current router: unavailable \(the status read failed\); the diagnosis above stands/);
    assert.match(human.stdout, /Total latency is not measured for embeddings and rerank requests/);
    const e = JSON.parse(json.stdout);
    assert.deepEqual(e.current_router, { unavailable: true });
    assert.equal(e.request.latency_ms, null);
    assert.deepEqual(e.interpretation, ['latency_unmeasured']);
    assert.equal(s.hits.length, 4, 'two GETs per run');
    assert.ok(s.hits.every((h) => h.method === 'GET' && h.body === ''));
    assert.deepEqual(
      new Set(s.hits.map((h) => h.url)),
      new Set([`/v1/requests/${record.request_id}`, '/v1/router/status']),
    );
    await s.close();
  });

  it('a record of another request or session is never diagnosed as the one asked for (exit 4)', async () => {
    const other = terminalRecord({ request_id: `req_${'f'.repeat(32)}` });
    const legacy = terminalRecord({ request_id: 'caller-trace-7' });
    const foreignSession = terminalRecord({ session_id: 'other-session' });
    const s = await startFake((req, res) => {
      if (req.url === '/v1/router/status') return sendJson(res, 200, ROUTER_STATUS);
      if (req.url?.startsWith('/v1/requests?'))
        return sendJson(res, 200, { requests: [foreignSession], truncation: { returned: 1, omitted: 0 } });
      sendJson(res, 200, { request: req.url === `/v1/requests/req_${'a'.repeat(32)}` ? legacy : other });
    });
    const [wrong, wrongLegacy, byGid, session] = await Promise.all([
      runCli(['router', 'diagnose', `req_${'0'.repeat(32)}`, '--router-url', s.url], { SVC_ROUTER_TOKEN: 'tok' }),
      runCli(['router', 'diagnose', 'caller-trace-8', '--router-url', s.url], { SVC_ROUTER_TOKEN: 'tok' }),
      runCli(['router', 'diagnose', `req_${'a'.repeat(32)}`, '--router-url', s.url], { SVC_ROUTER_TOKEN: 'tok' }),
      runCli(['router', 'diagnose', '--session-id', 'my-session', '--router-url', s.url], { SVC_ROUTER_TOKEN: 'tok' }),
    ]);
    for (const r of [wrong, wrongLegacy, session]) {
      assert.equal(r.code, 4, r.stdout);
      assert.equal(r.stdout, '');
      assert.equal(
        r.stderr,
        'svc-serving: error: the router answered with the record of a different request or session than asked\n',
      );
    }
    // A generated id answers for the request that carried it, whose record keeps the caller's id.
    assert.equal(byGid.code, 0, byGid.stderr);
    assert.match(byGid.stdout, /caller-trace-7/);
    await s.close();
  });

  it('404 on both routes means no diagnosis is served (exit 4); 404 on the lookup alone is not-found', async () => {
    const both = await startFake((_req, res) => sendJson(res, 404, {}));
    const lookupOnly = await startFake((req, res) =>
      req.url === '/v1/router/status' ? sendJson(res, 200, ROUTER_STATUS) : sendJson(res, 404, {}),
    );
    const [a, b] = await Promise.all([
      runCli(['router', 'diagnose', 'legacy-id.1', '--router-url', both.url], { SVC_ROUTER_TOKEN: 'tok' }),
      runCli(['router', 'diagnose', 'legacy-id.1', '--router-url', lookupOnly.url, '--json'], {
        SVC_ROUTER_TOKEN: 'tok',
      }),
    ]);
    assert.equal(a.code, 4);
    assert.match(a.stderr, /serves neither request lookups nor router status/);
    assert.equal(b.code, 0, b.stderr);
    assert.deepEqual(JSON.parse(b.stdout).current_router, ROUTER_STATUS);
    assert.equal(lookupOnly.hits.find((h) => h.url.startsWith('/v1/requests/'))!.url, '/v1/requests/legacy-id%2E1');
    await both.close();
    await lookupOnly.close();
  });
});
