import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { LOG_OPTIONS } from '../../src/logger.js';
import { LineBudget } from '../../src/http/line-budget.js';
import { AuthorizationPolicy } from '../../src/auth/policy.js';
import type { NodeResult } from '../../src/schema/envelopes.js';
import { TelemetryGate, type WorkloadService } from '../../src/dashboard/dashboard-config.js';
import type { ControllerRead, ControllerReader } from '../../src/dashboard/dashboard-reader.js';
import { boundedSink } from '../../src/dashboard/dashboard.js';
import { DISABLED_FRAME, DashboardSession } from '../../src/dashboard/dashboard-session.js';
import { writeTestPolicy } from '../support/policy.js';

const policy = writeTestPolicy();
const loaded = AuthorizationPolicy.load(policy.path, policy.env);
const enabled: WorkloadService = {
  enabled: true,
  origin: 'http://127.0.0.1:1',
  expectedNode: 'node-a',
  policy: loaded,
};
const node = (n: number): NodeResult => ({
  schema: 'svc-workloads/v1',
  expected_host: 'node-a',
  status: 'complete',
  collected_at: '2026-11-25T12:00:00.000Z',
  sources: [],
  truncation: { returned: n, omitted: 0 },
});

/** A reader whose reads stay pending until the test settles them. */
function fakeReader() {
  const calls: { credential: string; args: unknown; signal: AbortSignal; settle: (r: ControllerRead) => void }[] = [];
  const reader = {
    read: (credential: string, args: unknown, signal: AbortSignal) =>
      new Promise<ControllerRead>((settle) => calls.push({ credential, args, signal, settle })),
  } as unknown as ControllerReader;
  return { reader, calls };
}

function session(service: WorkloadService = enabled, logger = pino({ level: 'silent' })) {
  const frames: string[] = [];
  const { reader, calls } = fakeReader();
  const s = new DashboardSession({
    sink: { send: (f) => frames.push(f) },
    gate: new TelemetryGate(undefined),
    service,
    reader,
    subscribeTelemetry: () => () => undefined,
    logger,
    refusedLines: new LineBudget(10, (skipped) =>
      logger.info({ skipped }, 'workload session refused lines left out (rate bound)'),
    ),
  });
  const msg = (m: object) => s.handle(JSON.stringify(m));
  const parsed = () => frames.map((f) => JSON.parse(f) as Record<string, unknown>);
  return { s, frames, calls, msg, parsed };
}
const tick = () => new Promise((r) => setImmediate(r));

describe('dashboard workload session', () => {
  it('a disabled service answers every read with the same fixed denial and never looks at the credential', () => {
    const t = session({ enabled: false, reason: 'incomplete' });
    t.msg({ type: 'connect', gen: 1, credential: policy.tokens.reader, filters: {} });
    t.msg({ type: 'read', gen: 1, filters: { owner: 'router' } });
    assert.deepEqual(t.frames, [DISABLED_FRAME, DISABLED_FRAME]);
    assert.equal(t.calls.length, 0);
    assert.ok(!DISABLED_FRAME.includes(policy.tokens.reader));
  });

  it('checks the credential against the local policy: unknown 401, without workloads:read 403', () => {
    const t = session();
    t.msg({ type: 'connect', gen: 1, credential: 'no-such-token', filters: {} });
    t.msg({ type: 'connect', gen: 2, credential: policy.tokens.lifecycle, filters: {} });
    t.msg({ type: 'connect', gen: 3, credential: 'has space', filters: {} });
    assert.deepEqual(
      t.parsed().map((f) => [f['gen'], f['code'], f['status']]),
      [
        [1, 'unauthenticated', 401],
        [2, 'forbidden', 403],
        [3, 'unauthenticated', 401],
      ],
    );
    assert.equal(t.calls.length, 0, 'nothing is forwarded to the controller');
  });

  it('a storm of refused connects (no credential needed) writes at most 10 log lines a second, each still answered', () => {
    const lines: string[] = [];
    const logger = pino(
      { ...LOG_OPTIONS, level: 'info' },
      new Writable({ write: (c: Buffer, _e, cb) => (lines.push(c.toString()), cb()) }),
    );
    const t = session(enabled, logger);
    for (let gen = 1; gen <= 500; gen++) t.msg({ type: 'connect', gen, credential: 'nope', filters: {} });
    assert.equal(t.parsed().filter((f) => f['code'] === 'unauthenticated').length, 500, 'every connect is answered');
    // (The line counting those left out, written when a second turns, is not one of them.)
    const refused = lines.filter((l) => (JSON.parse(l) as { msg: string }).msg === 'workload session refused').length;
    assert.ok(refused <= 20, `${refused} lines`);
  });

  it('forwards the same credential with the current filters, and drops late results of older generations', async () => {
    const t = session();
    t.msg({ type: 'connect', gen: 1, credential: policy.tokens.reader, filters: {} });
    assert.equal(t.calls[0]!.credential, policy.tokens.reader);
    t.msg({ type: 'read', gen: 2, filters: { owner: 'router', active_only: true } });
    assert.ok(t.calls[0]!.signal.aborted, 'the older read is aborted');
    assert.deepEqual(t.calls[1]!.args, { owner: 'router', active_only: true });
    t.calls[0]!.settle({ kind: 'result', result: node(1) }); // late answer of generation 1
    t.calls[1]!.settle({ kind: 'result', result: node(2) });
    await tick();
    const results = t.parsed().filter((f) => f['type'] === 'workloads');
    assert.deepEqual(
      results.map((f) => [f['gen'], (f['result'] as NodeResult).truncation.returned]),
      [[2, 2]],
    );
    t.msg({ type: 'read', gen: 1, filters: {} }); // an older generation is ignored
    assert.equal(t.calls.length, 2);
  });

  it('keeps at most one read in flight per session (a poll during a read is dropped)', () => {
    const t = session();
    t.msg({ type: 'connect', gen: 1, credential: policy.tokens.reader, filters: {} });
    t.msg({ type: 'read', gen: 1, filters: {} });
    assert.equal(t.calls.length, 1);
  });

  it('Disconnect aborts the read, drops the credential and sends nothing more for it', async () => {
    const t = session();
    t.msg({ type: 'connect', gen: 1, credential: policy.tokens.reader, filters: {} });
    t.msg({ type: 'disconnect', gen: 2 });
    assert.ok(t.calls[0]!.signal.aborted);
    t.calls[0]!.settle({ kind: 'result', result: node(1) });
    await tick();
    t.msg({ type: 'read', gen: 2, filters: {} });
    const types = t.parsed().map((f) => f['code'] ?? f['type']);
    assert.deepEqual(types, ['connected', 'disconnected', 'not-connected']);
    assert.equal(t.calls.length, 1, 'no read without a credential');
  });

  it('refuses invalid filters before reading and shows a failed read as unavailable, count unknown', async () => {
    const t = session();
    t.msg({ type: 'connect', gen: 1, credential: policy.tokens.reader, filters: { owner: 'routers' } });
    assert.equal(t.parsed().at(-1)!['code'], 'invalid-filter');
    t.msg({ type: 'read', gen: 2, filters: {} });
    t.calls[0]!.settle({ kind: 'failure', failure: 'unreachable' });
    await tick();
    const last = t.parsed().at(-1)!;
    assert.equal(last['failure'], 'unreachable');
    assert.deepEqual(last['result'], {
      schema: 'svc-workloads/v1',
      expected_host: 'node-a',
      status: 'unavailable',
      collected_at: last['read_at'],
      sources: [],
      truncation: { returned: 0, omitted: null },
      condition: 'unreachable',
    });
  });

  it('refuses repeated and null filters instead of reading with the last value or none', () => {
    const t = session();
    t.msg({ type: 'connect', gen: 1, credential: policy.tokens.reader, filters: {} });
    const reads = t.calls.length;
    t.s.handle('{"type":"read","gen":2,"filters":{"limit":5,"limit":6}}');
    assert.equal(t.parsed().at(-1)!['code'], 'invalid-filter');
    t.msg({ type: 'read', gen: 3, filters: null });
    assert.equal(t.parsed().at(-1)!['code'], 'invalid-filter');
    assert.equal(t.calls.length, reads, 'nothing was read for either');
  });

  it('ignores malformed messages without answering', () => {
    const t = session();
    for (const raw of ['', 'null', '[]', '{"type":"connect"}', '{"type":"read","gen":-1}', '{"type":"x","gen":1}'])
      t.s.handle(raw);
    assert.deepEqual(t.frames, []);
  });
});

describe('dashboard socket sink', () => {
  const fakeSocket = () => {
    const sent: string[] = [];
    const s = {
      readyState: 1,
      bufferedAmount: 0,
      terminated: 0,
      send: (f: string) => void sent.push(f),
      terminate: () => void (s.terminated++, (s.readyState = 2)),
    };
    return { s, sent };
  };

  it('sends while the client keeps up, and cuts a client that fell a bound behind instead of dropping frames', () => {
    const { s, sent } = fakeSocket();
    const slow: number[] = [];
    const sink = boundedSink(s, 1000, (b) => slow.push(b));
    sink.send('a');
    s.bufferedAmount = 999;
    sink.send('b');
    assert.deepEqual(sent, ['a', 'b']);
    s.bufferedAmount = 1000;
    sink.send('c');
    assert.deepEqual(sent, ['a', 'b'], 'nothing is sent past the bound');
    assert.equal(s.terminated, 1, 'the socket is cut, so the page knows its link is lost');
    assert.deepEqual(slow, [1000]);
    sink.send('d');
    assert.equal(s.terminated, 1, 'a socket already closing is left alone');
    assert.deepEqual(sent, ['a', 'b']);
  });
});
