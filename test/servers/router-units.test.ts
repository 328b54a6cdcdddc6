import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { pino } from 'pino';
import { RouterRegistry, type ActiveRequest } from '../../src/actors/router-registry.js';
import { loadRouterConfig } from '../../src/config/router-config.js';
import { GENERATED_ID_RE, checkTerminalRecord, normalizeFinishReason, type TerminalRecord } from '../../src/schema/terminal-record.js';
import { parseMultipart } from '../../src/servers/engine-sim-extras.js';
import { startRouter, type RouterHandle } from '../../src/servers/router.js';
import { Admission, AdmissionRefused } from '../../src/servers/router/admission.js';
import { DEFAULT_FLUSH_DELAY_MS, DecisionLog, parseDecision } from '../../src/servers/router/decision-log.js';
import { BodyAborted, BodyTooLarge, RelayAbort, collect, newGatewayId } from '../../src/servers/router/relay-support.js';
import { multipartField, replaceMultipartField } from '../../src/servers/router/multipart.js';
import { StreamObserver, estimateTokens, finishReasonOf, promptChars } from '../../src/servers/router/stream-observer.js';
import { startRecordingUpstream, type RecordingUpstream } from '../support/router-harness.js';

const hex = (n: number) => n.toString(16).padStart(32, '0');
const gid = (n: number) => `req_${hex(n)}`;

/** A valid terminal record; `over` replaces members. */
function rec(over: Partial<TerminalRecord> = {}): TerminalRecord {
  return {
    request_id: gid(1),
    model: 'm',
    route: 'chat.completions',
    outcome: 'success',
    status_code: 200,
    started_at: '2026-11-25T21:49:10.000Z',
    finished_at: '2026-11-25T21:49:10.123Z',
    latency_ms: 123,
    readiness_check_ms: 0.01,
    admission_wait_ms: 0,
    upstream_duration_ms: 120,
    time_to_first_content_ms: 30,
    finish_reason: 'stop',
    usage: { prompt_tokens: 3, completion_tokens: 4, prompt_source: 'upstream', completion_source: 'upstream' },
    output_limit: { requested: null, effective: 16, clamped: false },
    routing_config_hash: 'a'.repeat(64),
    package_version: '0.1.0',
    ...over,
  };
}

const rejection = async (p: Promise<unknown>): Promise<string> => {
  const err = await p.then(() => undefined, (e: unknown) => e);
  assert.ok(err instanceof AdmissionRefused, `refused, got ${String(err)}`);
  return err.reason;
};

describe('admission', () => {
  it('admits up to the concurrency at once, queues FIFO up to max_queue, refuses a full queue at once', async () => {
    const a = new Admission(2, 2, 10_000);
    await a.acquire();
    await a.acquire();
    assert.equal(a.active, 2);
    const order: number[] = [];
    const w1 = a.acquire().then(() => order.push(1));
    const w2 = a.acquire().then(() => order.push(2));
    assert.equal(a.queued, 2);
    assert.equal(await rejection(a.acquire()), 'full');
    a.release();
    await w1;
    assert.deepEqual(order, [1]);
    assert.equal(a.active, 2, 'the slot was handed over, not freed');
    a.release();
    await w2;
    assert.deepEqual(order, [1, 2]);
    a.release();
    a.release();
    assert.equal(a.active, 0);
    a.release();
    assert.equal(a.active, 0, 'never below zero');
  });

  it('max_queue 0 refuses the first request beyond the concurrency', async () => {
    const a = new Admission(1, 0, 1000);
    await a.acquire();
    assert.equal(await rejection(a.acquire()), 'full');
    a.release();
    await a.acquire();
    assert.equal(a.active, 1);
  });

  it('a queued request gives up after the queue timeout and leaves no slot behind', async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] });
    const a = new Admission(1, 5, 100);
    await a.acquire();
    const waiting = a.acquire();
    t.mock.timers.tick(99);
    assert.equal(a.queued, 1);
    t.mock.timers.tick(1);
    assert.equal(await rejection(waiting), 'timeout');
    assert.equal(a.queued, 0);
    a.release();
    assert.equal(a.active, 0, 'the timed-out waiter did not take the slot');
  });

  it('a client that goes away while queued is dropped (aborted); an aborted signal never queues', async () => {
    const a = new Admission(1, 5, 10_000);
    await a.acquire();
    const ac = new RelayAbort();
    const waiting = a.acquire(ac);
    const next = a.acquire();
    ac.abort();
    assert.equal(await rejection(waiting), 'aborted');
    assert.equal(a.queued, 1);
    assert.equal(ac.listenerCount('abort'), 0, 'no listener left behind');
    const gone = new RelayAbort();
    gone.abort();
    assert.equal(await rejection(a.acquire(gone)), 'aborted');
    a.release();
    await next;
    assert.equal(a.active, 1);
  });
});

describe('normalizeFinishReason', () => {
  it('keeps the normalized values, maps known provider spellings, and turns anything else into unknown', () => {
    const table: Array<[unknown, string | null]> = [
      ['stop', 'stop'], ['length', 'length'], ['tool_calls', 'tool_calls'], ['content_filter', 'content_filter'], ['error', 'error'],
      ['cancelled', 'cancelled'], ['unknown', 'unknown'], ['function_call', 'tool_calls'], ['tool_call', 'tool_calls'], ['eos', 'stop'],
      ['stop_sequence', 'stop'], ['max_tokens', 'length'], ['abort', 'cancelled'], ['end_turn', 'unknown'], ['STOP', 'unknown'],
      ['', 'unknown'], ['x'.repeat(10_000), 'unknown'], [42, 'unknown'], [{}, 'unknown'], [true, 'unknown'], [null, null], [undefined, null],
    ];
    for (const [input, want] of table) {
      assert.equal(normalizeFinishReason(input), want, String(input).slice(0, 20));
      assert.equal(finishReasonOf(input), want, String(input).slice(0, 20));
    }
  });

  it("the router's guard turns names an object inherits into unknown", () => {
    for (const name of ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf']) {
      assert.equal(finishReasonOf(name), 'unknown', name);
      const o = new StreamObserver(() => 1);
      o.sseChunk(Buffer.from(`data: {"choices":[{"delta":{},"finish_reason":"${name}"}]}\n\n`));
      assert.equal(o.finishReason, 'unknown', name);
      assert.equal(parseDecision(JSON.stringify({ ...rec(), finish_reason: name }))?.record.finish_reason, 'unknown', name);
    }
  });
});

describe('stream observer', () => {
  const chunk = (delta: Record<string, unknown>, finish: string | null = null, usage?: unknown) =>
    `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }], ...(usage ? { usage } : {}) })}\n\n`;

  it('counts fragments across arbitrary chunk boundaries (split UTF-8 included) and notes the first content', () => {
    let clock = 0;
    const o = new StreamObserver(() => clock);
    const text =
      chunk({ role: 'assistant', content: '' }) + chunk({ content: 'héllo' }) + chunk({ content: ' wörld' }) + chunk({}, 'stop') +
      `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 7, completion_tokens: 2 } })}\n\ndata: [DONE]\n\n`;
    const bytes = Buffer.from(text, 'utf8');
    const firstContent = bytes.indexOf(Buffer.from('héllo'));
    // One byte at a time: every boundary, including inside 'é'.
    for (let i = 0; i < bytes.length; i++) {
      clock = i;
      o.sseChunk(bytes.subarray(i, i + 1));
    }
    assert.equal(o.fragments, 2);
    assert.equal(o.contentChars, 'héllo wörld'.length);
    assert.ok(o.firstContentAt! > firstContent, 'noted when its line completed');
    assert.equal(o.finishReason, 'stop');
    assert.deepEqual([o.promptTokens, o.completionTokens], [7, 2]);
    assert.equal(o.done, true);
    assert.equal(o.toolCall, false);
  });

  it('dates first content by the arrival time it is given (observed after relaying), else by its clock', () => {
    const o = new StreamObserver(() => 1_000);
    o.sseChunk(Buffer.from('data: {"choices":[{"delta":{"content":""}}]}\n\n'), 5);
    assert.equal(o.firstContentAt, null, 'an empty fragment is not content');
    o.sseChunk(Buffer.from('data: {"choices":[{"delta":{"content":"a"}}]}\n\n'), 7);
    o.sseChunk(Buffer.from('data: {"choices":[{"delta":{"content":"b"}}]}\n\n'), 9);
    assert.equal(o.firstContentAt, 7);
    const whole = new StreamObserver(() => 1_000);
    whole.jsonBody(Buffer.from('{"choices":[{"message":{"content":"hi"},"finish_reason":"length"}]}'), 42);
    assert.deepEqual([whole.firstContentAt, whole.finishReason], [42, 'length']);
    const clocked = new StreamObserver(() => 1_000);
    clocked.jsonBody(Buffer.from('{"choices":[{"message":{"content":"hi"}}]}'));
    assert.equal(clocked.firstContentAt, 1_000);
  });

  it('accepts data: without a space, CRLF lines, comments and event lines; normalizes finish reasons', () => {
    const o = new StreamObserver(() => 1);
    o.sseChunk(Buffer.from(': keep-alive\r\nevent: message\r\ndata:{"choices":[{"delta":{"content":"a"},"finish_reason":null}]}\r\n\r\n'));
    o.sseChunk(Buffer.from('data: {"choices":[{"delta":{},"finish_reason":"eos"}]}\r\n\r\n'));
    assert.equal(o.fragments, 1);
    assert.equal(o.finishReason, 'stop');
    o.sseChunk(Buffer.from('data: {"choices":[{"delta":{},"finish_reason":"provider_specific_reason"}]}\n\n'));
    assert.equal(o.finishReason, 'unknown');
    o.sseChunk(Buffer.from('data: {"choices":[{"delta":{},"finish_reason":null}]}\n\n'));
    assert.equal(o.finishReason, 'unknown', 'a later null does not erase it');
    assert.equal(o.done, false);
    o.sseChunk(Buffer.from('data: [DONE]\r\n\r\n'));
    assert.equal(o.done, true);
  });

  it('ignores malformed JSON and usage that is not a non-negative integer', () => {
    const o = new StreamObserver(() => 1);
    o.sseChunk(Buffer.from('data: {not json\n\ndata: 42\n\ndata: null\n\ndata: {"choices":"x"}\n\ndata: {"choices":[null,1]}\n\n'));
    o.sseChunk(Buffer.from('data: {"usage":{"prompt_tokens":-1,"completion_tokens":1.5}}\n\n'));
    o.sseChunk(Buffer.from('data: {"usage":{"prompt_tokens":"3","completion_tokens":null}}\n\n'));
    assert.deepEqual([o.promptTokens, o.completionTokens, o.fragments, o.firstContentAt], [null, null, 0, null]);
  });

  it('tool calls: a protocol transition without content (no first content), counted as fragments when streamed', () => {
    const o = new StreamObserver(() => 5);
    o.sseChunk(Buffer.from(chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, function: { name: 'f', arguments: '' } }] })));
    o.sseChunk(Buffer.from(chunk({ tool_calls: [{ index: 0, function: { arguments: '{}' } }] }) + chunk({}, 'tool_calls')));
    assert.equal(o.toolCall, true);
    assert.equal(o.fragments, 2);
    assert.equal(o.firstContentAt, null);
    assert.equal(o.finishReason, 'tool_calls');
  });

  it('skips an over-long line without buffering it, and goes on with the next line', () => {
    const o = new StreamObserver(() => 1);
    const piece = Buffer.alloc(256 * 1024, 0x61);
    o.sseChunk(Buffer.from('data: {"choices":[{"delta":{"content":"'));
    for (let i = 0; i < 5; i++) o.sseChunk(piece);
    o.sseChunk(Buffer.from('"}}]}\n\n' + chunk({ content: 'ok' })));
    assert.equal(o.fragments, 1);
    assert.equal(o.contentChars, 2);
  });

  it('observes whole JSON bodies: chat message content, completion text, tool calls, usage', () => {
    const chat = new StreamObserver(() => 9);
    chat.jsonBody(Buffer.from(JSON.stringify({ choices: [{ message: { role: 'assistant', content: 'four words in here' }, finish_reason: 'length' }], usage: { prompt_tokens: 1, completion_tokens: 4 } })));
    assert.deepEqual([chat.firstContentAt, chat.fragments, chat.contentChars, chat.finishReason, chat.completionTokens], [9, 1, 18, 'length', 4]);
    const cmpl = new StreamObserver(() => 3);
    cmpl.jsonBody(Buffer.from(JSON.stringify({ choices: [{ text: 'abc', finish_reason: 'stop' }] })));
    assert.deepEqual([cmpl.contentChars, cmpl.finishReason, cmpl.completionTokens], [3, 'stop', null]);
    const tool = new StreamObserver(() => 3);
    tool.jsonBody(Buffer.from(JSON.stringify({ choices: [{ message: { content: null, tool_calls: [{ id: 'x' }] }, finish_reason: 'tool_calls' }] })));
    assert.deepEqual([tool.toolCall, tool.firstContentAt, tool.fragments], [true, null, 0]);
    const bad = new StreamObserver(() => 3);
    bad.jsonBody(Buffer.from('{"choices": ['));
    assert.equal(bad.finishReason, null);
  });

  it('estimates tokens from characters and counts prompt characters without keeping them', () => {
    assert.deepEqual([estimateTokens(0), estimateTokens(1), estimateTokens(4), estimateTokens(5)], [0, 1, 1, 2]);
    assert.equal(promptChars({ messages: [{ role: 'system', content: 'abc' }, { role: 'user', content: [{ type: 'text', text: 'de' }, { type: 'image_url', image_url: { url: 'x' } }] }] }), 5);
    assert.equal(promptChars({ prompt: 'hello' }), 5);
    assert.equal(promptChars({ prompt: ['ab', 'cd'] }), 4);
    assert.equal(promptChars({ messages: 'not an array' }), 0);
    assert.equal(promptChars({ messages: [null, 1, { content: 7 }] }), 0);
  });
});

describe('multipart field', () => {
  const form = async (fields: Array<[string, string | Blob, string?]>): Promise<{ body: Buffer; ct: string }> => {
    const fd = new FormData();
    for (const [k, v, name] of fields) {
      if (typeof v === 'string') fd.append(k, v);
      else fd.append(k, v, name);
    }
    const res = new Response(fd);
    return { body: Buffer.from(await res.arrayBuffer()), ct: res.headers.get('content-type')! };
  };
  const wav = new Blob([Buffer.from([0, 1, 2, 0x2d, 0x2d, 0x0d, 0x0a, 255])], { type: 'audio/wav' });

  it('finds a small text field in a FormData body, not a file part of the same name', async () => {
    const { body, ct } = await form([['file', wav, 'model'], ['model', 'whisper-x'], ['language', 'en']]);
    assert.equal(multipartField(body, ct, 'model'), 'whisper-x');
    assert.equal(multipartField(body, ct, 'language'), 'en');
    assert.equal(multipartField(body, ct, 'missing'), undefined);
    const onlyFile = await form([['model', wav, 'a.wav']]);
    assert.equal(multipartField(onlyFile.body, onlyFile.ct, 'model'), undefined);
  });

  it('undefined for a missing or malformed boundary, a truncated body, or a value over 1 KiB', async () => {
    const { body, ct } = await form([['model', 'm']]);
    assert.equal(multipartField(body, 'multipart/form-data', 'model'), undefined);
    assert.equal(multipartField(body, 'multipart/form-data; boundary=other', 'model'), undefined);
    assert.equal(multipartField(body.subarray(0, body.length - 30), ct, 'model'), undefined);
    const big = await form([['model', 'x'.repeat(1025)]]);
    assert.equal(multipartField(big.body, big.ct, 'model'), undefined);
    const quoted = Buffer.from('--b c\r\nContent-Disposition: form-data; name="model"\r\n\r\nq\r\n--b c--\r\n');
    assert.equal(multipartField(quoted, 'multipart/form-data; boundary="b c"', 'model'), 'q');
  });

  it('replaces a field value and leaves every other byte (the file) as it was', async () => {
    const { body, ct } = await form([['file', wav, 'clip.wav'], ['model', 'alias'], ['response_format', 'json']]);
    const out = replaceMultipartField(body, ct, 'model', 'engine-model-name')!;
    const parts = parseMultipart(out, /boundary=(.+)$/.exec(ct)![1]!)!;
    assert.equal(parts.get('model')!.data.toString(), 'engine-model-name');
    assert.deepEqual(parts.get('file')!.data, Buffer.from(await wav.arrayBuffer()));
    assert.equal(parts.get('response_format')!.data.toString(), 'json');
    assert.equal(out.length, body.length - 'alias'.length + 'engine-model-name'.length);
    assert.equal(replaceMultipartField(body, ct, 'nope', 'x'), undefined);
  });
});

describe('generated request ids', () => {
  it('are req_ + 32 lowercase hex and never repeat, also across refills of the random pool', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 2_000; i++) {
      const id = newGatewayId();
      assert.match(id, GENERATED_ID_RE);
      assert.match(id, /^req_[0-9a-f]{32}$/);
      seen.add(id);
    }
    assert.equal(seen.size, 2_000);
  });
});

describe('bounded body collection', () => {
  it('joins the chunks; refuses past the limit (after onOver); a stream that closes early or is gone is aborted', async () => {
    const whole = new PassThrough();
    const p = collect(whole, 10, () => assert.fail('not over'));
    whole.write('abc');
    whole.end('def');
    assert.equal((await p).toString(), 'abcdef');

    const big = new PassThrough();
    let over = 0;
    const q = collect(big, 4, (s) => {
      over++;
      s.destroy();
    });
    big.write('abc');
    big.write('def');
    await assert.rejects(q, BodyTooLarge);
    assert.equal(over, 1);

    const cut = new PassThrough();
    const r = collect(cut, 10, () => undefined);
    cut.write('ab');
    cut.destroy();
    await assert.rejects(r, BodyAborted);

    const gone = new PassThrough();
    gone.destroy();
    await assert.rejects(collect(gone, 10, () => undefined), BodyAborted);
  });
});

describe('decision log', () => {
  const dir = () => mkdtempSync(join(tmpdir(), 'svc-dlog-'));
  const all = (log: DecisionLog, budget?: number) => {
    const out: Array<{ gid: string | undefined; record: TerminalRecord }> = [];
    const res = log.scan((d) => void out.push(d), budget);
    return { out, truncated: res.truncated };
  };

  it('appends whole lines and scans newest first, with the gateway id', () => {
    const path = join(dir(), 'state', 'd.jsonl');
    const log = new DecisionLog(path, 1 << 20, 3);
    log.open();
    for (let i = 1; i <= 3; i++) log.append(gid(i), rec({ request_id: i === 2 ? 'legacy-2' : gid(i) }));
    const { out, truncated } = all(log);
    assert.equal(truncated, false);
    assert.deepEqual(out.map((d) => d.gid), [gid(3), gid(2), gid(1)]);
    assert.equal(out[1]!.record.request_id, 'legacy-2');
    for (const line of readFileSync(path, 'utf8').trimEnd().split('\n')) assert.equal(JSON.parse(line).gateway_request_id !== undefined, true);
    assert.equal(statSync(path).mode & 0o777, 0o600);
    log.close();
  });

  it('rotates at max bytes, keeps max files, drops the oldest, never splits a record', () => {
    const path = join(dir(), 'd.jsonl');
    const line = JSON.stringify({ ...rec(), gateway_request_id: gid(0) }).length + 1;
    const log = new DecisionLog(path, line * 3, 3);
    log.open();
    for (let i = 1; i <= 20; i++) log.append(gid(i), rec({ request_id: gid(i) }));
    log.flush();
    assert.ok(existsSync(`${path}.1`) && existsSync(`${path}.2`));
    assert.equal(existsSync(`${path}.3`), false);
    for (const f of [path, `${path}.1`, `${path}.2`]) assert.ok(statSync(f).size <= line * 3, f);
    const { out } = all(log);
    // 20 records, 3 per file: current holds 19-20, .1 holds 16-18, .2 holds 13-15.
    assert.deepEqual(out.map((d) => d.gid), [20, 19, 18, 17, 16, 15, 14, 13].map(gid));
    log.close();
  });

  it('with max_files 1 the current file is simply restarted', () => {
    const path = join(dir(), 'd.jsonl');
    const log = new DecisionLog(path, 900, 1);
    log.open();
    for (let i = 1; i <= 5; i++) log.append(gid(i), rec({ request_id: gid(i) }));
    assert.equal(existsSync(`${path}.1`), false);
    assert.equal(all(log).out[0]!.gid, gid(5));
    log.close();
  });

  it('a torn last line is closed off at open; torn and foreign lines are skipped', () => {
    const path = join(dir(), 'd.jsonl');
    writeFileSync(path, `${JSON.stringify({ ...rec(), gateway_request_id: gid(1) })}\n{"foreign":true}\n[1,2]\nnull\n"str"\n\n{"request_id":"req_${hex(9)}","outcome":"succ`);
    const log = new DecisionLog(path, 1 << 20, 2);
    log.open();
    log.append(gid(2), rec({ request_id: gid(2) }));
    log.flush();
    const text = readFileSync(path, 'utf8');
    assert.ok(text.endsWith('"outcome":"succ\n' + JSON.stringify({ ...rec({ request_id: gid(2) }), gateway_request_id: gid(2) }) + '\n'));
    assert.deepEqual(all(log).out.map((d) => d.gid), [gid(2), gid(1)]);
    log.close();
    // Opening again (nothing torn now) adds nothing.
    const again = new DecisionLog(path, 1 << 20, 2);
    again.open();
    assert.equal(readFileSync(path, 'utf8'), text);
    again.close();
  });

  it('reads an older version line: allowlisted members only, unknown usage provenance, normalized finish', () => {
    const old = {
      request_id: gid(5), model: 'm', route: 'chat.completions', outcome: 'success', status_code: 200,
      started_at: '2026-01-01T00:00:00.000Z', finished_at: '2026-01-01T00:00:01.000Z', latency_ms: 1000, readiness_check_ms: null,
      upstream_duration_ms: 900, time_to_first_content_ms: 100, finish_reason: 'eos', usage: { prompt_tokens: 5, completion_tokens: 6 },
      output_limit: null, prompt: 'SECRET PROMPT', headers: { authorization: 'Bearer x' }, session_id: 's-1', task_id: 42,
    };
    const d = parseDecision(JSON.stringify(old))!;
    assert.ok(d, 'readable');
    assert.ok(checkTerminalRecord.Check(d.record));
    assert.equal(d.gid, gid(5), 'a reserved request_id is its own gateway id');
    assert.equal(d.record.admission_wait_ms, null);
    assert.equal(d.record.finish_reason, 'stop');
    assert.deepEqual(d.record.usage, { prompt_tokens: 5, completion_tokens: 6, prompt_source: 'unknown', completion_source: 'unknown' });
    assert.equal(d.record.session_id, 's-1');
    for (const k of ['prompt', 'headers', 'task_id', 'routing_config_hash', 'package_version', 'gateway_request_id']) assert.equal(k in d.record, false, k);
    assert.equal(parseDecision(JSON.stringify({ ...old, finish_reason: 'provider free text' }))!.record.finish_reason, 'unknown');
    assert.equal(parseDecision(JSON.stringify({ ...old, request_id: 'legacy-5' }))!.gid, undefined);
    assert.equal(parseDecision(JSON.stringify({ ...old, gateway_request_id: 'not-an-id' }))!.gid, gid(5));
    assert.equal(parseDecision(JSON.stringify({ ...old, outcome: 'exploded' })), undefined);
    assert.equal(parseDecision(JSON.stringify({ ...old, latency_ms: -1 })), undefined);
    for (const bad of ['', '{', '{}', '[]', 'null', '1', '"x"']) assert.equal(parseDecision(bad), undefined, bad);
  });

  it('reads within a byte budget and reports truncation only when something was left unread', () => {
    const path = join(dir(), 'd.jsonl');
    const line = JSON.stringify({ ...rec(), gateway_request_id: gid(0) }).length + 1;
    const log = new DecisionLog(path, line * 2, 5);
    log.open();
    for (let i = 1; i <= 6; i++) log.append(gid(i), rec({ request_id: gid(i) }));
    log.flush();
    const total = [path, `${path}.1`, `${path}.2`].reduce((n, f) => n + statSync(f).size, 0);
    assert.deepEqual(all(log, total), { out: all(log).out, truncated: false });
    assert.equal(all(log, total).out.length, 6);
    const cut = all(log, total - 1);
    assert.equal(cut.truncated, true);
    assert.equal(cut.out.length, 5, 'the oldest record fell outside the budget');
    const two = all(log, line * 2);
    assert.deepEqual([two.out.length, two.truncated], [2, true]);
    const half = all(log, Math.floor(line * 1.5));
    assert.deepEqual([half.out.length, half.truncated], [1, true], 'a cut line is not read as a record');
    log.close();
  });
});

describe('router registry with a decision log', () => {
  const active = (n: number, over: Partial<ActiveRequest> = {}): ActiveRequest => ({
    gid: gid(n), requestId: gid(n), model: 'm', route: 'chat.completions', startedAt: Date.now(), phase: 'checking', phaseAt: Date.now(),
    lastUpstreamAt: null, admissionWaitMs: null, estimatedPromptTokens: null, estimatedCompletionTokens: 0, upstreamPromptTokens: null,
    upstreamCompletionTokens: null, sessionId: undefined, ...over,
  });

  it('finishes once per request; evicted records come back from the log; reserved ids never match caller ids', () => {
    const log = new DecisionLog(join(mkdtempSync(join(tmpdir(), 'svc-reg-')), 'd.jsonl'), 1 << 20, 2);
    log.open();
    let finished = 0;
    const reg = new RouterRegistry({ host: 'node-a', bufferSize: 2, log, onFinish: () => finished++ });
    for (let i = 1; i <= 4; i++) {
      const a = active(i, { requestId: i <= 2 ? 'shared-legacy' : gid(i), sessionId: 'S', startedAt: Date.parse('2026-01-01T00:00:00.000Z') + i });
      reg.begin(a);
      const r = rec({ request_id: a.requestId, session_id: 'S', finished_at: new Date(Date.parse('2026-01-01T00:00:00.000Z') + i * 1000).toISOString(), output_limit: { requested: i, effective: i, clamped: false } });
      reg.finish(a, r);
      reg.finish(a, r);
    }
    assert.equal(finished, 4);
    assert.equal(reg.active.size, 0);
    log.flush();
    assert.equal(readFileSync(log.path, 'utf8').trimEnd().split('\n').length, 4, 'one line per request');
    // gid(1) and gid(2) were evicted from the 2-slot buffer: found in the log.
    assert.equal(reg.lookup(gid(1))?.output_limit?.requested, 1);
    assert.equal(reg.lookup(gid(2))?.request_id, 'shared-legacy');
    assert.equal(reg.lookup('shared-legacy')?.output_limit?.requested, 2, 'newest match');
    assert.equal(reg.lookup(gid(99)), undefined);
    const s = reg.session('S');
    assert.deepEqual(s.requests.map((r) => r.output_limit?.requested), [4, 3, 2, 1], 'newest first, memory and log merged once');
    assert.deepEqual(s.truncation, { returned: 4, omitted: 0 });
    log.close();
  });

  it('finished records are written together, and always before a lookup, a session read or the actor can hand them out', async () => {
    const log = new DecisionLog(join(mkdtempSync(join(tmpdir(), 'svc-reg-')), 'd.jsonl'), 1 << 20, 2);
    log.open();
    const reg = new RouterRegistry({ host: 'node-a', bufferSize: 10, log });
    const lines = () => readFileSync(log.path, 'utf8').split('\n').filter((l) => l.length > 0).length;
    const end = (n: number) => {
      const a = active(n, { sessionId: 'S' });
      reg.begin(a);
      reg.finish(a, rec({ request_id: gid(n), session_id: 'S' }));
    };
    end(1);
    assert.ok(reg.lookup(gid(1)));
    assert.equal(lines(), 1, 'on disk before the lookup answered');
    end(2);
    assert.equal(reg.session('S').requests.length, 2);
    assert.equal(lines(), 2, 'on disk before the session read answered');
    end(3);
    assert.equal(reg.workloadRecords(Date.now(), 10).records.length, 3);
    assert.equal(lines(), 3, 'on disk before the actor read it');
    end(4);
    end(5);
    await new Promise((r) => setTimeout(r, DEFAULT_FLUSH_DELAY_MS + 30));
    assert.equal(lines(), 5, 'written within the flush delay without any read');
    log.close();
  });

  it('a process that crashes right after finishing requests still has them on disk', () => {
    const path = join(mkdtempSync(join(tmpdir(), 'svc-crash-')), 'd.jsonl');
    const mod = new URL('../../src/servers/router/decision-log.js', import.meta.url).href;
    const script = [
      `const { DecisionLog } = await import(${JSON.stringify(mod)});`,
      `const log = new DecisionLog(${JSON.stringify(path)}, 1 << 20, 2);`,
      'log.open();',
      `for (let i = 1; i <= 3; i++) log.append('req_' + String(i).padStart(32, '0'), ${JSON.stringify(rec())});`,
      "throw new Error('crash before any flush');",
    ].join('\n');
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
    assert.notEqual(r.status, 0, 'it crashed');
    assert.equal(readFileSync(path, 'utf8').trimEnd().split('\n').length, 3);
  });

  it('a failed deferred write is reported once, without record content, and the records stay in memory', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-reg-'));
    const failures: number[] = [];
    const log = new DecisionLog(join(dir, 'd.jsonl'), 1 << 20, 2, (_err, n) => failures.push(n));
    log.open();
    const reg = new RouterRegistry({ host: 'node-a', bufferSize: 10, log });
    log.close(); // the descriptor is gone: the next write fails
    (log as unknown as { fd: number }).fd = 1_000_000;
    const a = active(8);
    reg.begin(a);
    reg.finish(a, rec({ request_id: gid(8) }));
    await new Promise((r) => setTimeout(r, DEFAULT_FLUSH_DELAY_MS + 30));
    assert.deepEqual(failures, [1]);
    assert.equal(reg.lookup(gid(8))?.request_id, gid(8), 'still in memory');
  });

  it('a caller id of the reserved shape is never looked up as a legacy id, even when a record carries it', () => {
    const reg = new RouterRegistry({ host: 'node-a', bufferSize: 10 });
    const a = active(1, { requestId: 'legacy-x' });
    reg.begin(a);
    reg.finish(a, rec({ request_id: gid(7) }));
    // A stored request_id of the reserved shape that is not the gateway id answers to nothing.
    assert.equal(reg.lookup(gid(7)), undefined);
    assert.ok(reg.lookup(gid(1)));
  });
});

describe('relay request preparation (in-process router, recording upstream)', () => {
  const CEIL = 8;
  let up: RecordingUpstream;
  let router: RouterHandle;
  const KEY = 'unit-key-0123456789';

  before(async () => {
    up = await startRecordingUpstream();
    const dir = mkdtempSync(join(tmpdir(), 'svc-prep-'));
    const path = join(dir, 'router.toml');
    writeFileSync(path, [
      '[server]', 'host_id = "node-a"', 'listen = "127.0.0.1:0"', 'api_keys_env = "UNIT_KEYS"', '',
      '[[models]]', 'alias = "same"', `upstream = "${up.url}"`, `max_output_tokens = ${CEIL}`, '',
      '[[models]]', 'alias = "aliased"', `upstream = "${up.url}"`, 'upstream_model = "engine-name"', `max_output_tokens = ${CEIL}`, '',
    ].join('\n'));
    router = await startRouter(loadRouterConfig(path), { logger: pino({ level: 'silent' }), env: { UNIT_KEYS: KEY } });
  });
  after(async () => {
    await router?.close();
    await up?.close();
  });

  const send = async (body: string | Uint8Array | Record<string, unknown>, path = '/v1/chat/completions', ct = 'application/json') => {
    const n = up.requests.length;
    const res = await fetch(`${router.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': ct },
      body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
    });
    await res.arrayBuffer();
    const id = res.headers.get('x-svc-request-id')!;
    return { status: res.status, upstream: up.requests.length > n ? up.requests[n]!.body : undefined, record: router.registry.lookup(id) };
  };
  const json = (b: Buffer | undefined) => JSON.parse(b!.toString('utf8')) as Record<string, unknown>;

  it('a request within the ceiling, for an alias that is the engine name, is forwarded byte for byte', async () => {
    const text = '{"model":"same",  "messages":[{"role":"user","content":"hi"}], "max_tokens": 3, "extra": {"kept": [1, 2]}}';
    const r = await send(text);
    assert.equal(r.status, 200);
    assert.equal(r.upstream!.toString('utf8'), text);
    assert.deepEqual(r.record?.output_limit, { requested: 3, effective: 3, clamped: false });
  });

  it('an absent or null limit becomes the ceiling (not clamped); a larger one is clamped', async () => {
    let r = await send({ model: 'same', messages: [] });
    assert.equal(json(r.upstream)['max_tokens'], CEIL);
    assert.deepEqual(r.record?.output_limit, { requested: null, effective: CEIL, clamped: false });
    r = await send({ model: 'same', messages: [], max_tokens: null });
    assert.equal(json(r.upstream)['max_tokens'], CEIL);
    r = await send({ model: 'same', messages: [], max_tokens: CEIL + 1 });
    assert.equal(json(r.upstream)['max_tokens'], CEIL);
    assert.deepEqual(r.record?.output_limit, { requested: CEIL + 1, effective: CEIL, clamped: true });
    r = await send({ model: 'same', messages: [], max_tokens: 0 });
    assert.deepEqual(r.record?.output_limit, { requested: 0, effective: 0, clamped: false });
  });

  it('max_completion_tokens is the limit when present; max_tokens sent beside it is bounded too', async () => {
    let r = await send({ model: 'same', messages: [], max_completion_tokens: 100 });
    assert.deepEqual([json(r.upstream)['max_completion_tokens'], 'max_tokens' in json(r.upstream)], [CEIL, false]);
    assert.deepEqual(r.record?.output_limit, { requested: 100, effective: CEIL, clamped: true });
    r = await send({ model: 'same', messages: [], max_completion_tokens: 2, max_tokens: 1_000_000 });
    assert.deepEqual([json(r.upstream)['max_completion_tokens'], json(r.upstream)['max_tokens']], [2, CEIL]);
    assert.deepEqual(r.record?.output_limit, { requested: 2, effective: 2, clamped: false });
    const bad = await send({ model: 'same', messages: [], max_completion_tokens: 2, max_tokens: 'lots' });
    assert.deepEqual([bad.status, bad.upstream], [400, undefined]);
  });

  it('a malformed limit is a 400 that never reaches the engine', async () => {
    for (const v of [-1, 1.5, '3', true, [], {}, 2 ** 53]) {
      const r = await send({ model: 'same', messages: [], max_tokens: v });
      assert.deepEqual([r.status, r.upstream, r.record], [400, undefined, undefined], JSON.stringify(v));
    }
  });

  it("the engine's model name replaces the alias (chat, embeddings, multipart audio); other members are kept", async () => {
    const r = await send({ model: 'aliased', messages: [{ role: 'user', content: 'x' }], temperature: 0.5, max_tokens: 2 });
    assert.deepEqual(json(r.upstream), { model: 'engine-name', messages: [{ role: 'user', content: 'x' }], temperature: 0.5, max_tokens: 2 });
    const e = await send({ model: 'aliased', input: 'x' }, '/v1/embeddings');
    assert.deepEqual(json(e.upstream), { model: 'engine-name', input: 'x' }, 'no output limit on embeddings');
    assert.equal(e.record?.output_limit, null);
    const fd = new FormData();
    fd.append('model', 'aliased');
    fd.append('file', new Blob([Buffer.from('RIFF....WAVE')]), 'a.wav');
    const form = new Response(fd);
    const ct = form.headers.get('content-type')!;
    const a = await send(Buffer.from(await form.arrayBuffer()), '/v1/audio/transcriptions', ct);
    const parts = parseMultipart(a.upstream!, /boundary=(.+)$/.exec(ct)![1]!)!;
    assert.equal(parts.get('model')!.data.toString(), 'engine-name');
    assert.equal(parts.get('file')!.data.toString(), 'RIFF....WAVE');
    const same = new FormData();
    same.append('model', 'same');
    same.append('file', new Blob([Buffer.from('x')]), 'a.wav');
    const sameForm = new Response(same);
    const sameCt = sameForm.headers.get('content-type')!;
    const sameBody = Buffer.from(await sameForm.arrayBuffer());
    const s = await send(sameBody, '/v1/audio/transcriptions', sameCt);
    assert.deepEqual(s.upstream, sameBody, 'untouched when the alias is the engine name');
  });

  it('a decision log path that cannot be opened stops start-up with a fixed error', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-bad-log-'));
    const blocker = join(dir, 'file');
    appendFileSync(blocker, 'x');
    const path = join(dir, 'router.toml');
    writeFileSync(path, ['[server]', 'host_id = "node-a"', 'listen = "127.0.0.1:0"', 'api_keys_env = "UNIT_KEYS"', 'decision_log_path = "file/sub/d.jsonl"', '',
      '[[models]]', 'alias = "same"', `upstream = "${up.url}"`, ''].join('\n'));
    await assert.rejects(startRouter(loadRouterConfig(path), { logger: pino({ level: 'silent' }), env: { UNIT_KEYS: KEY } }), /decision_log_path cannot be opened/);
  });
});
