import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { StreamObserver } from '../../src/router/stream-observer.js';
import { responsesErrorEvent, responsesFinish, responsesPromptChars } from '../../src/router/responses-observe.js';
import { ErrorCode } from '../../src/errors.js';
import { limitApiOf, prepareBody, type PreparedBody } from '../../src/router/relay-body.js';
import type { ModelRoute } from '../../src/config/router-config.js';

/** One named SSE event as vLLM frames it. */
const ev = (type: string, fields: Record<string, unknown> = {}): string =>
  `event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`;
const delta = (d: string): string => ev('response.output_text.delta', { item_id: 'm', delta: d });
const completed = (response: Record<string, unknown>): string => ev('response.completed', { response });

/** Feeds SSE text to a Responses observer, one chunk per element, each at its index in ms. */
function observe(chunks: readonly string[]): StreamObserver {
  const o = new StreamObserver(() => -1, true);
  chunks.forEach((c, i) => o.sseChunk(Buffer.from(c), i));
  return o;
}

describe('Responses answers as the router reads them', () => {
  it('finish from status and incomplete_details: the mapping table', () => {
    const table: Array<[Record<string, unknown>, string | null]> = [
      [{ status: 'completed' }, 'stop'],
      [{ status: 'completed', output: [{ type: 'message' }, { type: 'function_call' }] }, 'tool_calls'],
      [{ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } }, 'length'],
      [{ status: 'incomplete', incomplete_details: { reason: 'content_filter' } }, 'content_filter'],
      [{ status: 'incomplete', incomplete_details: { reason: 'constructor' } }, 'unknown'],
      [{ status: 'incomplete', incomplete_details: null }, 'unknown'],
      [{ status: 'failed' }, 'error'],
      [{ status: 'cancelled' }, 'cancelled'],
      [{ status: 'queued' }, null],
      [{ status: 'in_progress' }, null],
      [{ status: 'toString' }, 'unknown'],
      [{ status: 7 }, 'unknown'],
      [{}, null],
    ];
    for (const [r, want] of table) assert.equal(responsesFinish(r), want, JSON.stringify(r));
  });

  it('a stream: first content at the first text delta (not at response.created), fragments per delta, usage and finish from the terminal event', () => {
    const o = observe([
      ev('response.created', { response: { status: 'in_progress', usage: null } }) +
        ev('response.in_progress', { response: { status: 'in_progress' } }),
      ev('response.output_item.added', { item: { type: 'message' } }) + ev('response.content_part.added'),
      delta('') + delta('hé'),
      delta('llo') + ev('response.output_text.done', { text: 'héllo' }),
      completed({
        status: 'incomplete',
        incomplete_details: { reason: 'max_output_tokens' },
        usage: { input_tokens: 12, output_tokens: 2, total_tokens: 14 },
      }),
    ]);
    assert.equal(o.firstContentAt, 2);
    assert.equal(o.fragments, 2);
    assert.equal(o.contentChars, 5);
    assert.equal(o.finishReason, 'length');
    assert.equal(o.promptTokens, 12);
    assert.equal(o.completionTokens, 2);
    assert.equal(o.done, true);
    assert.equal(o.failed, false);
  });

  it('the terminal event ends the answer: nothing after it is read, and the relay stops at its last byte', () => {
    const tail = completed({ status: 'completed', usage: { input_tokens: 1, output_tokens: 1 } });
    const after = delta('late') + 'data: [DONE]\n\n';
    const o = new StreamObserver(() => 0, true);
    const chunk = Buffer.from(delta('x') + tail + after);
    o.sseChunk(chunk, 0);
    assert.equal(o.done, true);
    assert.equal(o.doneAtByte, Buffer.byteLength(delta('x') + tail));
    assert.equal(o.fragments, 1);
    // OpenAI's own event for a cut answer ends it too.
    const cut = observe([delta('a'), ev('response.incomplete', { response: { status: 'incomplete' } })]);
    assert.equal(cut.done, true);
    assert.equal(cut.finishReason, 'unknown');
  });

  it('a reasoning model: thinking deltas are content (as chat counts reasoning_content); a function call is output, not content', () => {
    const thinking = observe([ev('response.reasoning_text.delta', { delta: 'hmm' }), delta('ok')]);
    assert.equal(thinking.firstContentAt, 0);
    assert.equal(thinking.fragments, 2);
    const tool = observe([
      ev('response.output_item.added', { item: { type: 'function_call', name: 'f' } }),
      ev('response.function_call_arguments.delta', { delta: '{"a"' }),
      ev('response.function_call_arguments.delta', { delta: ':1}' }),
      completed({ status: 'completed', output: [{ type: 'function_call', name: 'f', arguments: '{"a":1}' }] }),
    ]);
    assert.equal(tool.firstContentAt, null);
    assert.equal(tool.toolCall, true);
    assert.equal(tool.fragments, 2);
    assert.equal(tool.finishReason, 'tool_calls');
  });

  it('engine failures fail the answer: response.failed, an error event (named or not), an error object, text that is no event', () => {
    for (const bad of [
      ev('response.failed', { response: { status: 'failed', error: { code: 'x', message: 'SECRET' } } }),
      ev('error', { code: 'server_error', message: 'SECRET' }),
      `data: ${JSON.stringify({ type: 'error', message: 'SECRET' })}\n\n`,
      'data: {"error":{"message":"SECRET"}}\n\n',
      'Traceback (most recent call last)\n\n',
    ]) {
      const o = observe([delta('a'), bad, completed({ status: 'completed' })]);
      assert.equal(o.failed, true, bad);
      assert.equal(o.done, false, bad);
      assert.ok(o.failedAtByte === 0, bad);
    }
  });

  it("the router's own error event takes the number after the last event relayed; a failing event's number is not counted", () => {
    const seq = (type: string, n: unknown, fields: Record<string, unknown> = {}): string =>
      ev(type, { sequence_number: n, ...fields });
    assert.equal(observe([]).nextSequence, 0, 'nothing relayed: 0');
    const o = observe([
      seq('response.created', 0, { response: { status: 'in_progress' } }) + seq('response.in_progress', 1),
      seq('response.output_text.delta', 2, { delta: 'a' }),
      // Unnumbered events and numbers that are no integer leave it as it is.
      ev('response.output_text.delta', { delta: 'b' }) + seq('response.output_text.delta', 1.5, { delta: 'c' }),
      seq('response.output_text.delta', -4, { delta: 'd' }) + seq('response.output_text.delta', '9', { delta: 'e' }),
    ]);
    assert.equal(o.nextSequence, 3);
    // The engine's own failure (numbered 7) is not relayed: the router's event is 4, after 3.
    const failed = observe([
      seq('response.created', 0) + seq('response.output_text.delta', 3, { delta: 'a' }),
      seq('error', 7, { code: 'server_error', message: 'SECRET' }),
    ]);
    assert.equal(failed.failed, true);
    assert.equal(failed.nextSequence, 4);
    const failedEvent = observe([
      seq('response.output_text.delta', 5, { delta: 'a' }) + seq('response.failed', 6, { response: {} }),
    ]);
    assert.equal(failedEvent.nextSequence, 6);
  });

  it("the error event is OpenAI's Responses `error` event: type, the stable code, the fixed message, param null, the sequence number", () => {
    const text = responsesErrorEvent(ErrorCode.UPSTREAM_FAILED, 12).toString('utf8');
    const m = /^event: error\ndata: (.*)\n\n$/.exec(text);
    assert.ok(m, text);
    assert.deepEqual(JSON.parse(m[1]!), {
      type: 'error',
      code: 'upstream_failed',
      message: "The model's engine failed or could not be reached",
      param: null,
      sequence_number: 12,
    });
    assert.equal(
      JSON.parse(/data: (.*)/.exec(responsesErrorEvent(ErrorCode.UPSTREAM_TIMEOUT, 0).toString())![1]!).code,
      'upstream_timeout',
    );
  });

  it('usage past what a record holds, or not an integer, is no usage (the estimate stands)', () => {
    const o = observe([
      delta('a'),
      completed({ status: 'completed', usage: { input_tokens: 2 ** 40, output_tokens: 1.5 } }),
    ]);
    assert.equal(o.promptTokens, null);
    assert.equal(o.completionTokens, null);
    assert.equal(o.done, true);
  });

  it('a buffered Response: content from output_text and reasoning_text parts, tool chars from calls, first content on arrival', () => {
    const o = new StreamObserver(() => 99, true);
    o.jsonBody(
      Buffer.from(
        JSON.stringify({
          object: 'response',
          status: 'completed',
          error: null,
          output: [
            { type: 'reasoning', content: [{ type: 'reasoning_text', text: 'think' }] },
            { type: 'message', content: [{ type: 'output_text', text: 'answer', annotations: [] }] },
          ],
          usage: { input_tokens: 5, output_tokens: 3 },
        }),
      ),
      42,
    );
    assert.equal(o.contentChars, 11);
    assert.equal(o.firstContentAt, 42);
    assert.equal(o.finishReason, 'stop');
    assert.equal(o.promptTokens, 5);
    assert.equal(o.completionTokens, 3);
    const call = new StreamObserver(() => 0, true);
    call.jsonBody(
      Buffer.from(
        JSON.stringify({ status: 'completed', output: [{ type: 'function_call', name: 'fn', arguments: '{}' }] }),
      ),
      1,
    );
    assert.equal(call.toolChars, 4);
    assert.equal(call.firstContentAt, null);
    assert.equal(call.finishReason, 'tool_calls');
    for (const failed of [
      { status: 'failed', error: null },
      { status: 'completed', error: { message: 'x' } },
    ]) {
      const f = new StreamObserver(() => 0, true);
      f.jsonBody(Buffer.from(JSON.stringify(failed)), 1);
      assert.equal(f.failed, true, JSON.stringify(failed));
    }
  });

  it('a buffered Response the engine only accepted (queued, in_progress) has no finish and no output count, even a reported 0', () => {
    for (const status of ['queued', 'in_progress']) {
      const o = new StreamObserver(() => 0, true);
      o.jsonBody(
        Buffer.from(
          JSON.stringify({ status, output: [], usage: { input_tokens: 7, output_tokens: 0, total_tokens: 7 } }),
        ),
        1,
      );
      assert.equal(o.accepted, true, status);
      assert.equal(o.finishReason, null, status);
      assert.equal(o.promptTokens, 7, 'the prompt is counted when the engine says');
      assert.equal(o.completionTokens, null, 'output still to come is no count');
      assert.equal(o.firstContentAt, null);
    }
    const done = new StreamObserver(() => 0, true);
    done.jsonBody(Buffer.from(JSON.stringify({ status: 'completed', usage: { output_tokens: 0 } })), 1);
    assert.equal(done.accepted, false);
    assert.equal(done.completionTokens, 0, 'a finished answer of 0 tokens is a count');
  });

  it('prompt characters: instructions and input (a string, message contents, parts, tool results), bounded in depth', () => {
    assert.equal(responsesPromptChars({ input: 'hello', instructions: 'be brief' }), 13);
    assert.equal(
      responsesPromptChars({
        input: [
          { role: 'user', content: 'abc' },
          {
            role: 'user',
            content: [
              { type: 'input_text', text: 'de' },
              { type: 'input_image', image_url: 'x' },
            ],
          },
          { type: 'function_call', name: 'f', arguments: '{"q":1}' },
          { type: 'function_call_output', call_id: 'c', output: 'result' },
        ],
      }),
      3 + 2 + 7 + 6,
    );
    let deep: unknown = 'x'.repeat(10);
    for (let i = 0; i < 10_000; i++) deep = [deep];
    assert.equal(responsesPromptChars({ input: deep }), 0);
    assert.equal(responsesPromptChars({ input: 42 }), 0);
  });

  it('max_output_tokens is bounded like chat max_tokens: absent set to the ceiling, above clamped, malformed refused; no other member touched', () => {
    const m = { alias: 'a', upstreamModel: 'engine-a', maxOutputTokens: 100 } as ModelRoute;
    assert.equal(limitApiOf('responses'), 'responses');
    const prepared = (body: Record<string, unknown>, route: ModelRoute = m): PreparedBody => {
      const r = prepareBody(body, route, 'responses');
      assert.ok(!('invalid' in r), 'a well-formed limit');
      return r;
    };
    let b: Record<string, unknown> = { model: 'a', input: 'x' };
    let p = prepared(b);
    assert.deepEqual(p.outputLimit, { requested: null, effective: 100, clamped: false });
    assert.equal(b['max_output_tokens'], 100);
    assert.equal(b['model'], 'engine-a');
    b = { model: 'a', input: 'x', max_output_tokens: 5000, max_tokens: 7 };
    p = prepared(b);
    assert.deepEqual(p.outputLimit, { requested: 5000, effective: 100, clamped: true });
    assert.equal(b['max_output_tokens'], 100);
    assert.equal(b['max_tokens'], 7, 'not a member the Responses API reads');
    b = { model: 'a', input: 'x', max_output_tokens: 50 };
    assert.deepEqual(prepared(b).outputLimit, { requested: 50, effective: 50, clamped: false });
    for (const bad of [-1, 1.5, '10', true, 2 ** 60])
      assert.deepEqual(
        prepareBody({ model: 'a', max_output_tokens: bad }, m, 'responses'),
        { invalid: 'max_output_tokens' },
        String(bad),
      );
    // Added as one member when absent (the rest of the body is sent as the client wrote it).
    const same = { alias: 'a', upstreamModel: 'a', maxOutputTokens: 100 } as ModelRoute;
    assert.equal(prepared({ model: 'a', input: 'x' }, same).append, '"max_output_tokens":100');
  });
});
