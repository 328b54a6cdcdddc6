import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { gzipSync } from 'node:zlib';

/**
 * An upstream engine stand-in that records every request it gets and answers in shapes the
 * engine sim does not make (redirects, errors inside streams, split events, compressed
 * answers, informational answers), chosen by words in the prompt.
 */

/** One request as a recording upstream saw it. */
export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
  readonly rawHeaders: readonly string[];
  readonly body: Buffer;
}

export interface RecordingUpstream {
  /** Base URL to configure as a model's upstream (`<origin>/v1`). */
  readonly url: string;
  readonly requests: RecordedRequest[];
  /** Raw answers (`answer-raw=NAME`) whose connection was closed before they ended. */
  readonly closedStreams: string[];
  close(): Promise<void>;
}

interface RawContext {
  readonly id: string;
  readonly model: string;
  readonly extra: Record<string, string>;
  /** Names of raw answers whose connection the router closed before the answer ended. */
  readonly closed: string[];
}

/** One SSE content event of a chat completion stream. */
function sseContent(c: RawContext, content: string): string {
  return `data: ${JSON.stringify({ id: c.id, object: 'chat.completion.chunk', created: 1, model: c.model, choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`;
}

/** A whole chat completion answer. */
function wholeAnswer(c: RawContext): string {
  return JSON.stringify({
    id: c.id,
    object: 'chat.completion',
    created: 1,
    model: c.model,
    choices: [{ index: 0, message: { role: 'assistant', content: 'hi there' }, finish_reason: 'stop' }],
    usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
  });
}

const SSE_HEAD = { 'content-type': 'text/event-stream' };

/**
 * Misbehaving engines (`answer-raw=NAME`): each is engine text the router must never relay,
 * or an answer framed in a way the router must still read right. Secrets are `UPSTREAM-SECRET`.
 */
const RAW_ANSWERS: Record<string, (res: import('node:http').ServerResponse, c: RawContext) => void> = {
  // An error object written over two data lines of one event.
  'multiline-error': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end(sseContent(c, 'hi ') + 'data: {"error":\ndata: {"message":"UPSTREAM-SECRET-MULTI"}}\n\ndata: [DONE]\n\n');
  },
  // An answer written over two data lines of one event (valid SSE): read as one.
  'multiline-ok': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end(
      'data: {"choices":[{"index":0,"delta":\ndata: {"content":"hi "}}]}\n\n' +
        sseContent(c, 'there') +
        'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n',
    );
  },
  'event-error': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end(sseContent(c, 'hi ') + 'event: error\ndata: UPSTREAM-SECRET-EVENT\n\ndata: [DONE]\n\n');
  },
  'text-data': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end(sseContent(c, 'hi ') + 'data: Internal Server Error UPSTREAM-SECRET-TEXT\n\ndata: [DONE]\n\n');
  },
  'traceback-line': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end(sseContent(c, 'hi ') + 'Traceback (most recent call last): UPSTREAM-SECRET-TRACE\n\ndata: [DONE]\n\n');
  },
  // The engine's first words are its own text, then it closes (no empty line).
  'text-first': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end('Internal error: UPSTREAM-SECRET-FIRSTLINE\n');
  },
  // A byte order mark, then an error object as the first event.
  'bom-error-first': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end('\ufeffdata: {"error":{"message":"UPSTREAM-SECRET-BOM"}}\n\ndata: [DONE]\n\n');
  },
  // [DONE], then the engine keeps its stream open.
  'done-stall': (res, c) => {
    res.on('close', () => {
      if (!res.writableFinished) c.closed.push('done-stall');
    });
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.write(sseContent(c, 'hi ') + 'data: [DONE]\n\n');
    setTimeout(() => res.end(), 10_000).unref();
  },
  // CRLF lines, the last CRLF split between two writes: `data: [DONE]\r\n\r`, a pause, `\n`.
  'crlf-split-done': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.write(sseContent(c, 'hi ').replace(/\n/g, '\r\n') + 'data: [DONE]\r\n\r');
    setTimeout(() => res.end('\n'), 300).unref();
  },
  // An error event after [DONE], in the same write: after [DONE] nothing is read or relayed.
  'error-after-done': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end(sseContent(c, 'hi ') + 'data: [DONE]\n\ndata: {"error":{"message":"UPSTREAM-SECRET-AFTER"}}\n\n');
  },
  // A content event, then one the engine leaves unclosed (no empty line, no [DONE]) and ends.
  'unterminated-content': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end(sseContent(c, 'hi ') + sseContent(c, 'UPSTREAM-SECRET-HALF').trimEnd());
  },
  // 160 content events of 32 KB (5 MiB), then an error, in one write: more than the sockets
  // between the router and a client that is slow to start reading hold.
  'big-then-error': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end(
      Array.from({ length: 160 }, () => sseContent(c, 'y'.repeat(32_768))).join('') +
        'data: {"error":{"message":"UPSTREAM-SECRET-BIG"}}\n\n',
    );
  },
  'only-unterminated': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end(sseContent(c, 'UPSTREAM-SECRET-HALF').trimEnd());
  },
  // [DONE], then more than a stream buffer holds (2 MiB), then the engine ends its stream (late).
  'done-then-more': (res, c) => {
    // The router's side of the connection closing (a cut) is what shows: the answer itself
    // finishes into the socket's buffers either way.
    res.socket?.on('close', () => c.closed.push('done-then-more'));
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.write(sseContent(c, 'hi ') + 'data: [DONE]\n\n');
    res.write(`: ${'x'.repeat(2 * 1024 * 1024)}\n\n`);
    setTimeout(() => res.end(), 250).unref();
  },
  // The last event is not closed by an empty line (nor its line by a line end).
  'unterminated-done': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end(sseContent(c, 'hi ') + 'data: [DONE]');
  },
  'gzip-whole': (res, c) => {
    const zipped = gzipSync(wholeAnswer(c));
    res
      .writeHead(200, {
        'content-type': 'application/json',
        'content-encoding': 'gzip',
        'content-length': zipped.length,
        ...c.extra,
      })
      .end(zipped);
  },
  'gzip-stream': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, 'content-encoding': 'gzip', ...c.extra });
    res.end(gzipSync(sseContent(c, 'hi ') + 'data: [DONE]\n\n'));
  },
  'plain-text-200': (res, c) => {
    res.writeHead(200, { 'content-type': 'text/plain', ...c.extra }).end('hello UPSTREAM-SECRET-PLAIN');
  },
  'empty-200': (res, c) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '0', ...c.extra }).end();
  },
  // A finish reason, then the engine's error (no [DONE]): the answer did not finish that way.
  'length-then-error': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end(
      sseContent(c, 'hi ') +
        `data: ${JSON.stringify({ id: c.id, object: 'chat.completion.chunk', created: 1, model: c.model, choices: [{ index: 0, delta: {}, finish_reason: 'length' }] })}\n\n` +
        'data: {"error":{"message":"UPSTREAM-SECRET-LATE"}}\n\n',
    );
  },
  // One event just over 1 MiB, sent whole in one write (then [DONE]): never relayed.
  'big-event-whole': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end(sseContent(c, 'hi ') + sseContent(c, `UPSTREAM-SECRET-BIG${'x'.repeat(1024 * 1024)}`) + 'data: [DONE]\n\n');
  },
  // A content line of an event the engine never closes (no empty line), then it ends: nothing relayed.
  'content-line-then-end': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end(sseContent(c, 'hi').trimEnd() + '\n');
  },
  // A keep-alive comment, then the engine's error: no fragment was seen.
  'comment-then-error': (res, c) => {
    res.writeHead(200, { ...SSE_HEAD, ...c.extra });
    res.end(': ping\n\ndata: {"error":{"message":"UPSTREAM-SECRET-PING"}}\n\n');
  },
  'json-array-200': (res, c) => {
    res.writeHead(200, { 'content-type': 'application/json', ...c.extra }).end('["UPSTREAM-SECRET-ARRAY"]');
  },
};

/**
 * A tiny OpenAI-compatible upstream that records every request (headers and body) and answers
 * chat completions with a fixed two-token answer. It sets response headers of its own
 * (`x-request-id`, `x-engine-detail`) so a test can see what the router passes on.
 */
/** A secret-looking marker in the engine's own refusal text: it may reach the caller, nothing else. */
export const REFUSAL_CANARY = 'sk-refusal-canary-5f1e2d3c4b5a69788796a5b4';

export async function startRecordingUpstream(model = 'recorded-model'): Promise<RecordingUpstream> {
  const requests: RecordedRequest[] = [];
  const closedStreams: string[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const path = req.url ?? '/';
      if (req.method === 'GET' && path === '/health') {
        res.writeHead(200, { 'content-length': '0' }).end();
        return;
      }
      requests.push({ method: req.method ?? '', path, headers: req.headers, rawHeaders: req.rawHeaders, body });
      let stream = false;
      try {
        stream = (JSON.parse(body.toString('utf8')) as { stream?: unknown }).stream === true;
      } catch {
        // not JSON: answered like any other request
      }
      const extra = { 'x-request-id': 'engine-own-id-123', 'x-engine-detail': 'ENGINE-INTERNAL-HEADER' };
      // `answer-status=302` or `=204` in the prompt: a redirect with a body of its own, or no body.
      const asked = /answer-status=(302|204)/.exec(body.toString('utf8'))?.[1];
      if (asked === '302') {
        res
          .writeHead(302, { location: 'http://elsewhere.invalid/', 'content-type': 'text/html', ...extra })
          .end('UPSTREAM-REDIRECT-BODY');
        return;
      }
      if (asked === '204') {
        res.writeHead(204, extra).end();
        return;
      }
      // `answer-refuse=NNN` in the prompt: the engine refuses the request as vLLM does, its own
      // message carrying REFUSAL_CANARY, a control character and more than 1,024 characters.
      const refuse = /answer-refuse=(\d{3})/.exec(body.toString('utf8'))?.[1];
      if (refuse !== undefined) {
        const message = `bad parameter ${REFUSAL_CANARY}\u0007\n${'x'.repeat(2000)}`;
        const text = JSON.stringify({ error: { message, type: 'BadRequestError', param: null, code: Number(refuse) } });
        res.writeHead(Number(refuse), { 'content-type': 'application/json', ...extra }).end(text);
        return;
      }
      // `answer-early-hints` / `answer-continue` in the prompt: an informational answer (103, or
      // a 100 Continue the router never asked for) before the real one.
      if (body.includes('answer-early-hints')) res.writeEarlyHints({ link: '</hint>; rel=preload' });
      if (body.includes('answer-continue')) res.writeContinue();
      const id = 'chatcmpl-rec';
      if (stream && body.includes('answer-error-first')) {
        // An engine whose first event is an error (then [DONE]).
        res.writeHead(200, { 'content-type': 'text/event-stream', ...extra });
        res.end(
          'data: {"object":"error","message":"UPSTREAM-SECRET-FIRST worker=4","type":"BadRequestError","code":400}\n\ndata: [DONE]\n\n',
        );
        return;
      }
      if (stream && body.includes('answer-split-error')) {
        // An engine's error event arriving in two reads (its raw text must never be relayed),
        // followed by [DONE], as vLLM sends it.
        res.writeHead(200, { 'content-type': 'text/event-stream', ...extra });
        res.write(
          `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta: { content: 'hi ' }, finish_reason: null }] })}\n\ndata: {"error":{"message":"UPSTREAM-SECRET-`,
        );
        setTimeout(() => res.end('SPLIT worker=3","type":"server_error","code":500}}\n\ndata: [DONE]\n\n'), 60);
        return;
      }
      // `answer-raw=NAME` in the prompt: one of the raw answers below, written as they are.
      const raw = /answer-raw=([a-z0-9-]+)/.exec(body.toString('utf8'))?.[1];
      if (raw !== undefined && RAW_ANSWERS[raw]) {
        RAW_ANSWERS[raw]!(res, { id, model, extra, closed: closedStreams });
        return;
      }
      if (stream && body.includes('answer-cr-lines')) {
        // Lines ended by a bare CR (the SSE grammar allows it): the first event, a pause, the rest.
        res.writeHead(200, { 'content-type': 'text/event-stream', ...extra });
        const cr = (delta: unknown, finish: string | null): string =>
          `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\r\r`;
        res.write(cr({ role: 'assistant', content: 'hi ' }, null));
        setTimeout(() => res.end(cr({ content: 'there' }, null) + cr({}, 'stop') + 'data: [DONE]\r\r'), 400);
        return;
      }
      if (stream && body.includes('answer-big-trickle')) {
        // One large content event (600 KiB, under the 1 MiB the router holds) written in 4 KiB
        // pieces, its closing CRLF split between two of them, then [DONE].
        res.writeHead(200, { 'content-type': 'text/event-stream', ...extra });
        const big = Buffer.from(
          `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta: { content: 'B'.repeat(600 * 1024) }, finish_reason: null }] })}\r\n\r`,
        );
        let at = 0;
        const next = (): void => {
          if (res.destroyed) return;
          if (at < big.length) {
            res.write(big.subarray(at, at + 4096));
            at += 4096;
            setImmediate(next);
          } else
            res.end(
              `\ndata: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\ndata: [DONE]\n\n`,
            );
        };
        next();
        return;
      }
      if (stream && body.includes('answer-long-error')) {
        // One content event, then an error line longer than the router holds back (1 MiB).
        res.writeHead(200, { 'content-type': 'text/event-stream', ...extra });
        res.write(
          `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta: { content: 'hi ' }, finish_reason: null }] })}\n\n`,
        );
        res.end(
          `data: {"error":{"message":"UPSTREAM-SECRET-LONG ${'x'.repeat(1200 * 1024)}","code":500}}\n\ndata: [DONE]\n\n`,
        );
        return;
      }
      if (stream) {
        res.writeHead(200, { 'content-type': 'text/event-stream', ...extra });
        const chunk = (delta: unknown, finish: string | null): string =>
          `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created: 1, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
        res.end(
          chunk({ role: 'assistant', content: 'hi ' }, null) +
            chunk({ content: 'there' }, null) +
            chunk({}, 'stop') +
            'data: [DONE]\n\n',
        );
        return;
      }
      const answer = JSON.stringify({
        id,
        object: 'chat.completion',
        created: 1,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content: 'hi there' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
      });
      res
        .writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(answer), ...extra })
        .end(answer);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : 0;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    closedStreams,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
