/**
 * The Responses API through the router: `POST /v1/responses` (buffered and streamed) and
 * `GET /v1/models/{model}`, with the official OpenAI SDK against the real router and a real
 * engine sim process, plus a fixed upstream that checks the stream's bytes pass unchanged.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { checkTerminalRecord, type TerminalRecord } from '../../src/schema/terminal-record.js';
import { interpret, terminalEvidence } from '../../src/schema/diagnosis.js';
import { GID } from '../support/router-e2e.js';
import { startRouterHarness, type RouterHarness } from '../support/router-harness.js';
import { eventually } from '../support/processes.js';
import { runCli } from '../cli/run-cli.js';

const T = { timeout: 120_000 };
/** The `resp` alias's output ceiling (`max_output_tokens`). */
const CEIL = 16;

/** A Responses stream as an engine writes it, byte for byte (CRLF in one event, a comment, an id line). */
const FIXED_STREAM =
  'event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null}}\n\n' +
  ': keep-alive\n\n' +
  'event: response.output_text.delta\r\nid: 7\r\ndata: {"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"h\\u00e9llo"}\r\n\r\n' +
  'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" w\u00f6rld"}\n\n' +
  'event: response.completed\ndata: {"type":"response.completed","sequence_number":3,"response":{"id":"resp_1","object":"response","status":"incomplete","incomplete_details":{"reason":"content_filter"},"output":[],"usage":{"input_tokens":11,"output_tokens":2,"total_tokens":13}}}\n\n';

/** A Responses stream that turns to garbage (an engine's traceback as data) after two deltas. */
const GARBAGE_STREAM =
  FIXED_STREAM.split('event: response.completed')[0]! + 'data: Traceback UPSTREAM-SECRET-DETAIL\n\n';

describe('router end to end: the Responses API and one model (real processes, OpenAI SDK client)', T, () => {
  let h: RouterHarness;
  let client: OpenAI;
  // An engine whose stream turns to garbage after some events, then stays open.
  const garbage = createServer((req, res) => {
    if (req.url === '/health') return void res.writeHead(200).end();
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(GARBAGE_STREAM);
    });
  });
  // An engine whose stream is fixed bytes (in two writes, split inside an event).
  const fixed = createServer((req, res) => {
    if (req.url === '/health') return void res.writeHead(200).end();
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const bytes = Buffer.from(FIXED_STREAM);
      res.write(bytes.subarray(0, 300));
      setTimeout(() => res.end(bytes.subarray(300)), 20);
    });
  });
  before(async () => {
    await new Promise<void>((r) => fixed.listen(0, '127.0.0.1', r));
    await new Promise<void>((r) => garbage.listen(0, '127.0.0.1', r));
    h = await startRouterHarness({
      models: [
        { alias: 'resp', max_output_tokens: CEIL },
        { alias: 'org/resp', max_output_tokens: CEIL },
        { alias: 'fixed', upstream: `http://127.0.0.1:${(fixed.address() as AddressInfo).port}/v1` },
        { alias: 'garbage', upstream: `http://127.0.0.1:${(garbage.address() as AddressInfo).port}/v1` },
      ],
    });
    client = h.client();
  });
  after(async () => {
    await h?.stop();
    for (const s of [fixed, garbage]) {
      s.closeAllConnections();
      s.close();
    }
  });

  const record = async (id: string): Promise<TerminalRecord> => {
    const r = await eventually(
      async () => {
        const got = await h.lookup(id);
        return got.status === 200 ? got : undefined;
      },
      3000,
      20,
    );
    assert.ok(checkTerminalRecord.Check(r.body.request), 'a valid terminal record');
    return r.body.request as TerminalRecord;
  };
  const gidOf = (res: { headers: Headers }): string => {
    const id = res.headers.get('x-svc-request-id');
    assert.match(id ?? '', GID);
    return id!;
  };

  it('non-streaming: the SDK gets the text and usage; the record has route responses, stop, upstream usage, first content and the output limit', async () => {
    const { data, response } = await client.responses
      .create({ model: 'resp', input: 'hello there', instructions: 'be brief' })
      .withResponse();
    assert.equal(data.output_text, 'tok tok tok tok ');
    assert.equal(data.status, 'completed');
    // The engine got the alias's ceiling, added by the router (the request named no limit).
    assert.equal(data.max_output_tokens, CEIL);
    assert.equal(data.usage?.output_tokens, 4);
    const r = await record(gidOf(response));
    assert.equal(r.model, 'resp');
    assert.equal(r.route, 'responses');
    assert.equal(r.outcome, 'success');
    assert.equal(r.status_code, 200);
    assert.equal(r.finish_reason, 'stop');
    assert.deepEqual(r.usage, {
      prompt_tokens: data.usage!.input_tokens,
      completion_tokens: 4,
      prompt_source: 'upstream',
      completion_source: 'upstream',
    });
    for (const k of [
      'readiness_check_ms',
      'admission_wait_ms',
      'upstream_duration_ms',
      'time_to_first_content_ms',
    ] as const) {
      assert.equal(typeof r[k], 'number', k);
      assert.ok(r[k]! <= r.latency_ms!, `${k} within the latency`);
    }
    assert.deepEqual(r.output_limit, { requested: null, effective: CEIL, clamped: false });
    // Canary: the input and instructions reach the engine only, never a record, the log or the router's output.
    const canary = `PROMPT-CANARY-${Date.now()}`;
    const echoed = await client.responses
      .create({ model: 'resp', input: [{ role: 'user', content: canary }], instructions: `${canary}-i` })
      .withResponse();
    assert.equal(echoed.data.instructions, `${canary}-i`, 'the answer reaches the client unchanged');
    await record(gidOf(echoed.response));
    assert.ok(h.decisions().length > 0);
    assert.doesNotMatch(JSON.stringify(h.decisions()), /PROMPT-CANARY/);
    assert.doesNotMatch(JSON.stringify((await h.lookup(gidOf(echoed.response))).body), /PROMPT-CANARY/);
    assert.doesNotMatch(h.routerOutput(), /PROMPT-CANARY/);
  });

  it('streaming: the SDK yields every event in order up to response.completed; first content is the first text delta', async () => {
    const { data: stream, response } = await client.responses
      .create({ model: 'resp', input: 'stream me sim:tokens=5 sim:ttft_ms=250', stream: true })
      .withResponse();
    const types: string[] = [];
    let text = '';
    let final: OpenAI.Responses.Response | undefined;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'response.completed') final = ev.response;
    }
    assert.deepEqual(types, [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...Array<string>(5).fill('response.output_text.delta'),
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    assert.equal(text, 'tok '.repeat(5));
    assert.equal(final?.status, 'completed');
    const r = await record(gidOf(response));
    assert.equal(r.route, 'responses');
    assert.equal(r.outcome, 'success');
    assert.equal(r.finish_reason, 'stop');
    assert.deepEqual(r.usage, {
      prompt_tokens: final!.usage!.input_tokens,
      completion_tokens: 5,
      prompt_source: 'upstream',
      completion_source: 'upstream',
    });
    // response.created came at once; the first text delta only after the engine's 250 ms.
    assert.ok(r.time_to_first_content_ms! >= 250, `first content at ${r.time_to_first_content_ms} ms`);
    assert.ok(r.time_to_first_content_ms! <= r.latency_ms!);
  });

  it('max_output_tokens above the alias ceiling is clamped (the engine gets the ceiling); an answer cut at its limit is finish length', async () => {
    for (const stream of [false, true]) {
      const { data, response } = await client.responses
        .create({ model: 'resp', input: 'sim:tokens=40', max_output_tokens: 100, stream })
        .withResponse();
      let res: OpenAI.Responses.Response | undefined;
      if (stream) {
        for await (const ev of data as AsyncIterable<OpenAI.Responses.ResponseStreamEvent>)
          if (ev.type === 'response.completed') res = ev.response;
      } else res = data as OpenAI.Responses.Response;
      assert.equal(res?.max_output_tokens, CEIL, 'what the engine received');
      assert.equal(res?.usage?.output_tokens, CEIL);
      assert.equal(res?.status, 'incomplete');
      assert.equal(res?.incomplete_details?.reason, 'max_output_tokens');
      const r = await record(gidOf(response));
      assert.deepEqual(r.output_limit, { requested: 100, effective: CEIL, clamped: true }, `stream ${stream}`);
      assert.equal(r.finish_reason, 'length');
      assert.equal(r.outcome, 'success');
      assert.ok(interpret(terminalEvidence(r)).includes('output_clamped'));
    }
    // Under the ceiling: kept as sent, and still a length finish when the answer is longer.
    const small = await client.responses
      .create({ model: 'resp', input: 'sim:tokens=40', max_output_tokens: 3 })
      .withResponse();
    assert.equal(small.data.output_text, 'tok tok tok ');
    const r = await record(gidOf(small.response));
    assert.deepEqual(r.output_limit, { requested: 3, effective: 3, clamped: false });
    assert.equal(r.finish_reason, 'length');
    // `router diagnose` reads it like a chat request's length finish.
    const cli = await runCli(
      ['router', 'diagnose', r.request_id, '--json', '--router-url', h.routerUrl, '--auth-env', 'DIAG_KEY'],
      {
        DIAG_KEY: h.key,
      },
    );
    assert.equal(cli.code, 0, cli.stderr);
    const e = JSON.parse(cli.stdout) as { request: TerminalRecord; interpretation: string[] };
    assert.equal(e.request.route, 'responses');
    assert.ok(e.interpretation.includes('length_finish'), e.interpretation.join());
  });

  it('a malformed max_output_tokens is refused before the engine; a function call is finish tool_calls; content_filter and odd reasons are normalized', async () => {
    const bad = await fetch(`${h.routerUrl}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'resp', input: 'x', max_output_tokens: -1 }),
    });
    assert.equal(bad.status, 400);
    gidOf(bad);
    const tool = await client.responses
      .create({
        model: 'resp',
        input: 'sim:finish=tool_calls',
        tools: [{ type: 'function', name: 'lookup', parameters: {}, strict: false }],
      })
      .withResponse();
    assert.equal(tool.data.output[0]?.type, 'function_call');
    let r = await record(gidOf(tool.response));
    assert.equal(r.finish_reason, 'tool_calls');
    // Tool-only output has no first content (as on chat).
    assert.equal(r.time_to_first_content_ms, null);
    for (const [word, finish] of [
      ['content_filter', 'content_filter'],
      ['some_new_reason', 'unknown'],
      ['cancelled', 'cancelled'],
    ] as const) {
      const { data, response } = await client.responses
        .create({ model: 'resp', input: `sim:finish=${word}`, stream: true })
        .withResponse();
      for await (const _ of data) {
        // read to the end
      }
      r = await record(gidOf(response));
      assert.equal(r.finish_reason, finish, word);
    }
  });

  it('without the engine usage, usage is estimated: prompt from the input, completion from the deltas or the text', async () => {
    const input = 'count me please sim:usage=off';
    const buffered = await client.responses.create({ model: 'resp', input }).withResponse();
    assert.equal(buffered.data.usage, null);
    let r = await record(gidOf(buffered.response));
    assert.deepEqual(r.usage, {
      prompt_tokens: Math.ceil(input.length / 4),
      completion_tokens: Math.ceil('tok tok tok tok '.length / 4),
      prompt_source: 'estimated',
      completion_source: 'estimated',
    });
    const streamed = await client.responses
      .create({ model: 'resp', input: [{ role: 'user', content: `${input} sim:tokens=7` }], stream: true })
      .withResponse();
    for await (const _ of streamed.data) {
      // read to the end
    }
    r = await record(gidOf(streamed.response));
    assert.equal(r.usage.completion_tokens, 7, 'one per text delta');
    assert.equal(r.usage.completion_source, 'estimated');
    assert.equal(r.usage.prompt_source, 'estimated');
  });

  it("an engine failure is an error record, and its text never reaches the client; the stream ends with OpenAI's Responses error event", async () => {
    const streamed = await fetch(`${h.routerUrl}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'resp', input: 'sim:tokens=6 sim:error_after=2', stream: true }),
    });
    const text = await streamed.text();
    assert.equal(streamed.status, 200);
    assert.equal((text.match(/^event: response\.output_text\.delta$/gm) ?? []).length, 2);
    // created, in_progress, output_item.added, content_part.added and two deltas (0-5) were
    // relayed; the engine's own error event (6) was not: the router's takes its number.
    const last = /event: error\ndata: (.*)\n\n$/.exec(text);
    assert.ok(last, text);
    assert.deepEqual(JSON.parse(last[1]!), {
      type: 'error',
      code: 'upstream_failed',
      message: "The model's engine failed or could not be reached",
      param: null,
      sequence_number: 6,
    });
    assert.equal((text.match(/^event: error$/gm) ?? []).length, 1);
    assert.doesNotMatch(text, /UPSTREAM-SECRET|server_error/);
    let r = await record(gidOf(streamed));
    assert.equal(r.outcome, 'error');
    assert.equal(r.finish_reason, 'error');
    // Buffered: the engine's `failed` Response is the router's 502.
    const buffered = await fetch(`${h.routerUrl}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'resp', input: 'sim:error_after=1' }),
    });
    assert.equal(buffered.status, 502);
    assert.doesNotMatch(await buffered.text(), /UPSTREAM-SECRET/);
    r = await record(gidOf(buffered));
    assert.equal(r.outcome, 'error');
    assert.equal(r.finish_reason, 'error');
    assert.doesNotMatch(h.routerOutput(), /UPSTREAM-SECRET/);
  });

  it('through the SDK, a mid-stream failure (engine error, engine gone, garbage) is an `error` event the iteration yields last, and the stream helper rejects with it', async () => {
    for (const [input, model] of [
      ['sim:tokens=6 sim:error_after=2', 'resp'],
      ['sim:tokens=6 sim:fail_after=2', 'resp'],
      ['x', 'garbage'],
    ] as const) {
      const { data: stream, response } = await client.responses.create({ model, input, stream: true }).withResponse();
      const seen: OpenAI.Responses.ResponseStreamEvent[] = [];
      // The SDK does not throw: it yields the error event as it yields OpenAI's own.
      for await (const ev of stream) seen.push(ev);
      const last = seen.at(-1)!;
      assert.equal(last.type, 'error', `${model} ${input}`);
      assert.ok(last.type === 'error');
      assert.equal(last.code, 'upstream_failed');
      assert.equal(last.message, "The model's engine failed or could not be reached");
      assert.equal(last.param, null);
      assert.equal(last.sequence_number, seen.at(-2)!.sequence_number + 1, 'numbered after the last event relayed');
      assert.equal(seen.filter((e) => e.type === 'error').length, 1);
      assert.ok(
        seen.some((e) => e.type === 'response.output_text.delta'),
        'what came before it was relayed',
      );
      assert.doesNotMatch(JSON.stringify(seen), /UPSTREAM-SECRET|Traceback/);
      const r = await record(gidOf(response));
      assert.equal(r.outcome, 'error');
      assert.equal(r.finish_reason, 'error');
    }
    // The SDK's stream helper ends with that event as its error.
    const helper = client.responses.stream({ model: 'resp', input: 'sim:tokens=6 sim:error_after=2' });
    await assert.rejects(helper.finalResponse(), (err: unknown) => {
      assert.equal((err as { type?: unknown }).type, 'error');
      assert.equal((err as { code?: unknown }).code, 'upstream_failed');
      return true;
    });
    // A chat stream keeps its own error shape (the error object OpenAI's chat streams carry),
    // which the SDK throws as an APIError.
    const chat = await client.chat.completions.create({
      model: 'resp',
      messages: [{ role: 'user', content: 'sim:tokens=6 sim:error_after=2' }],
      stream: true,
    });
    await assert.rejects(async () => {
      for await (const _ of chat) {
        // read until it throws
      }
    }, OpenAI.APIError);
  });

  it('background: the engine only accepted the request (queued): the record is a success with no finish and an unknown completion, not 0', async () => {
    const input = 'later please sim:tokens=3 sim:ttft_ms=300';
    const { data, response } = await client.responses.create({ model: 'resp', input, background: true }).withResponse();
    assert.equal(data.status, 'queued');
    assert.equal(data.background, true);
    const r = await record(gidOf(response));
    assert.equal(r.route, 'responses');
    assert.equal(r.outcome, 'success');
    assert.equal(r.status_code, 200);
    assert.equal(r.finish_reason, null);
    assert.deepEqual(r.usage, {
      // The engine was handed the prompt (estimated, as for any request dispatched); its output is still to come.
      prompt_tokens: Math.ceil(input.length / 4),
      completion_tokens: null,
      prompt_source: 'estimated',
      completion_source: 'unknown',
    });
    assert.equal(r.time_to_first_content_ms, null);
    assert.equal(typeof r.upstream_duration_ms, 'number');
    assert.deepEqual(interpret(terminalEvidence(r)), ['usage_estimated', 'usage_unknown']);
  });

  it('the stream passes byte for byte, CRLF, comments and id lines included; the record reads its terminal event', async () => {
    const res = await fetch(`${h.routerUrl}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'fixed', input: 'x', stream: true }),
    });
    assert.equal(res.status, 200);
    assert.deepEqual(Buffer.from(await res.arrayBuffer()), Buffer.from(FIXED_STREAM));
    const r = await record(gidOf(res));
    assert.equal(r.outcome, 'success');
    assert.equal(r.finish_reason, 'content_filter');
    assert.deepEqual(r.usage, {
      prompt_tokens: 11,
      completion_tokens: 2,
      prompt_source: 'upstream',
      completion_source: 'upstream',
    });
    assert.equal(typeof r.time_to_first_content_ms, 'number');
  });

  it('GET /v1/models/{model}: the alias as an OpenAI model object (a / in it too); an unknown one is 404 with the request refused', async () => {
    const m = await client.models.retrieve('resp');
    assert.equal(m.id, 'resp');
    assert.equal(m.object, 'model');
    assert.equal(typeof m.created, 'number');
    assert.equal((await client.models.retrieve('org/resp')).id, 'org/resp');
    await assert.rejects(client.models.retrieve('no-such-model'), OpenAI.NotFoundError);
    // The engine's model name is not an alias: not found either.
    await assert.rejects(client.models.retrieve(h.simModel), OpenAI.NotFoundError);
    assert.equal((await h.get('/v1/models/resp', null)).status, 401);
    assert.equal((await h.get('/v1/models/resp?x=1')).status, 400);
    // An inference request naming no alias is 404 too, through the SDK.
    await assert.rejects(client.responses.create({ model: 'no-such-model', input: 'x' }), OpenAI.NotFoundError);
  });
});
