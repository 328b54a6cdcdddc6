import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { writeTestPolicy } from '../support/policy.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { RawNats } from '../support/raw-nats.js';

const SHIPPED_CONF = fileURLToPath(new URL('../../../deploy/nats.conf', import.meta.url));
const KEY = 'dp-key-lookup-flood-0123';
const LINES = 20_000;
const FLOOD = 200;

/**
 * Audit: a flood of `requests.session` lookups over NATS, from the fleet's credential (the
 * least privileged user allowed to ask), against a real router whose decision log holds many
 * records of one session. Each lookup scans the retained log and keeps every match: unbounded
 * in flight, 200 of them took a router to 4 GB and starved its data plane (chat requests took
 * tens of seconds, some failed) while none was answered in two minutes. Lookups that read the
 * log are bounded in flight and in waiting; the rest are answered at once with the fixed 503.
 */
describe('audit: a flood of request lookups over NATS cannot exhaust the router (real processes, shipped permissions)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-lookup-flood-'));
  const policy = writeTestPolicy(dir);
  const pw = {
    'node-a': `p${randomBytes(12).toString('hex')}`,
    'node-b': `p${randomBytes(12).toString('hex')}`,
    fleet: `p${randomBytes(12).toString('hex')}`,
  };
  const cfg = join(dir, 'router.toml');
  let nats: NatsServerHandle;
  let sim: RunningProcess;
  let router: RunningProcess | undefined;
  let fleet: RawNats | undefined;
  const env = (): Record<string, string> => ({ ...policy.env, SVC_ROUTER_KEYS: KEY, NODE_NATS_PASSWORD: pw['node-a'] });
  const chat = async (): Promise<number> => {
    const res = await fetch(`${router!.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', 'X-Svc-Session-Id': 'big' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });
    await res.text();
    return res.status;
  };

  before(async () => {
    nats = await startNatsServer({
      configText: readFileSync(SHIPPED_CONF, 'utf8'),
      jetstream: false,
      env: { NODE_A_NATS_PASSWORD: pw['node-a'], NODE_B_NATS_PASSWORD: pw['node-b'], FLEET_NATS_PASSWORD: pw.fleet },
    });
    sim = await spawnNode(CLI, [
      'engine',
      'sim',
      '--listen',
      '127.0.0.1:0',
      '--ttft-ms',
      '0',
      '--token-delay-ms',
      '0',
      '--tokens',
      '4',
    ]);
    writeFileSync(
      cfg,
      [
        '[server]',
        'host_id = "node-a"',
        'listen = "127.0.0.1:0"',
        'api_keys_env = "SVC_ROUTER_KEYS"',
        'authorization_policy = "policy.toml"',
        `nats_url = "${nats.url}"`,
        'nats_user = "node-a"',
        'nats_password_env = "NODE_NATS_PASSWORD"',
        'decision_log_path = "state/decisions.jsonl"',
        'decision_log_max_bytes = 67108864',
        '',
        '[[models]]',
        'alias = "m"',
        `upstream = "${sim.url}/v1"`,
        'upstream_model = "sim-model"',
        'max_output_tokens = 3',
      ].join('\n'),
    );
    // One real record of session "big", then the log is filled with copies of its line
    // (each its own id), as a busy session would leave it, and the router started again.
    router = await spawnNode(CLI, ['router', 'serve', '--config', cfg], { env: env() });
    assert.equal(await chat(), 200);
    const log = join(dir, 'state', 'decisions.jsonl');
    const line = await eventually(() => readFileSync(log, 'utf8').trim().split('\n').at(-1) || undefined, 5000, 50);
    await router.stop();
    const o = JSON.parse(line) as Record<string, unknown>;
    const lines: string[] = [];
    for (let i = 0; i < LINES; i++) {
      const id = `req_${i.toString(16).padStart(32, '0')}`;
      // One second apart, oldest first: the answer's 50 are the last 50 lines.
      const shift = (t: unknown) => new Date(Date.parse(t as string) - (LINES - i) * 1000).toISOString();
      lines.push(
        JSON.stringify({
          ...o,
          request_id: id,
          started_at: shift(o['started_at']),
          finished_at: shift(o['finished_at']),
          ...('gateway_request_id' in o ? { gateway_request_id: id } : {}),
        }),
      );
    }
    writeFileSync(log, `${lines.join('\n')}\n`);
    router = await spawnNode(CLI, ['router', 'serve', '--config', cfg], { env: env() });
    fleet = await RawNats.open(nats.port, 'fleet', pw.fleet);
    fleet.sub('_INBOX_fleet.>');
    await fleet.flush();
  });
  after(async () => {
    fleet?.close();
    await Promise.all([router?.stop(), sim?.stop()]);
    await nats?.stop();
  });

  it(`${FLOOD} session lookups at once: each is answered (a body or the fixed 503), and chat requests keep working meanwhile`, async () => {
    const f = fleet!;
    // One lookup alone is answered in full.
    f.pub('svc.v1.node-a.requests.session', '{"session_id":"big"}', '_INBOX_fleet.one.1');
    await f.flush();
    const one = await eventually(() => f.msgs.find((m) => m.subject === '_INBOX_fleet.one.1'), 20_000, 20);
    const body = JSON.parse(one.payload.toString()) as { requests: Array<{ request_id: string }>; truncation: unknown };
    const newest = Array.from({ length: 50 }, (_, k) => `req_${(LINES - 1 - k).toString(16).padStart(32, '0')}`);
    assert.deepEqual(
      body.requests.map((r) => r.request_id),
      newest,
      'the newest 50, newest first',
    );
    assert.deepEqual(body.truncation, { returned: 50, omitted: LINES - 50 });
    const t0 = Date.now();
    for (let i = 0; i < FLOOD; i++)
      f.pub('svc.v1.node-a.requests.session', '{"session_id":"big"}', `_INBOX_fleet.flood.${i}`);
    await f.flush();
    const chats: number[] = [];
    const statuses: number[] = [];
    const flood = () => f.msgs.filter((m) => m.subject.startsWith('_INBOX_fleet.flood.'));
    while (flood().length < FLOOD && Date.now() - t0 < 90_000) {
      const c0 = Date.now();
      statuses.push(await chat());
      chats.push(Date.now() - c0);
      await sleep(100);
    }
    const answers = flood().map((m) => JSON.parse(m.payload.toString()) as Record<string, unknown>);
    assert.equal(
      answers.length,
      FLOOD,
      `every lookup answered within 90 s (${answers.length} of ${FLOOD} in ${Date.now() - t0} ms)`,
    );
    const busy = JSON.stringify({
      type: 'urn:svc-serving:problem:unavailable',
      title: 'Service unavailable',
      status: 503,
      code: 'unavailable',
    });
    for (const a of answers)
      assert.ok(Array.isArray(a['requests']) || JSON.stringify(a) === busy, "a lookup's body or the fixed 503 problem");
    assert.ok(
      answers.some((a) => JSON.stringify(a) === busy),
      'lookups beyond the bound are answered 503',
    );
    assert.ok(
      statuses.every((s) => s === 200),
      `chat requests answered 200 during the flood (${statuses.join(',')})`,
    );
    assert.ok(Math.max(...chats) < 3_000, `chat latency during the flood: ${chats.join(', ')} ms`);
    // After the flood, a lookup is answered in full again.
    f.pub('svc.v1.node-a.requests.session', '{"session_id":"big"}', '_INBOX_fleet.after.1');
    await f.flush();
    const later = await eventually(() => f.msgs.find((m) => m.subject === '_INBOX_fleet.after.1'), 20_000, 20);
    assert.equal((JSON.parse(later.payload.toString()) as { requests: unknown[] }).requests.length, 50);
  });
});
