import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { appendFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { ConfigError } from '../../src/errors.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { loadRouterConfig } from '../../src/config/router-config.js';
import { normalizeFinishReason } from '../../src/schema/terminal-record.js';
import { parseMultipart } from '../../src/engine-sim/engine-sim-extras.js';
import { startRouter, type RouterHandle } from '../../src/router/router.js';
import { Admission, AdmissionRefused } from '../../src/router/admission.js';
import { parseDecision } from '../../src/router/records/decision-lines.js';
import { RelayAbort } from '../../src/router/relay-support.js';
import { lastEventEnd } from '../../src/router/stream-observer.js';
import { multipartField, replaceMultipartField } from '../../src/router/multipart.js';
import { StreamObserver, estimateTokens, finishReasonOf, promptChars } from '../../src/router/stream-observer.js';
import { startRecordingUpstream, type RecordingUpstream } from '../support/recording-upstream.js';
import { rec } from '../support/terminal-records.js';
import { writeTestPolicy } from '../support/policy.js';

const rejection = async (p: Promise<unknown>): Promise<string> => {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
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
      ['stop', 'stop'],
      ['length', 'length'],
      ['tool_calls', 'tool_calls'],
      ['content_filter', 'content_filter'],
      ['error', 'error'],
      ['cancelled', 'cancelled'],
      ['unknown', 'unknown'],
      ['function_call', 'tool_calls'],
      ['tool_call', 'tool_calls'],
      ['eos', 'stop'],
      ['stop_sequence', 'stop'],
      ['max_tokens', 'length'],
      ['abort', 'cancelled'],
      ['end_turn', 'unknown'],
      ['STOP', 'unknown'],
      ['', 'unknown'],
      ['x'.repeat(10_000), 'unknown'],
      [42, 'unknown'],
      [{}, 'unknown'],
      [true, 'unknown'],
      [null, null],
      [undefined, null],
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
      assert.equal(
        parseDecision(JSON.stringify({ ...rec(), finish_reason: name }))?.record.finish_reason,
        'unknown',
        name,
      );
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
      chunk({ role: 'assistant', content: '' }) +
      chunk({ content: 'héllo' }) +
      chunk({ content: ' wörld' }) +
      chunk({}, 'stop') +
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

  it('reads lines ended by CR, LF or CRLF alike, whatever the chunk boundaries', () => {
    const lf = chunk({ content: 'ab' }) + chunk({ content: 'cd' }, 'length') + 'data: [DONE]\n\n';
    for (const eol of ['\r', '\r\n', '\n']) {
      const bytes = Buffer.from(lf.replaceAll('\n', eol), 'utf8');
      for (const step of [1, 7, bytes.length]) {
        const o = new StreamObserver(() => 0);
        for (let i = 0; i < bytes.length; i += step) o.sseChunk(bytes.subarray(i, i + step));
        assert.deepEqual(
          [o.fragments, o.contentChars, o.finishReason, o.done],
          [2, 4, 'length', true],
          JSON.stringify({ eol, step }),
        );
      }
    }
    // An error event ended by a bare CR is seen as one, and what came before it may be relayed.
    const o = new StreamObserver(() => 0);
    const before = chunk({ content: 'ok' }).replaceAll('\n', '\r');
    o.sseChunk(Buffer.from(before + 'data: {"error":{"message":"x"}}\r\r'));
    assert.deepEqual([o.failed, o.failedAtByte], [true, Buffer.byteLength(before)]);
  });

  it("reads events as SSE does: data lines joined (a CRLF split between chunks included), comments and ids ignored, anything else the engine's failure", () => {
    const feed = (...parts: string[]): StreamObserver => {
      const o = new StreamObserver(() => 0);
      for (const p of parts) o.sseChunk(Buffer.from(p, 'utf8'));
      return o;
    };
    // One event over two data lines, its CRLF split between two chunks: read once, whole.
    const joined = feed(
      ': keep-alive\r\nid: 7\r\nretry: 100\r\ndata: {"choices":[{"delta":\r',
      '\ndata: {"content":"ab"}}]}\r\n\r\n',
      'data: [DONE]\r\n\r\n',
    );
    assert.deepEqual([joined.failed, joined.fragments, joined.contentChars, joined.done], [false, 1, 2, true]);
    // Not read until the event ends.
    const open = feed('data: {"choices":[{"delta":{"content":"ab"}}]}\n');
    assert.equal(open.fragments, 0);
    open.sseChunk(Buffer.from('\n'));
    assert.equal(open.fragments, 1);
    for (const bad of [
      'event: error\ndata: {}\n\n',
      'data: not json\n\n',
      'data: [1,2]\n\n',
      'data: "text"\n\n',
      'Traceback: x\n',
      'oops\n',
      'data: {"error":\ndata: {"message":"x"}}\n\n',
    ]) {
      const before = 'data: {"choices":[{"delta":{"content":"ok"}}]}\n\n';
      const o = feed(before + bad);
      assert.deepEqual([o.failed, o.failedAtByte], [true, Buffer.byteLength(before)], JSON.stringify(bad));
    }
    // Nothing after [DONE] is read: its end is where the relay stops.
    const head = 'data: {"choices":[{"delta":{"content":"ab"}}]}\n\ndata: [DONE]\n\n';
    const after = feed(head + 'data: {"error":{"message":"late"}}\n\n');
    assert.deepEqual(
      [after.done, after.failed, after.doneAtByte, after.fragments],
      [true, false, Buffer.byteLength(head), 1],
    );
    const exact = feed(head);
    assert.equal(exact.doneAtByte, Buffer.byteLength(head));
    // Bytes that are not UTF-8 before the cut: the offsets are still the chunk's bytes.
    const invalid = Buffer.concat([
      Buffer.from('data: {"choices":[{"delta":{"content":"'),
      Buffer.alloc(40, 0xff),
      Buffer.from('"}}]}\n\n'),
    ]);
    const bad = new StreamObserver(() => 0);
    bad.sseChunk(Buffer.concat([Buffer.from('\ufeff'), invalid, Buffer.from('data: SECRET\n\n')]));
    assert.deepEqual([bad.failed, bad.failedAtByte], [true, 3 + invalid.length]);
    const done = new StreamObserver(() => 0);
    done.sseChunk(Buffer.concat([invalid, Buffer.from('data: [DONE]\n\nevent: error\ndata: SECRET\n\n')]));
    assert.deepEqual([done.done, done.doneAtByte], [true, invalid.length + 'data: [DONE]\n\n'.length]);
    // An event left unclosed at the end of the body is read as if closed; a byte order mark is skipped.
    const last = feed('\ufeffdata: {"choices":[{"delta":{"content":"ab"}}]}\n\ndata: [DONE]');
    assert.equal(last.done, false);
    last.sseEnd();
    assert.deepEqual([last.failed, last.done, last.fragments], [false, true, 1]);
    // A whole body that is no JSON object fails.
    const bom = new StreamObserver(() => 0);
    bom.jsonBody(Buffer.from('\ufeff{"choices":[{"message":{"content":"ab"},"finish_reason":"stop"}]}', 'utf8'));
    assert.deepEqual([bom.failed, bom.finishReason], [false, 'stop'], 'a byte order mark before the JSON is ignored');
    for (const body of ['', 'text', '[]', '"s"', 'null', '\ufeff', '\ufeff[]']) {
      const o = new StreamObserver(() => 0);
      o.jsonBody(Buffer.from(body, 'utf8'));
      assert.equal(o.failed, true, JSON.stringify(body));
    }
  });

  it('finds the end of the last whole event of a chunk, whatever its line endings', () => {
    const at = (s: string): number => lastEventEnd(Buffer.from(s, 'latin1'));
    assert.equal(at('data: a\n\n'), 9);
    assert.equal(at('data: a\n\ndata: b\n'), 9);
    assert.equal(at('data: a\r\n\r\ndata: b'), 11);
    assert.equal(at('data: a\r\r'), 9);
    assert.equal(at('data: a\n\r\n'), 10);
    assert.equal(at('data: a\r\n\n'), 10);
    assert.equal(at('data: a\r\n'), 0);
    assert.equal(at('data: a'), 0);
    assert.equal(at('\n'), 1);
    assert.equal(at(''), 0);
    // Only ends at or after `from` (the bytes before it were searched already).
    const from = (s: string, f: number): number => lastEventEnd(Buffer.from(s, 'latin1'), f);
    assert.equal(from('data: a\r\n\n', 8), 10, 'a CRLF split across reads, then the empty line');
    assert.equal(from('data: a\r\n', 8), 0);
    assert.equal(from('data: a\n\ndata: b', 9), 0, 'an end before `from` is not looked at');
    assert.equal(from('data: a\n\ndata: b\n\n', 12), 18);
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
    o.sseChunk(
      Buffer.from(
        ': keep-alive\r\nevent: message\r\ndata:{"choices":[{"delta":{"content":"a"},"finish_reason":null}]}\r\n\r\n',
      ),
    );
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
    o.sseChunk(
      Buffer.from(
        'data: {not json\n\ndata: 42\n\ndata: null\n\ndata: {"choices":"x"}\n\ndata: {"choices":[null,1]}\n\n',
      ),
    );
    o.sseChunk(Buffer.from('data: {"usage":{"prompt_tokens":-1,"completion_tokens":1.5}}\n\n'));
    o.sseChunk(Buffer.from('data: {"usage":{"prompt_tokens":"3","completion_tokens":null}}\n\n'));
    assert.deepEqual([o.promptTokens, o.completionTokens, o.fragments, o.firstContentAt], [null, null, 0, null]);
  });

  it('tool calls: a protocol transition without content (no first content), counted as fragments when streamed', () => {
    const o = new StreamObserver(() => 5);
    o.sseChunk(
      Buffer.from(
        chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, function: { name: 'f', arguments: '' } }] }),
      ),
    );
    o.sseChunk(
      Buffer.from(chunk({ tool_calls: [{ index: 0, function: { arguments: '{}' } }] }) + chunk({}, 'tool_calls')),
    );
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
    chat.jsonBody(
      Buffer.from(
        JSON.stringify({
          choices: [{ message: { role: 'assistant', content: 'four words in here' }, finish_reason: 'length' }],
          usage: { prompt_tokens: 1, completion_tokens: 4 },
        }),
      ),
    );
    assert.deepEqual(
      [chat.firstContentAt, chat.fragments, chat.contentChars, chat.finishReason, chat.completionTokens],
      [9, 1, 18, 'length', 4],
    );
    const cmpl = new StreamObserver(() => 3);
    cmpl.jsonBody(Buffer.from(JSON.stringify({ choices: [{ text: 'abc', finish_reason: 'stop' }] })));
    assert.deepEqual([cmpl.contentChars, cmpl.finishReason, cmpl.completionTokens], [3, 'stop', null]);
    const tool = new StreamObserver(() => 3);
    tool.jsonBody(
      Buffer.from(
        JSON.stringify({
          choices: [{ message: { content: null, tool_calls: [{ id: 'x' }] }, finish_reason: 'tool_calls' }],
        }),
      ),
    );
    assert.deepEqual([tool.toolCall, tool.firstContentAt, tool.fragments], [true, null, 0]);
    const bad = new StreamObserver(() => 3);
    bad.jsonBody(Buffer.from('{"choices": ['));
    assert.equal(bad.finishReason, null);
  });

  it('estimates tokens from characters and counts prompt characters without keeping them', () => {
    assert.deepEqual([estimateTokens(0), estimateTokens(1), estimateTokens(4), estimateTokens(5)], [0, 1, 1, 2]);
    assert.equal(
      promptChars({
        messages: [
          { role: 'system', content: 'abc' },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'de' },
              { type: 'image_url', image_url: { url: 'x' } },
            ],
          },
        ],
      }),
      5,
    );
    assert.equal(promptChars({ prompt: 'hello' }), 5);
    assert.equal(promptChars({ prompt: ['ab', 'cd'] }), 4);
    assert.equal(promptChars({ messages: 'not an array' }), 0);
    assert.equal(promptChars({ messages: [null, 1, { content: 7 }] }), 0);
    // A prompt of token ids counts each id as one token (4 characters), also in lists of lists;
    // a number in a message is not text.
    assert.equal(estimateTokens(promptChars({ prompt: [101, 2023, 2003, 1037, 3231, 102] })), 6);
    assert.equal(estimateTokens(promptChars({ prompt: [[1, 2], [3]] })), 3);
    assert.equal(promptChars({ prompt: 7 }), 0);
  });

  it('an engine usage count past what a record may hold is no count (the record stays readable)', () => {
    const o = new StreamObserver(() => 3);
    o.jsonBody(
      Buffer.from(
        JSON.stringify({
          choices: [{ message: { content: 'hi' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 5e9, completion_tokens: 7 },
        }),
      ),
    );
    assert.deepEqual([o.promptTokens, o.completionTokens], [null, 7]);
  });

  it("a buffered tool-call answer counts the calls' names and arguments toward the completion estimate, never as content", () => {
    const o = new StreamObserver(() => 3);
    o.jsonBody(
      Buffer.from(
        JSON.stringify({
          choices: [
            {
              message: {
                content: null,
                tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get', arguments: '{"city":"Paris"}' } }],
              },
              finish_reason: 'tool_calls',
            },
          ],
        }),
      ),
    );
    assert.deepEqual([o.toolCall, o.firstContentAt, o.contentChars, o.toolChars], [true, null, 0, 3 + 16]);
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
    const { body, ct } = await form([
      ['file', wav, 'model'],
      ['model', 'whisper-x'],
      ['language', 'en'],
    ]);
    assert.equal(multipartField(body, ct, 'model'), 'whisper-x');
    assert.equal(multipartField(body, ct, 'language'), 'en');
    assert.equal(multipartField(body, ct, 'missing'), undefined);
    const onlyFile = await form([['model', wav, 'a.wav']]);
    assert.equal(multipartField(onlyFile.body, onlyFile.ct, 'model'), undefined);
  });

  it('undefined for a field sent twice (an engine may read the other copy), whichever part comes second', async () => {
    const twice = await form([
      ['model', 'alias'],
      ['file', wav, 'a.wav'],
      ['model', 'other-model'],
    ]);
    assert.equal(multipartField(twice.body, twice.ct, 'model'), undefined);
    assert.equal(replaceMultipartField(twice.body, twice.ct, 'model', 'engine'), undefined);
    const fileToo = await form([
      ['model', 'alias'],
      ['model', wav, 'model.wav'],
    ]);
    assert.equal(multipartField(fileToo.body, fileToo.ct, 'model'), undefined);
    // However the second copy spells its name (unquoted, spaced, after long headers), it is seen.
    const part = (disp: string, v: string, pad = ''): string =>
      `--B\r\nContent-Disposition: ${disp}\r\n${pad}\r\n${v}\r\n`;
    for (const second of [
      'form-data; name=model',
      'form-data; name = "model"',
      'form-data;name="model"',
      'form-data; NAME="model"',
    ]) {
      const body = Buffer.from(part('form-data; name="model"', 'alias') + part(second, 'other') + '--B--\r\n');
      assert.equal(multipartField(body, 'multipart/form-data; boundary=B', 'model'), undefined, second);
    }
    const padded = Buffer.from(
      part('form-data; name="model"', 'alias') +
        part('form-data; name="model"', 'other', `X-Pad: ${'p'.repeat(1100)}\r\n`) +
        '--B--\r\n',
    );
    assert.equal(multipartField(padded, 'multipart/form-data; boundary=B', 'model'), undefined);
    // `filename` is not `name`; `xname` is not `name`.
    const lookalike = Buffer.from(
      part('form-data; name="model"', 'alias') + part('form-data; xname="model"; filename="model"', 'f') + '--B--\r\n',
    );
    assert.equal(multipartField(lookalike, 'multipart/form-data; boundary=B', 'model'), 'alias');
    // Other fields named twice do not matter to the alias.
    const lang = await form([
      ['model', 'alias'],
      ['language', 'en'],
      ['language', 'de'],
    ]);
    assert.equal(multipartField(lang.body, lang.ct, 'model'), 'alias');
  });

  it('undefined for a form an engine could read otherwise: a second boundary, a second name in a part, a delimiter inside a line', () => {
    const part = (disp: string, v: string, b = 'B'): string => `--${b}\r\nContent-Disposition: ${disp}\r\n\r\n${v}\r\n`;
    const good = Buffer.from(part('form-data; name="model"', 'alias') + '--B--\r\n');
    assert.equal(multipartField(good, 'multipart/form-data; boundary=B', 'model'), 'alias');
    // Two boundary parameters: a parser that keeps the last one reads another form.
    const inner = part('form-data; name="model"', 'smuggled', 'C') + '--C--\r\n';
    const nested = Buffer.from(
      part('form-data; name="model"', 'alias') + part('form-data; name="file"; filename="a.wav"', inner) + '--B--\r\n',
    );
    assert.equal(multipartField(nested, 'multipart/form-data; boundary=B; boundary=C', 'model'), undefined);
    assert.equal(
      multipartField(nested, 'multipart/form-data; boundary=B', 'model'),
      'alias',
      "the inner form is the file's bytes",
    );
    // A part that names itself twice, or with an encoded name.
    for (const disp of [
      'form-data; name="note"; name="model"',
      "form-data; name*=utf-8''model",
      'form-data; name="note"; name*=utf-8\'\'model',
    ]) {
      const body = Buffer.from(part('form-data; name="model"', 'alias') + part(disp, 'smuggled') + '--B--\r\n');
      assert.equal(multipartField(body, 'multipart/form-data; boundary=B', 'model'), undefined, disp);
    }
    // Two Content-Disposition headers in one part.
    const twoDisp = Buffer.from(
      '--B\r\nContent-Disposition: form-data; name="note"\r\nContent-Disposition: form-data; name="model"\r\n\r\nx\r\n' +
        part('form-data; name="model"', 'alias') +
        '--B--\r\n',
    );
    assert.equal(multipartField(twoDisp, 'multipart/form-data; boundary=B', 'model'), undefined);
    // The boundary anywhere but at a line start (parsers differ on it), or a preamble before
    // the first delimiter (one parser takes `junk--B` as a delimiter, another skips to the next).
    const inline = Buffer.from('--B\r\nContent-Disposition: form-data; name="model"\r\n\r\nalias x--B y\r\n--B--\r\n');
    assert.equal(multipartField(inline, 'multipart/form-data; boundary=B', 'model'), undefined);
    const preamble = Buffer.from(
      'junk--B\r\n' + part('form-data; name="model"', 'other') + part('form-data; name="model"', 'alias') + '--B--\r\n',
    );
    assert.equal(multipartField(preamble, 'multipart/form-data; boundary=B', 'model'), undefined);
    // A boundary parameter that does not end where a parameter ends: a quoted one over 70
    // characters, or a token run into other text.
    const long = `AAA ${'C'.repeat(71)}`;
    const longForm = Buffer.from(part('form-data; name="model"', 'alias', long) + `--${long}--\r\n`);
    assert.equal(multipartField(longForm, `multipart/form-data; boundary="${long}"`, 'model'), undefined);
    for (const ct of [
      'multipart/form-data; boundary=B x',
      'multipart/form-data; boundary=B"x"',
      "multipart/form-data; boundary*=utf-8''B",
      'multipart/form-data; boundary=',
    ]) {
      assert.equal(multipartField(good, ct, 'model'), undefined, ct);
    }
    assert.equal(multipartField(good, 'multipart/form-data; boundary=B ; charset=utf-8', 'model'), 'alias');
    assert.equal(multipartField(good, 'multipart/form-data; boundary="B"', 'model'), 'alias');
    // A folded header line continues the one before it for some parsers only.
    const folded = Buffer.from(
      '--B\r\nContent-Disposition: form-data;\r\n name="model"\r\n\r\nother\r\n' +
        part('form-data; name="model"', 'alias') +
        '--B--\r\n',
    );
    assert.equal(multipartField(folded, 'multipart/form-data; boundary=B', 'model'), undefined);
    // An empty part and a part without headers are fine.
    const empty = Buffer.from(
      '--B\r\n\r\n\r\n' + part('form-data; name="e"', '') + part('form-data; name="model"', 'alias') + '--B--\r\n',
    );
    assert.equal(multipartField(empty, 'multipart/form-data; boundary=B', 'model'), 'alias');
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
    const { body, ct } = await form([
      ['file', wav, 'clip.wav'],
      ['model', 'alias'],
      ['response_format', 'json'],
    ]);
    const out = replaceMultipartField(body, ct, 'model', 'engine-model-name')!;
    const parts = parseMultipart(out, /boundary=(.+)$/.exec(ct)![1]!)!;
    assert.equal(parts.get('model')!.data.toString(), 'engine-model-name');
    assert.deepEqual(parts.get('file')!.data, Buffer.from(await wav.arrayBuffer()));
    assert.equal(parts.get('response_format')!.data.toString(), 'json');
    assert.equal(out.length, body.length - 'alias'.length + 'engine-model-name'.length);
    assert.equal(replaceMultipartField(body, ct, 'nope', 'x'), undefined);
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
    writeFileSync(
      path,
      [
        '[server]',
        'host_id = "node-a"',
        'listen = "127.0.0.1:0"',
        'api_keys_env = "UNIT_KEYS"',
        '',
        '[[models]]',
        'alias = "same"',
        `upstream = "${up.url}"`,
        `max_output_tokens = ${CEIL}`,
        '',
        '[[models]]',
        'alias = "aliased"',
        `upstream = "${up.url}"`,
        'upstream_model = "engine-name"',
        `max_output_tokens = ${CEIL}`,
        '',
      ].join('\n'),
    );
    router = await startRouter(loadRouterConfig(path), { logger: pino({ level: 'silent' }), env: { UNIT_KEYS: KEY } });
  });
  after(async () => {
    await router?.close();
    await up?.close();
  });

  const send = async (
    body: string | Uint8Array | Record<string, unknown>,
    path = '/v1/chat/completions',
    ct = 'application/json',
  ) => {
    const n = up.requests.length;
    const res = await fetch(`${router.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': ct },
      body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
    });
    await res.arrayBuffer();
    const id = res.headers.get('x-svc-request-id')!;
    return {
      status: res.status,
      upstream: up.requests.length > n ? up.requests[n]!.body : undefined,
      record: await router.registry.lookup(id),
    };
  };
  const json = (b: Buffer | undefined) => JSON.parse(b!.toString('utf8')) as Record<string, unknown>;

  it('a request within the ceiling, for an alias that is the engine name, is forwarded byte for byte', async () => {
    const text =
      '{"model":"same",  "messages":[{"role":"user","content":"hi"}], "max_tokens": 3, "extra": {"kept": [1, 2]}}';
    const r = await send(text);
    assert.equal(r.status, 200);
    assert.equal(r.upstream!.toString('utf8'), text);
    assert.deepEqual(r.record?.output_limit, { requested: 3, effective: 3, clamped: false });
  });

  it("an absent limit is added to the client's own text (nothing else re-serialized), trailing blanks included", async () => {
    const text = '{"model":"same", "messages":[{"role":"user","content":"caf\\u00e9 \u00e9"}], "n": 1.50}\r\n\t ';
    const r = await send(text);
    assert.equal(r.status, 200);
    assert.equal(
      r.upstream!.toString('utf8'),
      `{"model":"same", "messages":[{"role":"user","content":"caf\\u00e9 \u00e9"}], "n": 1.50,"max_tokens":${CEIL}}`,
    );
    assert.deepEqual(r.record?.output_limit, { requested: null, effective: CEIL, clamped: false });
    // max_completion_tokens given as null: max_tokens is the limit, added beside it.
    const r2 = await send('{"model":"same","messages":[],"max_completion_tokens":null}');
    assert.deepEqual(json(r2.upstream), { model: 'same', messages: [], max_completion_tokens: null, max_tokens: CEIL });
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

  it('a malformed limit is a 400 that never reaches the engine, recorded as an invalid request', async () => {
    for (const v of [-1, 1.5, '3', true, [], {}, 2 ** 53]) {
      const r = await send({ model: 'same', messages: [], max_tokens: v });
      assert.deepEqual([r.status, r.upstream], [400, undefined], JSON.stringify(v));
      // Its one record: refused before routing, as an invalid request of the alias it named.
      assert.deepEqual(
        [r.record?.outcome, r.record?.refusal, r.record?.model, r.record?.attempts],
        ['rejected', 'invalid_request', 'same', 0],
      );
    }
  });

  it("the engine's model name replaces the alias (chat, embeddings, multipart audio); other members are kept", async () => {
    const r = await send({
      model: 'aliased',
      messages: [{ role: 'user', content: 'x' }],
      temperature: 0.5,
      max_tokens: 2,
    });
    assert.deepEqual(json(r.upstream), {
      model: 'engine-name',
      messages: [{ role: 'user', content: 'x' }],
      temperature: 0.5,
      max_tokens: 2,
    });
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
    writeFileSync(
      path,
      [
        '[server]',
        'host_id = "node-a"',
        'listen = "127.0.0.1:0"',
        'api_keys_env = "UNIT_KEYS"',
        'decision_log_path = "file/sub/d.jsonl"',
        '',
        '[[models]]',
        'alias = "same"',
        `upstream = "${up.url}"`,
        '',
      ].join('\n'),
    );
    await assert.rejects(
      startRouter(loadRouterConfig(path), { logger: pino({ level: 'silent' }), env: { UNIT_KEYS: KEY } }),
      /decision_log_path cannot be opened/,
    );
  });

  it('a decision log path that is a FIFO (or a rotated file, a lock or a journal that is one) never blocks the router: refused at start, skipped when read', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-fifo-log-'));
    const fifo = (p: string): void => {
      const r = spawnSync('mkfifo', [p]);
      assert.equal(r.status, 0, 'mkfifo');
    };
    const toml = (log: string): string => {
      const path = join(dir, `${log.replace(/\W/g, '_')}.toml`);
      writeFileSync(
        path,
        [
          '[server]',
          'host_id = "node-a"',
          'listen = "127.0.0.1:0"',
          'api_keys_env = "UNIT_KEYS"',
          `decision_log_path = "${log}"`,
          '',
          '[[models]]',
          'alias = "same"',
          `upstream = "${up.url}"`,
          '',
        ].join('\n'),
      );
      return path;
    };
    fifo(join(dir, 'fifo.jsonl'));
    const err = await startRouter(loadRouterConfig(toml('fifo.jsonl')), {
      logger: pino({ level: 'silent' }),
      env: { UNIT_KEYS: KEY },
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof ConfigError, 'a configuration error (exit 2)');
    assert.match((err as Error).message, /decision_log_path cannot be opened/);
    // FIFOs where a rotated file, the lock and the journal go: the router starts, restores what
    // it can and answers lookups, never waiting on any of them.
    mkdirSync(join(dir, 'logs'));
    for (const f of ['d.jsonl.1', 'd.jsonl.lock', 'd.jsonl.inflight', 'd.jsonl.inflight.tmp', 'd.jsonl.unclean'])
      fifo(join(dir, 'logs', f));
    const r = await startRouter(loadRouterConfig(toml('logs/d.jsonl')), {
      logger: pino({ level: 'silent' }),
      env: { UNIT_KEYS: KEY },
    });
    try {
      const res = await fetch(`${r.url}/v1/requests/req_${'0'.repeat(32)}`, {
        headers: { authorization: `Bearer ${KEY}` },
        signal: AbortSignal.timeout(5000),
      });
      assert.equal(res.status, 404);
    } finally {
      await r.close();
    }
  });

  it("a data-plane key that is also a policy client's token stops start-up, naming the client, never the token", async () => {
    const policy = writeTestPolicy();
    const path = join(policy.dir, 'router.toml');
    writeFileSync(
      path,
      [
        '[server]',
        'host_id = "node-a"',
        'listen = "127.0.0.1:0"',
        'api_keys_env = "UNIT_KEYS"',
        'authorization_policy = "policy.toml"',
        '',
        '[[models]]',
        'alias = "same"',
        `upstream = "${up.url}"`,
        '',
      ].join('\n'),
    );
    await assert.rejects(
      startRouter(loadRouterConfig(path), {
        logger: pino({ level: 'silent' }),
        env: { ...policy.env, UNIT_KEYS: `${KEY}, ${policy.tokens.reader}` },
      }),
      (err: Error) =>
        /a key in UNIT_KEYS is also the credential of policy client "ops-reader"/.test(err.message) &&
        !err.message.includes(policy.tokens.reader),
    );
  });
});
