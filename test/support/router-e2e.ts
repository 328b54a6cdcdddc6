/**
 * The router end-to-end setup shared by test/e2e/router*.test.ts: the engine sim and the router
 * as real processes (plus a recording upstream and an in-process sim), the official OpenAI
 * SDK as client, and helpers that assert on what a user sees. Call useRouterE2E() at the top
 * of a describe: it registers the before/after hooks.
 */
import { after, before } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import type OpenAI from 'openai';
import { pino } from 'pino';
import { checkTerminalRecord, type TerminalRecord } from '../../src/schema/terminal-record.js';
import { openAiType } from '../../src/errors.js';
import { startEngineSim, type EngineSim } from '../../src/engine-sim/engine-sim.js';
import { startRecordingUpstream, type RecordingUpstream } from './recording-upstream.js';
import { startRouterHarness, type RouterHarness } from './router-harness.js';

export const GID = /^req_[0-9a-f]{32}$/;
// One spelling from the raw relay and the Fastify routes alike.
export const PROBLEM = /^application\/problem\+json; charset=utf-8$/;
/** The data plane's error content type (OpenAI error objects). */
export const OPENAI_ERROR = /^application\/json(?:; charset=utf-8)?$/;
/** The `chat` alias's output ceiling (`max_output_tokens`). */
export const CEIL = 16;
export const MAX_BODY = 65_536;
export const UPSTREAM_KEY = `upstream-${randomBytes(12).toString('hex')}`;
export const user = (content: string) => [{ role: 'user' as const, content }];

export interface RouterE2E {
  h: RouterHarness;
  rec: RecordingUpstream;
  inproc: EngineSim;
  /** An engine that will write millions of tokens (for clients that stop reading). */
  big: EngineSim;
  /** An engine a test may stop (the `flaky` alias). */
  flaky: EngineSim;
  client: OpenAI;
  /** Error responses the SDK saw (clones, so their bodies can be read again). */
  readonly errors: Response[];
  post(path: string, body: unknown, headers?: Record<string, string>, signal?: AbortSignal): Promise<Response>;
  chat(
    content: string,
    extra?: Record<string, unknown>,
    headers?: Record<string, string>,
    model?: string,
  ): Promise<Response>;
  /** The terminal record of a request, by the id the router answered with. */
  record(id: string): Promise<TerminalRecord>;
  gidOf(res: { headers: Headers }): string;
  /** Asserts a control-plane problem (CONTRACT.md, HTTP) with this status and stable code; returns the body text. */
  assertProblem(res: Response, status: number, code: string): Promise<string>;
  /** Asserts a data-plane OpenAI error object (CONTRACT.md, HTTP) with this status and code; returns the body text. */
  assertError(res: Response, status: number, code: string): Promise<string>;
  /** Reads an SSE response until `n` data events arrived; returns the reader and what was read. */
  readEvents(res: Response, n: number): Promise<{ reader: ReadableStreamDefaultReader<Uint8Array>; text: string }>;
}

/** Registers the shared setup; the returned object's h, rec, inproc and client are set in before(). */
export function useRouterE2E(): RouterE2E {
  const e = { errors: [] as Response[] } as unknown as RouterE2E;
  const capture: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    if (res.status >= 400) e.errors.push(res.clone());
    return res;
  };
  e.post = (path, body, headers = {}, signal) =>
    fetch(`${e.h.routerUrl}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${e.h.key}`, 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
      signal: signal ?? AbortSignal.timeout(10_000),
    });
  e.chat = (content, extra = {}, headers = {}, model = 'chat') =>
    e.post('/v1/chat/completions', { model, messages: user(content), ...extra }, headers);
  e.record = async (id) => {
    const r = await e.h.lookup(id);
    assert.equal(r.status, 200, `lookup of ${id}`);
    assert.deepEqual(Object.keys(r.body), ['request']);
    assert.ok(checkTerminalRecord.Check(r.body.request), 'a valid terminal record');
    return r.body.request as TerminalRecord;
  };
  e.gidOf = (res) => {
    const id = res.headers.get('x-svc-request-id');
    assert.match(id ?? '', GID);
    return id!;
  };
  e.assertProblem = async (res, status, code) => {
    assert.equal(res.status, status);
    assert.match(res.headers.get('content-type') ?? '', PROBLEM);
    const text = await res.text();
    const body = JSON.parse(text) as Record<string, unknown>;
    assert.deepEqual(
      Object.keys(body)
        .filter((k) => k !== 'invalid_params')
        .sort(),
      ['code', 'status', 'title', 'type'],
    );
    assert.match(String(body['type']), /^urn:svc-serving:problem:[a-z-]+$/);
    assert.equal(body['status'], status);
    assert.equal(body['code'], code);
    assert.equal(typeof body['title'], 'string');
    if (status === 401) assert.equal(res.headers.get('www-authenticate'), 'Bearer');
    return text;
  };
  e.assertError = async (res, status, code) => {
    assert.equal(res.status, status);
    assert.match(res.headers.get('content-type') ?? '', OPENAI_ERROR);
    const text = await res.text();
    const body = JSON.parse(text) as { error: Record<string, unknown> };
    assert.deepEqual(Object.keys(body), ['error']);
    assert.deepEqual(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(body.error['code'], code);
    assert.equal(body.error['type'], openAiType(status));
    assert.equal(typeof body.error['message'], 'string');
    assert.ok(body.error['param'] === null || typeof body.error['param'] === 'string');
    if (status === 401) assert.equal(res.headers.get('www-authenticate'), 'Bearer');
    return text;
  };
  e.readEvents = async (res, n) => {
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = '';
    while ((text.match(/^data: /gm) ?? []).length < n) {
      const { done, value } = await reader.read();
      if (done) break;
      text += dec.decode(value, { stream: true });
    }
    return { reader, text };
  };

  before(async () => {
    e.rec = await startRecordingUpstream('recorded-model');
    e.inproc = await startEngineSim({
      host: '127.0.0.1',
      port: 0,
      logger: pino({ level: 'silent' }),
      ttftMs: 5,
      tokenDelayMs: 2,
      tokens: 4,
      model: 'inproc-model',
      maxModelLen: 8192,
    });
    e.big = await startEngineSim({
      host: '127.0.0.1',
      port: 0,
      logger: pino({ level: 'silent' }),
      ttftMs: 0,
      tokenDelayMs: 0,
      tokens: 4,
      model: 'big-model',
      maxModelLen: 100_000_000,
    });
    e.flaky = await startEngineSim({
      host: '127.0.0.1',
      port: 0,
      logger: pino({ level: 'silent' }),
      ttftMs: 0,
      tokenDelayMs: 0,
      tokens: 4,
      model: 'flaky-model',
      maxModelLen: 8192,
    });
    e.h = await startRouterHarness({
      models: [
        { alias: 'chat', max_output_tokens: CEIL },
        { alias: 'timeout-model', upstream_timeout_ms: 300 },
        { alias: 'single', max_concurrency: 1, max_queue: 0 },
        { alias: 'queued', max_concurrency: 1, max_queue: 1 },
        { alias: 'recorded', upstream: e.rec.url, upstream_model: 'recorded-model', max_output_tokens: CEIL },
        {
          alias: 'recorded-keyed',
          upstream: e.rec.url,
          upstream_model: 'recorded-model',
          upstream_api_key_env: 'SVC_TEST_UPSTREAM_KEY',
        },
        { alias: 'inproc', upstream: `${e.inproc.url}/v1`, upstream_model: 'inproc-model' },
        { alias: 'flaky', upstream: `${e.flaky.url}/v1`, upstream_model: 'flaky-model' },
        {
          alias: 'stall',
          upstream: `${e.big.url}/v1`,
          upstream_model: 'big-model',
          max_output_tokens: 10_000_000,
          upstream_timeout_ms: 1500,
          max_concurrency: 1,
          max_queue: 0,
        },
        { alias: 'whisper' },
        { alias: 'embedder' },
        // Nothing listens on port 1: its readiness check fails.
        { alias: 'down', upstream: 'http://127.0.0.1:1/v1' },
      ],
      server: { max_body_bytes: MAX_BODY },
      routerEnv: { SVC_LOG_LEVEL: 'debug', SVC_TEST_UPSTREAM_KEY: UPSTREAM_KEY },
    });
    e.client = e.h.client({ fetch: capture });
  });
  after(async () => {
    await e.h?.stop();
    await e.inproc?.close();
    await e.big?.close();
    await e.flaky?.close().catch(() => undefined);
    await e.rec?.close();
  });
  return e;
}

/** A multipart/form-data body of text fields. */
export function multipart(boundary: string, fields: Record<string, string>): string {
  return (
    Object.entries(fields)
      .map(([k, v]) => `--${boundary}\r\nContent-Disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`)
      .join('') + `--${boundary}--\r\n`
  );
}

/** Sends raw bytes over one TCP connection and returns what came back before it closed. */
export function raw(url: URL, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = connect(Number(url.port), url.hostname);
    let out = '';
    sock.setTimeout(5000, () => sock.destroy(new Error('raw request timed out')));
    sock.on('data', (d: Buffer) => (out += d.toString('latin1')));
    sock.on('error', (err) => (out ? resolve(out) : reject(err)));
    sock.on('close', () => resolve(out));
    sock.write(text, 'latin1');
  });
}
