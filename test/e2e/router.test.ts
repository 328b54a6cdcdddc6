import { before, describe, it } from 'node:test';
import { request as httpRequest } from 'node:http';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import type { TerminalRecord } from '../../src/schema/terminal-record.js';
import { interpret, terminalEvidence } from '../../src/schema/diagnosis.js';
import OpenAI from 'openai';
import type { EngineSim } from '../../src/engine-sim/engine-sim.js';
import { eventually } from '../support/processes.js';
import { CEIL, useRouterE2E, user } from '../support/router-e2e.js';
import type { RecordingUpstream } from '../support/recording-upstream.js';
import type { RouterHarness } from '../support/router-harness.js';

describe('router end to end: outcomes (engine sim and router as real processes, OpenAI SDK client)', () => {
  const e = useRouterE2E();
  const { errors, post, chat, record, gidOf, assertError, readEvents } = e;
  let h: RouterHarness;
  let rec: RecordingUpstream;
  let inproc: EngineSim;
  let client: OpenAI;
  before(() => {
    ({ h, rec, inproc, client } = e);
  });

  it('non-streaming chat: success record with phase timings, upstream usage, output limit and router identity', async () => {
    const { data, response } = await client.chat.completions
      .create({ model: 'chat', messages: user('hello there') })
      .withResponse();
    const id = gidOf(response);
    assert.equal(data.choices[0]!.finish_reason, 'stop');
    assert.equal(data.choices[0]!.message.content, 'tok tok tok tok ');
    const r = await record(id);
    assert.equal(r.request_id, id);
    assert.equal(r.model, 'chat');
    assert.equal(r.route, 'chat.completions');
    assert.equal(r.outcome, 'success');
    assert.equal(r.status_code, 200);
    assert.equal(r.finish_reason, 'stop');
    assert.deepEqual(r.usage, {
      prompt_tokens: data.usage!.prompt_tokens,
      completion_tokens: 4,
      prompt_source: 'upstream',
      completion_source: 'upstream',
    });
    for (const k of [
      'latency_ms',
      'readiness_check_ms',
      'admission_wait_ms',
      'upstream_duration_ms',
      'time_to_first_content_ms',
    ] as const) {
      assert.equal(typeof r[k], 'number', k);
      assert.ok(r[k]! >= 0 && r[k]! <= r.latency_ms!, `${k} within the latency`);
    }
    assert.ok(r.latency_ms! > 0);
    assert.ok(r.upstream_duration_ms! > 0);
    assert.deepEqual(r.output_limit, { requested: null, effective: CEIL, clamped: false });
    assert.match(r.routing_config_hash ?? '', /^[0-9a-f]{64}$/);
    assert.match(r.package_version ?? '', /^\d+\.\d+\.\d+/);
    assert.ok(Date.parse(r.started_at) <= Date.parse(r.finished_at));
    for (const k of ['session_id', 'workbench_run_id', 'task_id']) assert.equal(k in r, false, k);
    const status = (await (await h.get('/v1/router/status')).json()) as {
      routing_config_hash: string;
      package_version: string;
    };
    assert.equal(r.routing_config_hash, status.routing_config_hash);
    assert.equal(r.package_version, status.package_version);
  });

  it('an output limit above the alias ceiling is clamped, and the engine really produces at most the ceiling', async () => {
    const big = await client.chat.completions
      .create({ model: 'chat', messages: user('sim:tokens=40'), max_tokens: 100 })
      .withResponse();
    assert.equal(big.data.usage!.completion_tokens, CEIL);
    assert.equal(big.data.choices[0]!.message.content, 'tok '.repeat(CEIL));
    let r = await record(gidOf(big.response));
    assert.deepEqual(r.output_limit, { requested: 100, effective: CEIL, clamped: true });
    assert.equal(r.finish_reason, 'length');

    const mct = await client.chat.completions
      .create({ model: 'chat', messages: user('sim:tokens=40'), max_completion_tokens: 1000 })
      .withResponse();
    assert.equal(mct.data.usage!.completion_tokens, CEIL);
    r = await record(gidOf(mct.response));
    assert.deepEqual(r.output_limit, { requested: 1000, effective: CEIL, clamped: true });

    const small = await client.chat.completions
      .create({ model: 'chat', messages: user('sim:tokens=40'), max_tokens: 3 })
      .withResponse();
    assert.equal(small.data.usage!.completion_tokens, 3);
    r = await record(gidOf(small.response));
    assert.deepEqual(r.output_limit, { requested: 3, effective: 3, clamped: false });
    assert.equal(r.finish_reason, 'length');

    // Completions read max_tokens only (vLLM, OpenAI): a max_completion_tokens there is no
    // limit of the engine's, so the ceiling is sent as max_tokens and the engine keeps to it.
    const legacy = await post('/v1/completions', {
      model: 'chat',
      prompt: 'sim:tokens=40',
      max_completion_tokens: 5000,
    });
    const legacyBody = (await legacy.json()) as {
      usage: { completion_tokens: number };
      choices: { finish_reason: string }[];
    };
    assert.equal(legacyBody.usage.completion_tokens, CEIL);
    assert.equal(legacyBody.choices[0]!.finish_reason, 'length');
    r = await record(gidOf(legacy));
    assert.deepEqual(r.output_limit, { requested: null, effective: CEIL, clamped: false });

    // Both spellings at once: neither may carry more than the ceiling to the engine.
    const before = rec.requests.length;
    await client.chat.completions.create({
      model: 'recorded',
      messages: user('x'),
      max_tokens: 500,
      max_completion_tokens: 400,
    });
    const sent = JSON.parse(rec.requests[before]!.body.toString('utf8')) as Record<string, unknown>;
    assert.equal(sent['model'], 'recorded-model');
    assert.ok((sent['max_tokens'] as number) <= CEIL, `max_tokens forwarded as ${String(sent['max_tokens'])}`);
    assert.ok((sent['max_completion_tokens'] as number) <= CEIL);
  });

  it('streaming chat through the SDK: every chunk arrives; usage is upstream with include_usage and estimated without', async () => {
    const withUsage = await client.chat.completions
      .create({
        model: 'chat',
        messages: user('stream me sim:tokens=6'),
        stream: true,
        stream_options: { include_usage: true },
      })
      .withResponse();
    const id = gidOf(withUsage.response);
    const content: string[] = [];
    let usage: OpenAI.CompletionUsage | null | undefined;
    let finish: string | null | undefined;
    for await (const chunk of withUsage.data) {
      if (chunk.choices[0]?.delta.content) content.push(chunk.choices[0].delta.content);
      if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
      if (chunk.usage) usage = chunk.usage;
    }
    assert.deepEqual(content, Array(6).fill('tok '));
    assert.equal(finish, 'stop');
    assert.equal(usage?.completion_tokens, 6);
    let r = await record(id);
    assert.equal(r.outcome, 'success');
    assert.equal(r.finish_reason, 'stop');
    assert.deepEqual(r.usage, {
      prompt_tokens: usage!.prompt_tokens,
      completion_tokens: 6,
      prompt_source: 'upstream',
      completion_source: 'upstream',
    });
    assert.equal(typeof r.time_to_first_content_ms, 'number');

    const prompt = 'no usage please sim:tokens=5';
    const without = await client.chat.completions
      .create({ model: 'chat', messages: user(prompt), stream: true })
      .withResponse();
    let n = 0;
    for await (const chunk of without.data) if (chunk.choices[0]?.delta.content) n++;
    assert.equal(n, 5);
    r = await record(gidOf(without.response));
    assert.equal(r.outcome, 'success');
    assert.deepEqual(r.usage, {
      prompt_tokens: Math.ceil(prompt.length / 4),
      completion_tokens: 5,
      prompt_source: 'estimated',
      completion_source: 'estimated',
    });
  });

  it('completions route: record with route completions and upstream usage', async () => {
    const { data, response } = await client.completions
      .create({ model: 'chat', prompt: 'once upon a time' })
      .withResponse();
    assert.equal(data.choices[0]!.text, 'tok tok tok tok ');
    const r = await record(gidOf(response));
    assert.equal(r.route, 'completions');
    assert.equal(r.outcome, 'success');
    assert.equal(r.finish_reason, 'stop');
    assert.equal(r.usage.completion_source, 'upstream');
    assert.deepEqual(r.output_limit, { requested: null, effective: CEIL, clamped: false });
  });

  it('finish reasons: length, tool_calls (tool-only output has no first content), unknown provider strings; usage=off is estimated', async () => {
    const len = await client.chat.completions
      .create({ model: 'chat', messages: user('sim:tokens=9'), max_tokens: 2 })
      .withResponse();
    assert.equal((await record(gidOf(len.response))).finish_reason, 'length');

    const tools = [
      {
        type: 'function' as const,
        function: { name: 'lookup_weather', parameters: { type: 'object', properties: {} } },
      },
    ];
    const tc = await client.chat.completions
      .create({ model: 'chat', messages: user('sim:finish=tool_calls'), tools })
      .withResponse();
    assert.equal(tc.data.choices[0]!.message.tool_calls?.[0]?.type, 'function');
    let r = await record(gidOf(tc.response));
    assert.equal(r.finish_reason, 'tool_calls');
    assert.equal(r.time_to_first_content_ms, null);
    // Without the engine's usage, the calls' names and arguments are the output estimated
    // (buffered as streamed): never zero for work the engine did.
    const tcOff = await client.chat.completions
      .create({ model: 'chat', messages: user('sim:finish=tool_calls sim:usage=off'), tools })
      .withResponse();
    const fn = tcOff.data.choices[0]!.message.tool_calls![0]!;
    const called = fn.type === 'function' ? fn.function.name.length + fn.function.arguments.length : 0;
    assert.deepEqual((await record(gidOf(tcOff.response))).usage.completion_tokens, Math.ceil(called / 4));

    const tcs = await client.chat.completions
      .create({ model: 'chat', messages: user('sim:finish=tool_calls'), tools, stream: true })
      .withResponse();
    let args = '';
    for await (const c of tcs.data) args += c.choices[0]?.delta.tool_calls?.[0]?.function?.arguments ?? '';
    assert.deepEqual(JSON.parse(args), { text: 'tok tok tok tok ' });
    r = await record(gidOf(tcs.response));
    assert.equal(r.finish_reason, 'tool_calls');
    assert.equal(r.time_to_first_content_ms, null);
    assert.equal(r.outcome, 'success');

    // Unknown provider strings, including names an object inherits, are `unknown`, never free text.
    for (const finish of ['end_of_turn_weird', 'constructor', '__proto__', 'toString']) {
      for (const stream of [false, true]) {
        const res = await chat(`sim:finish=${finish}`, { stream });
        const id = gidOf(res);
        await res.text();
        assert.equal((await record(id)).finish_reason, 'unknown', `${finish} stream=${stream}`);
      }
    }

    const off = await client.chat.completions.create({ model: 'chat', messages: user('sim:usage=off') }).withResponse();
    assert.equal(off.data.usage, undefined);
    r = await record(gidOf(off.response));
    assert.deepEqual(r.usage, {
      prompt_tokens: Math.ceil('sim:usage=off'.length / 4),
      completion_tokens: 4,
      prompt_source: 'estimated',
      completion_source: 'estimated',
    });
  });

  it('context rejection: the SDK gets a 400 BadRequestError with the fixed context-length problem; record rejected', async () => {
    // vLLM's error envelope (0.10.1 on) and its older flat object alike.
    for (const [stream, shape] of [
      [false, 'context'],
      [true, 'context'],
      [false, 'context_flat'],
      [true, 'context_flat'],
    ] as const) {
      const n = errors.length;
      const err = await client.chat.completions
        .create({ model: 'chat', messages: user(`sim:reject=${shape}`), stream })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      assert.ok(err instanceof OpenAI.BadRequestError, String(err));
      assert.equal(err.status, 400);
      const res = errors[n]!;
      const text = await assertError(res, 400, 'context_length_exceeded');
      assert.doesNotMatch(text, /maximum context length|tokens/);
      const r = await record(gidOf({ headers: err.headers! }));
      assert.equal(r.outcome, 'rejected');
      assert.equal(r.status_code, 400);
    }
  });

  it('upstream failure mid-stream: an SSE error event and never [DONE]; record error with estimated usage', async () => {
    const res = await chat('sim:fail_after=3 sim:tokens=10', { stream: true });
    const id = gidOf(res);
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.equal((text.match(/"content":"tok "/g) ?? []).length, 3);
    assert.match(text, /^event: error$/m);
    assert.doesNotMatch(text, /\[DONE\]/);
    const r = await record(id);
    assert.equal(r.outcome, 'error');
    assert.equal(r.finish_reason, 'error');
    assert.deepEqual([r.usage.completion_tokens, r.usage.completion_source], [3, 'estimated']);

    // The SDK turns the error event into an exception instead of a silently short answer.
    const s = await client.chat.completions.create({
      model: 'chat',
      messages: user('sim:fail_after=2 sim:tokens=10'),
      stream: true,
    });
    await assert.rejects(async () => {
      for await (const _ of s) {
        // drain
      }
    }, OpenAI.APIError);
  });

  it("an engine error event in the stream (then [DONE], as vLLM sends it): the router's fixed error event, never the engine's text; record error", async () => {
    const res = await chat('sim:error_after=3 sim:tokens=10', { stream: true });
    const id = gidOf(res);
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.equal((text.match(/"content":"tok "/g) ?? []).length, 3);
    assert.match(text, /^event: error$/m);
    assert.doesNotMatch(text, /UPSTREAM-SECRET-DETAIL|worker|\[DONE\]/);
    const r = await record(id);
    assert.deepEqual([r.outcome, r.status_code, r.finish_reason], ['error', 200, 'error']);
    assert.deepEqual([r.usage.completion_tokens, r.usage.completion_source], [3, 'estimated']);
    assert.doesNotMatch(JSON.stringify(r), /UPSTREAM-SECRET-DETAIL/);

    // Split across two reads of the engine's answer: still not one byte of its text.
    const split = await chat('answer-split-error', { stream: true }, {}, 'recorded');
    const splitText = await split.text();
    assert.match(splitText, /"content":"hi "/);
    assert.match(splitText, /^event: error$/m);
    assert.doesNotMatch(splitText, /UPSTREAM-SECRET|SPLIT|worker|\[DONE\]/);
    assert.equal((await record(gidOf(split))).outcome, 'error');

    // An error as the engine's first event: nothing was relayed, so a plain 502 problem.
    const first = await chat('answer-error-first', { stream: true }, {}, 'recorded');
    const firstText = await assertError(first, 502, 'upstream_failed');
    assert.doesNotMatch(firstText, /UPSTREAM-SECRET/);
    const f = await record(gidOf(first));
    assert.deepEqual([f.outcome, f.status_code, f.usage.completion_source], ['error', 502, 'unknown']);

    // A buffered answer that is an error object with status 200: a 502 problem, not a relay of it.
    const buffered = await chat('sim:error_after=0');
    const bufferedText = await assertError(buffered, 502, 'upstream_failed');
    assert.doesNotMatch(bufferedText, /UPSTREAM-SECRET-DETAIL/);
    const b = await record(gidOf(buffered));
    assert.deepEqual([b.outcome, b.status_code], ['error', 502]);
  });

  it('SSE lines ended by a bare CR are relayed as they come and read: success with its first content time', async () => {
    const t0 = performance.now();
    const res = await chat('answer-cr-lines', { stream: true }, {}, 'recorded');
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    const first = await reader.read();
    // The first event arrived before the engine's 400 ms pause ended: it was not held back.
    assert.ok(performance.now() - t0 < 350, 'first event relayed before the rest of the stream');
    assert.match(Buffer.from(first.value!).toString('utf8'), /"content":"hi "/);
    let text = Buffer.from(first.value!).toString('utf8');
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString('utf8');
    }
    assert.match(text, /data: \[DONE\]\r\r$/);
    const r = await record(gidOf(res));
    assert.deepEqual([r.outcome, r.status_code, r.finish_reason], ['success', 200, 'stop']);
    assert.deepEqual([r.usage.completion_tokens, r.usage.completion_source], [2, 'estimated']);
    assert.equal(typeof r.time_to_first_content_ms, 'number');
  });

  it('a large event arriving in many small reads (its CRLF end split between two) is relayed whole, once: success', async () => {
    const res = await chat('answer-big-trickle', { stream: true }, {}, 'recorded');
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.equal((text.match(/B/g) ?? []).length, 600 * 1024);
    assert.match(
      text,
      /"content":"B{614400}"\}[\s\S]*\r\n\r\ndata: [\s\S]*"finish_reason":"stop"[\s\S]*\n\ndata: \[DONE\]\n\n$/,
    );
    const r = await record(gidOf(res));
    assert.deepEqual([r.outcome, r.status_code, r.finish_reason], ['success', 200, 'stop']);
    assert.deepEqual([r.usage.completion_tokens, r.usage.completion_source], [1, 'estimated']);
  });

  it('an SSE line longer than the router reads before relaying (1 MiB) ends the stream as a failure, never relayed', async () => {
    const res = await chat('answer-long-error', { stream: true }, {}, 'recorded');
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.match(text, /"content":"hi "/);
    assert.match(
      text,
      /^event: error\ndata: \{"error":\{"message":"[^"]*","type":"api_error","param":null,"code":"upstream_failed"/m,
    );
    assert.doesNotMatch(text, /UPSTREAM-SECRET|xxxxxxxx|\[DONE\]/);
    assert.ok(text.length < 4096, 'none of the long line was relayed');
    const r = await record(gidOf(res));
    assert.deepEqual([r.outcome, r.status_code, r.finish_reason], ['error', 200, 'error']);
  });

  it('engine text in a stream is never relayed, however it is framed (an error over two data lines, an error event, text as data, a stray line): the fixed error event instead', async () => {
    for (const name of ['multiline-error', 'event-error', 'text-data', 'traceback-line']) {
      const res = await chat(`answer-raw=${name}`, { stream: true }, {}, 'recorded');
      assert.equal(res.status, 200, name);
      const text = await res.text();
      assert.match(text, /"content":"hi "/, name);
      assert.match(
        text,
        /^event: error\ndata: \{"error":\{"message":"[^"]*","type":"api_error","param":null,"code":"upstream_failed"/m,
        name,
      );
      assert.doesNotMatch(text, /UPSTREAM-SECRET|Traceback|\[DONE\]/, name);
      const r = await record(gidOf(res));
      assert.deepEqual([r.outcome, r.status_code, r.finish_reason], ['error', 200, 'error'], name);
    }
    // As the engine's first words (after a byte order mark, or text then its close): nothing
    // was relayed, so the plain 502 problem.
    for (const name of ['text-first', 'bom-error-first']) {
      const res = await chat(`answer-raw=${name}`, { stream: true }, {}, 'recorded');
      const text = await assertError(res, 502, 'upstream_failed');
      assert.doesNotMatch(text, /UPSTREAM-SECRET/, name);
      const r = await record(gidOf(res));
      assert.deepEqual([r.outcome, r.status_code], ['error', 502], name);
    }
  });

  it("a failed stream's record says what is known: finish error after an earlier finish reason, no first content for what was never relayed, unknown work before any fragment; an event over 1 MiB is never relayed, however it arrives", async () => {
    const late = await chat('answer-raw=length-then-error', { stream: true }, {}, 'recorded');
    const lateText = await late.text();
    assert.match(lateText, /^event: error$/m);
    assert.doesNotMatch(lateText, /UPSTREAM-SECRET|\[DONE\]/);
    let r = await record(gidOf(late));
    assert.deepEqual([r.outcome, r.status_code, r.finish_reason], ['error', 200, 'error']);

    const big = await chat('answer-raw=big-event-whole', { stream: true }, {}, 'recorded');
    const bigText = await big.text();
    assert.ok(bigText.length < 4096, 'none of the event over 1 MiB was relayed');
    assert.doesNotMatch(bigText, /UPSTREAM-SECRET|\[DONE\]/);
    assert.deepEqual(
      [(await record(gidOf(big))).outcome, (await record(gidOf(big))).finish_reason],
      ['error', 'error'],
    );

    // A failure right after a large write, to a client that is a moment late to read (its
    // buffers full, but reading): it gets every event before the failure, then the error
    // event, not a cut connection.
    const bulkText = await new Promise<string>((resolve, reject) => {
      const u = new URL(`${h.routerUrl}/v1/chat/completions`);
      const body = JSON.stringify({ model: 'recorded', stream: true, messages: user('answer-raw=big-then-error') });
      const req = httpRequest(
        u,
        { method: 'POST', headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' } },
        (res) => {
          res.pause();
          const parts: Buffer[] = [];
          setTimeout(() => {
            res.on('data', (d: Buffer) => parts.push(d));
            res.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
            res.on('error', reject);
            res.resume();
          }, 500);
        },
      );
      req.on('error', reject);
      req.end(body);
    });
    assert.equal((bulkText.match(/"content":"y{32768}"/g) ?? []).length, 160);
    assert.match(
      bulkText,
      /\n\nevent: error\ndata: \{"error":\{"message":"[^"]*","type":"api_error","param":null,"code":"upstream_failed"[^\n]*\n\n$/,
    );
    assert.doesNotMatch(bulkText, /UPSTREAM-SECRET/);

    const half = await chat('answer-raw=content-line-then-end', { stream: true }, {}, 'recorded');
    await assertError(half, 502, 'upstream_failed');
    r = await record(gidOf(half));
    assert.deepEqual(
      [r.outcome, r.status_code, r.time_to_first_content_ms],
      ['error', 502, null],
      'no content reached the client',
    );

    const ping = await chat('answer-raw=comment-then-error', { stream: true }, {}, 'recorded');
    await ping.text();
    r = await record(gidOf(ping));
    assert.equal(r.outcome, 'error');
    assert.deepEqual(
      [r.usage.completion_tokens, r.usage.completion_source],
      [null, 'unknown'],
      'a comment is no fragment: unknown work, not 0',
    );
  });

  it('an event written over several data lines is read as one; a last event the engine left unclosed still ends the answer', async () => {
    const res = await chat('answer-raw=multiline-ok', { stream: true }, {}, 'recorded');
    assert.match(await res.text(), /data: \[DONE\]\n\n$/);
    const r = await record(gidOf(res));
    assert.deepEqual(
      [r.outcome, r.finish_reason, r.usage.completion_tokens, r.usage.completion_source],
      ['success', 'stop', 2, 'estimated'],
    );
    const un = await chat('answer-raw=unterminated-done', { stream: true }, {}, 'recorded');
    assert.match(await un.text(), /"content":"hi "[\s\S]*data: \[DONE\]$/);
    assert.deepEqual(
      [(await record(gidOf(un))).outcome, (await record(gidOf(un))).usage.completion_tokens],
      ['success', 1],
    );
    // An unclosed last event that is not [DONE]: not relayed; the stream fails cleanly (the
    // error event on lines of its own), or with nothing relayed, the plain 502.
    const half = await chat('answer-raw=unterminated-content', { stream: true }, {}, 'recorded');
    const halfText = await half.text();
    assert.match(
      halfText,
      /"content":"hi "\}[\s\S]*\n\nevent: error\ndata: \{"error":\{"message":"[^"]*","type":"api_error","param":null,"code":"upstream_failed"[^\n]*\n\n$/,
    );
    assert.doesNotMatch(halfText, /UPSTREAM-SECRET/);
    const halfRec = await record(gidOf(half));
    assert.equal(halfRec.outcome, 'error');
    assert.equal(halfRec.usage.completion_tokens, 1, 'the unclosed event that was not relayed is not counted');
    const only = await chat('answer-raw=only-unterminated', { stream: true }, {}, 'recorded');
    assert.doesNotMatch(await assertError(only, 502, 'upstream_failed'), /UPSTREAM-SECRET/);
    // `[DONE]` whose closing CRLF is split between two reads: the answer ends at its CR at
    // once, with the LF the client would otherwise never get (CRLF, as the engine framed it).
    const t0 = performance.now();
    const split = await chat('answer-raw=crlf-split-done', { stream: true }, {}, 'recorded');
    assert.match(await split.text(), /"content":"hi "[\s\S]*\r\n\r\ndata: \[DONE\]\r\n\r\n$/);
    assert.ok(performance.now() - t0 < 280, "ended at the CR, not after the engine's pause");
    assert.equal((await record(gidOf(split))).outcome, 'success');
    // What an engine sends after [DONE] is neither read nor relayed.
    const late = await chat('answer-raw=error-after-done', { stream: true }, {}, 'recorded');
    const lateText = await late.text();
    assert.match(lateText, /data: \[DONE\]\n\n$/);
    assert.doesNotMatch(lateText, /UPSTREAM-SECRET|event: error/);
    assert.equal((await record(gidOf(late))).outcome, 'success');
  });

  it("[DONE] ends the client's answer and records it at once though the engine keeps its stream open; the engine is cut after a grace", async () => {
    const t0 = performance.now();
    const res = await chat('answer-raw=done-stall', { stream: true }, {}, 'recorded');
    const text = await res.text();
    assert.ok(performance.now() - t0 < 800, 'ended at [DONE], not when the engine closes (10 s)');
    assert.match(text, /data: \[DONE\]\n\n$/);
    // Recorded when the answer ended, not when the engine is cut: a lookup right away finds it.
    const found = await record(gidOf(res));
    assert.deepEqual([found.outcome, found.status_code, found.usage.completion_tokens], ['success', 200, 1]);
    assert.ok(found.upstream_duration_ms! < 800 && found.latency_ms! < 800, 'the answer was complete at [DONE]');
    // The engine's open stream is cut after the grace (1 s), not held for its 10 s.
    await eventually(() => rec.closedStreams.includes('done-stall'), 3000, 50);
    // An engine that sends more after [DONE] (more than a stream buffer holds), then ends its
    // stream within the grace, is read to its end, not cut (its connection stays usable).
    const more = await chat('answer-raw=done-then-more', { stream: true }, {}, 'recorded');
    assert.match(await more.text(), /data: \[DONE\]\n\n$/);
    await new Promise((r) => setTimeout(r, 1_500));
    assert.equal(rec.closedStreams.includes('done-then-more'), false, 'drained to its end, not cut');
  });

  it('answers that cannot be read before they are relayed are upstream failures, never passed on: compressed, not JSON, empty, not an object', async () => {
    for (const [name, stream] of [
      ['gzip-whole', false],
      ['gzip-stream', true],
      ['plain-text-200', false],
      ['plain-text-200', true],
      ['empty-200', false],
      ['json-array-200', false],
    ] as const) {
      const res = await chat(`answer-raw=${name}`, stream ? { stream: true } : {}, {}, 'recorded');
      const text = await assertError(res, 502, 'upstream_failed');
      assert.doesNotMatch(text, /UPSTREAM-SECRET/, name);
      assert.equal(res.headers.get('content-encoding'), null, name);
      const r = await record(gidOf(res));
      assert.deepEqual([r.outcome, r.status_code], ['error', 502], `${name} stream=${stream}`);
    }
  });

  it("a reasoning model's thinking counts as output: first content time and the estimate include reasoning fragments", async () => {
    const res = await chat('sim:reasoning=6 sim:tokens=2 sim:token_delay_ms=40 sim:ttft_ms=0', { stream: true });
    const id = gidOf(res);
    await res.text();
    const r = await record(id);
    assert.equal(r.outcome, 'success');
    assert.deepEqual([r.usage.completion_tokens, r.usage.completion_source], [8, 'estimated']);
    // Thinking began at once; the answer's words came ~240 ms later.
    assert.ok(
      r.time_to_first_content_ms !== null && r.latency_ms !== null && r.time_to_first_content_ms < r.latency_ms / 2,
      JSON.stringify(r),
    );

    // Cut off while still thinking: what was observed is counted, not zero.
    const ac = new AbortController();
    const cut = await post(
      '/v1/chat/completions',
      { model: 'chat', messages: user('sim:reasoning=50 sim:tokens=2 sim:token_delay_ms=20'), stream: true },
      {},
      ac.signal,
    );
    const cutId = gidOf(cut);
    await readEvents(cut, 5);
    ac.abort();
    const c = await eventually(async () => {
      const got = await e.h.lookup(cutId);
      return got.status === 200 ? (got.body.request as TerminalRecord) : undefined;
    });
    assert.equal(c.outcome, 'disconnected');
    assert.equal(c.usage.completion_source, 'estimated');
    assert.ok((c.usage.completion_tokens ?? 0) >= 3, JSON.stringify(c.usage));
  });

  it('a client that leaves before any byte was relayed: status 0 and completion unknown, not 200 and 0 estimated', async () => {
    const ac = new AbortController();
    // No byte (not even the status line) reaches the client before the first token: the
    // request is found by the caller's own id.
    const id = `leave-early-${Date.now()}`;
    const pending = post(
      '/v1/chat/completions',
      { model: 'chat', messages: user('sim:ttft_ms=3000'), stream: true },
      { 'x-request-id': id },
      ac.signal,
    );
    await new Promise((r) => setTimeout(r, 300));
    ac.abort();
    await assert.rejects(pending);
    const r = await eventually(async () => {
      const got = await e.h.lookup(id);
      return got.status === 200 ? (got.body.request as TerminalRecord) : undefined;
    });
    assert.equal(r.outcome, 'disconnected');
    assert.equal(r.status_code, 0);
    assert.deepEqual([r.usage.completion_tokens, r.usage.completion_source], [null, 'unknown']);
  });

  it('upstream 503: the client gets a 502 problem without the engine detail; record error', async () => {
    for (const stream of [false, true]) {
      const res = await chat('sim:status=503', { stream });
      const id = gidOf(res);
      const text = await assertError(res, 502, 'upstream_failed');
      assert.doesNotMatch(text, /UPSTREAM-SECRET-DETAIL|worker|srv/);
      const r = await record(id);
      assert.equal(r.outcome, 'error');
      assert.equal(r.status_code, 502);
      assert.doesNotMatch(JSON.stringify(r), /UPSTREAM-SECRET-DETAIL/);
    }
    const n = errors.length;
    await assert.rejects(
      client.chat.completions.create({ model: 'chat', messages: user('sim:status=500') }),
      (e: unknown) => e instanceof OpenAI.InternalServerError && e.status === 502,
    );
    assert.doesNotMatch(await errors[n]!.text(), /UPSTREAM-SECRET-DETAIL/);

    // The engine's own 429 is relayed as the router's 429 (rejected, not an upstream failure),
    // and its diagnosis says the engine refused it, not the router's admission.
    const busy = await chat('sim:status=429');
    const busyId = gidOf(busy);
    await assertError(busy, 429, 'rate_limited');
    const busyRecord = await record(busyId);
    assert.deepEqual([busyRecord.outcome, busyRecord.status_code], ['rejected', 429]);
    assert.equal(typeof busyRecord.upstream_duration_ms, 'number');
    assert.deepEqual(
      interpret(terminalEvidence(busyRecord)).filter((c) => c.endsWith('rejected') || c.endsWith('limited')),
      ['upstream_rate_limited'],
    );
  });

  it('an upstream that fails its readiness check: 502 problem (an upstream failure on an inference route), record rejected, nothing dispatched', async () => {
    const res = await chat('hello', {}, {}, 'down');
    const id = gidOf(res);
    await assertError(res, 502, 'upstream_failed');
    const r = await record(id);
    assert.equal(r.outcome, 'rejected');
    assert.equal(r.status_code, 502);
    assert.equal(typeof r.readiness_check_ms, 'number');
    assert.equal(r.upstream_duration_ms, null);
    assert.equal(r.finish_reason, null);
    assert.deepEqual([r.usage.completion_tokens, r.usage.completion_source], [null, 'unknown']);
  });

  it('client abort mid-stream: record disconnected and the upstream request is closed within a second', async () => {
    const aborted0 = inproc.stats().aborted;
    const ac = new AbortController();
    const res = await post(
      '/v1/chat/completions',
      { model: 'inproc', messages: user('sim:tokens=200 sim:token_delay_ms=50'), stream: true },
      {},
      ac.signal,
    );
    const id = gidOf(res);
    const { text } = await readEvents(res, 2);
    assert.match(text, /"content":"tok "/);
    const t = Date.now();
    ac.abort();
    await eventually(() => inproc.stats().aborted === aborted0 + 1, 1000, 10);
    assert.ok(Date.now() - t <= 1000);
    await eventually(() => inproc.stats().open === 0, 1000, 10);
    const r = await eventually(async () => ((await h.lookup(id)).status === 200 ? record(id) : undefined), 2000, 20);
    assert.equal(r.outcome, 'disconnected');
    assert.equal(r.finish_reason, 'cancelled');
    assert.equal(r.usage.completion_source, 'estimated');
    assert.ok(r.usage.completion_tokens! >= 1 && r.usage.completion_tokens! < 200);
  });

  it('upstream timeout: 504 problem and outcome timeout (buffered, or a stream with nothing relayed yet), SSE timeout event (a stream under way)', async () => {
    const t = Date.now();
    const n = errors.length;
    const err = await client.chat.completions
      .create({ model: 'timeout-model', messages: user('sim:ttft_ms=2000') })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    assert.ok(err instanceof OpenAI.InternalServerError, String(err));
    assert.equal(err.status, 504);
    assert.ok(Date.now() - t < 1800, 'answered at the deadline, not after the engine');
    await assertError(errors[n]!, 504, 'upstream_timeout');
    let r = await record(gidOf({ headers: err.headers! }));
    assert.equal(r.outcome, 'timeout');
    assert.equal(r.status_code, 504);
    assert.ok(r.upstream_duration_ms! >= 250 && r.upstream_duration_ms! < 1800, String(r.upstream_duration_ms));

    // A stream whose engine said nothing before the deadline: the client was sent nothing yet,
    // so it gets the same plain 504 problem (an SDK sees a status, not a broken stream).
    const silent = await chat('sim:ttft_ms=2000', { stream: true }, {}, 'timeout-model');
    const silentId = gidOf(silent);
    await assertError(silent, 504, 'upstream_timeout');
    r = await record(silentId);
    assert.equal(r.outcome, 'timeout');
    assert.equal(r.status_code, 504);
    assert.equal(r.finish_reason, 'error');

    // Tokens were flowing when the deadline passed: the stream ends with the router's fixed
    // timeout event, never [DONE], and the record keeps the stream's status.
    const res = await chat('sim:ttft_ms=0 sim:token_delay_ms=100 sim:tokens=50', { stream: true }, {}, 'timeout-model');
    const id = gidOf(res);
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.match(text, /^data: \{/m, 'the first tokens were relayed');
    assert.match(
      text,
      /^event: error\ndata: \{"error":\{"message":"[^"]*","type":"api_error","param":null,"code":"upstream_timeout"/m,
    );
    assert.doesNotMatch(text, /\[DONE\]/);
    r = await record(id);
    assert.equal(r.outcome, 'timeout');
    assert.equal(r.status_code, 200);
  });

  it('an engine gone between the readiness check and the dispatch: 502, and the record says it was never reached', async () => {
    const ok = await chat('before', {}, {}, 'flaky'); // readiness now cached as ready
    assert.equal(ok.status, 200);
    await ok.text();
    await e.flaky.close();
    const res = await chat('after the engine went away', {}, {}, 'flaky');
    const id = gidOf(res);
    await assertError(res, 502, 'upstream_failed');
    const r = await record(id);
    assert.equal(r.outcome, 'error');
    assert.equal(r.status_code, 502);
    assert.equal(r.upstream_duration_ms, null, 'no upstream time: no connection was made');
    assert.equal(r.finish_reason, null, "not the engine's error: it never saw the request");
    assert.equal(r.usage.prompt_source, 'unknown', 'no prompt went to the engine');
    assert.equal(r.usage.prompt_tokens, null);
  });

  it('a streaming client that stops reading is cut at the upstream deadline (outcome timeout), freeing its slot', async () => {
    const url = new URL(h.routerUrl);
    const body = JSON.stringify({
      model: 'stall',
      stream: true,
      messages: user('sim:tokens=100000 sim:token_delay_ms=0'),
    });
    const sock = connect(Number(url.port), url.hostname);
    sock.on('error', () => undefined);
    sock.pause(); // never reads a byte
    sock.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${h.key}\r\nContent-Type: application/json\r\nX-Request-Id: stalled-reader-1\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    try {
      const t0 = Date.now();
      const r = await eventually(
        async () => {
          const res = await h.get('/v1/requests/stalled-reader-1');
          return res.status === 200 ? ((await res.json()) as { request: TerminalRecord }).request : undefined;
        },
        8_000,
        100,
      );
      assert.ok(Date.now() - t0 < 6_000, 'ended at the deadline, not when the client leaves');
      assert.equal(r.outcome, 'timeout');
      assert.equal(r.finish_reason, 'error');
      // The alias (one slot, no queue) takes the next request.
      const next = await chat('after', {}, {}, 'stall');
      assert.equal(next.status, 200);
      await next.text();
    } finally {
      sock.destroy();
    }
  });

  it('admission: a full alias refuses with 429 (record rejected); a queued request records its wait', async () => {
    const first = chat('sim:ttft_ms=600', {}, {}, 'single');
    await eventually(
      async () =>
        (
          (await (await h.get('/v1/requests?active=1')).json()) as { requests: { model: string; phase: string }[] }
        ).requests.some((a) => a.model === 'single' && a.phase === 'dispatched'),
      2000,
      10,
    );
    const second = await chat('quick', {}, {}, 'single');
    const id2 = gidOf(second);
    await assertError(second, 429, 'rate_limited');
    const r2 = await record(id2);
    assert.equal(r2.outcome, 'rejected');
    assert.equal(r2.status_code, 429);
    assert.equal(r2.upstream_duration_ms, null, 'nothing was sent');
    assert.ok(interpret(terminalEvidence(r2)).includes('admission_rejected'));
    const firstRes = await first;
    assert.equal(firstRes.status, 200);
    assert.equal((await record(gidOf(firstRes))).outcome, 'success');
    await firstRes.text();

    const a = chat('sim:ttft_ms=500', {}, {}, 'queued');
    await eventually(
      async () =>
        (
          (await (await h.get('/v1/requests?active=1')).json()) as { requests: { model: string; phase: string }[] }
        ).requests.some((x) => x.model === 'queued' && x.phase === 'dispatched'),
      2000,
      10,
    );
    const b = chat('quick', {}, {}, 'queued');
    await eventually(
      async () =>
        (
          (await (await h.get('/v1/requests?active=1')).json()) as { requests: { model: string; phase: string }[] }
        ).requests.filter((x) => x.model === 'queued').length === 2,
      2000,
      10,
    );
    const c = await chat('quick', {}, {}, 'queued');
    await assertError(c, 429, 'rate_limited');
    const [ra, rb] = await Promise.all([a, b]);
    assert.equal(ra.status, 200);
    assert.equal(rb.status, 200);
    const recA = await record(gidOf(ra));
    const recB = await record(gidOf(rb));
    assert.ok(recA.admission_wait_ms! < 100, `first waited ${recA.admission_wait_ms}`);
    assert.ok(recB.admission_wait_ms! >= 200, `queued waited ${recB.admission_wait_ms}`);
    assert.ok(recB.admission_wait_ms! <= recB.latency_ms!);
    await Promise.all([ra.text(), rb.text()]);

    // A queued client that leaves is recorded as disconnected and takes no slot with it.
    type Active = { requests: { request_id: string; model: string; phase: string }[] };
    const activeQueued = async () =>
      ((await (await h.get('/v1/requests?active=1')).json()) as Active).requests.filter((x) => x.model === 'queued');
    const holder = chat('sim:ttft_ms=400', {}, {}, 'queued');
    await eventually(async () => (await activeQueued()).some((x) => x.phase === 'dispatched'), 2000, 10);
    const ac = new AbortController();
    const leaving = post('/v1/chat/completions', { model: 'queued', messages: user('leaving') }, {}, ac.signal).catch(
      () => undefined,
    );
    const waiting = await eventually(
      async () => (await activeQueued()).find((x) => x.phase === 'admitted' || x.phase === 'checking'),
      2000,
      10,
    );
    ac.abort();
    await leaving;
    const left = await eventually(
      async () => ((await h.lookup(waiting.request_id)).status === 200 ? record(waiting.request_id) : undefined),
      2000,
      20,
    );
    assert.equal(left.outcome, 'disconnected');
    assert.equal(left.status_code, 0, 'nothing was sent to it');
    assert.equal((await holder).status, 200);
    const after = await chat('after', {}, {}, 'queued');
    assert.equal(after.status, 200);
    assert.ok((await record(gidOf(after))).admission_wait_ms! < 100, 'the slot was not leaked');
    await after.text();
  });
});
