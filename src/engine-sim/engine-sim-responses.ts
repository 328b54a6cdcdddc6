import type { IncomingMessage } from 'node:http';
import { responsesPrompt } from './engine-sim-directives.js';
import {
  MAX_TIMER_MS,
  THINK,
  TOKEN,
  answerBuffered,
  argumentPiece,
  checkModel,
  fails,
  planGeneration,
  readLimitAndStream,
  runStream,
  toolArguments,
  type Generation,
  type Script,
  type SimContext,
} from './engine-sim-generate.js';
import { sendError, sendJson, startSse, type SimResponse } from './engine-sim-http.js';
import type { ResponseStore } from './engine-sim-response-store.js';

/*
 * POST /v1/responses, answered as vLLM's OpenAI-compatible server answers it: a Response
 * object (`output[].content[].text`, `status`, `incomplete_details`, `usage`), or named SSE
 * events (`event: <type>` then `data: <event>`, every event with its `sequence_number`):
 * response.created, response.in_progress, then per output item output_item.added,
 * content_part.added, its deltas, output_text.done (reasoning_text.done),
 * content_part.done, output_item.done, and last response.completed carrying the whole
 * Response (vLLM sends `response.completed` whatever the status: an answer cut at its limit
 * is `incomplete` there). No `[DONE]`. The chat route's `sim:` directives apply.
 * Unless `store` is false, the finished Response is kept (engine-sim-response-store.ts); a
 * `background` request is answered at once with the Response `queued`, which turns
 * `in_progress` at the first token and finished when the last would have been generated.
 */

const DEFAULT_TOOL = 'sim_tool';

/** The answer being made: its ids and the parts of its Response object that never change. */
interface ResponsePlan {
  readonly id: string;
  readonly g: Generation;
  /** The function the model "calls" (`sim:finish=tool_calls`), or undefined for a message. */
  readonly tool: string | undefined;
  /** The Response object without `status`, `incomplete_details`, `output` and `usage`. */
  readonly frame: Record<string, unknown>;
}

/** POST /v1/responses. */
export function handleResponses(
  ctx: SimContext,
  req: IncomingMessage,
  res: SimResponse,
  body: Record<string, unknown>,
): void {
  if (!checkModel(ctx, req, res, body['model'])) return;
  const prompt = responsesPrompt(body['input'], body['instructions']);
  if (prompt === undefined) {
    sendError(req, res, 400, "'input' is missing or malformed", 'invalid_request_error', null, 'input');
    return;
  }
  const limits = readLimitAndStream(req, res, body['max_output_tokens'], 'max_output_tokens', body['stream']);
  if (limits === undefined) return;
  const mode = readStorage(req, res, body, limits.stream);
  if (mode === undefined) return;
  const g = planGeneration(ctx, req, res, { prompt, ...limits, reasoning: true });
  if (g === undefined) return;
  const p = plan(ctx, body, g, mode.background);
  const store = mode.store ? ctx.responses : undefined;
  if (mode.background) return answerInBackground(ctx.responses, req, res, p);
  if (!limits.stream) {
    answerBuffered(
      req,
      res,
      g,
      () => kept(store, finalResponse(p)),
      () => kept(store, failedResponse(p)),
    );
    return;
  }
  startSse(req, res);
  const s = new EventScript(p, store);
  // Sent at once, before the first token (as vLLM does): the first content comes later.
  res.write(s.opening());
  runStream(res, s, fails(g) ? g.errorAfter : g.n + g.reasoning, g.failAfter, g.ttft, g.delay);
}

/**
 * `store` (default true) and `background` (default false), each a boolean when present;
 * undefined when it answered 400: a background request that is not stored (vLLM's refusal),
 * or one that streams (not simulated).
 */
function readStorage(
  req: IncomingMessage,
  res: SimResponse,
  body: Record<string, unknown>,
  stream: boolean,
): { store: boolean; background: boolean } | undefined {
  for (const name of ['store', 'background']) {
    const v = body[name];
    if (v !== undefined && v !== null && typeof v !== 'boolean') {
      sendError(req, res, 400, `${name} must be a boolean`, 'invalid_request_error', null, name);
      return undefined;
    }
  }
  const store = body['store'] !== false;
  const background = body['background'] === true;
  if (background && !store) {
    sendError(req, res, 400, 'background mode requires store', 'invalid_request_error', null, 'background');
    return undefined;
  }
  if (background && stream) {
    sendError(req, res, 400, 'the sim does not stream background responses', 'invalid_request_error', null, 'stream');
    return undefined;
  }
  return { store, background };
}

/** The JSON of a finished Response, kept first when the request asked for it to be stored. */
function kept(store: ResponseStore | undefined, r: Record<string, unknown>): string {
  store?.put(r);
  return JSON.stringify(r);
}

/**
 * A `background` request: answered at once with the Response `queued` (kept), which turns
 * `in_progress` at its first token and finished (or `failed`) when its last would have been
 * generated, as a retrieve then reads it; a cancel before that stops both.
 */
function answerInBackground(store: ResponseStore, req: IncomingMessage, res: SimResponse, p: ResponsePlan): void {
  const g = p.g;
  const all = g.n + g.reasoning;
  const failed = fails(g) || (g.failAfter >= 0 && g.failAfter < all);
  const emitted = fails(g) ? g.errorAfter : failed ? g.failAfter : all;
  const base: Record<string, unknown> = { ...p.frame, incomplete_details: null, output: [], usage: null };
  const queued = { ...base, status: 'queued' };
  const id = `resp_${p.id}`;
  const starts = setTimeout(() => store.update(id, { ...base, status: 'in_progress' }), Math.min(g.ttft, MAX_TIMER_MS));
  const total = g.ttft + (emitted > 1 ? (emitted - 1) * g.delay : 0);
  const ends = setTimeout(
    () => store.update(id, failed ? failedResponse(p) : finalResponse(p)),
    Math.min(total, MAX_TIMER_MS),
  );
  // A sim that is closing does not wait for answers nobody is waiting on.
  starts.unref();
  ends.unref();
  store.put(queued, [starts, ends]);
  sendJson(req, res, 200, JSON.stringify(queued));
}

function plan(ctx: SimContext, body: Record<string, unknown>, g: Generation, background: boolean): ResponsePlan {
  const id = ctx.nextId();
  const number = (v: unknown, d: number): number => (typeof v === 'number' && Number.isFinite(v) ? v : d);
  return {
    id,
    g,
    tool: g.d?.finish === 'tool_calls' ? toolName(body) : undefined,
    frame: {
      id: `resp_${id}`,
      object: 'response',
      created_at: Math.floor(Date.now() / 1000),
      background,
      error: null,
      instructions: typeof body['instructions'] === 'string' ? body['instructions'] : null,
      max_output_tokens: typeof body['max_output_tokens'] === 'number' ? body['max_output_tokens'] : null,
      metadata: null,
      model: ctx.opts.model,
      parallel_tool_calls: true,
      previous_response_id: null,
      temperature: number(body['temperature'], 1),
      tool_choice: 'auto',
      tools: Array.isArray(body['tools']) ? body['tools'] : [],
      top_p: number(body['top_p'], 1),
      truncation: 'disabled',
      user: null,
    },
  };
}

/** `status` and `incomplete_details` of the finished response, from the plan's finish reason. */
function ending(p: ResponsePlan): { status: string; incomplete_details: { reason: string } | null } {
  switch (p.g.finish) {
    case 'stop':
    case 'tool_calls':
      return { status: 'completed', incomplete_details: null };
    case 'length':
      return { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } };
    case 'cancelled':
      return { status: 'cancelled', incomplete_details: null };
    default:
      // `content_filter`, or any other `sim:finish` word verbatim (the router normalizes it).
      return { status: 'incomplete', incomplete_details: { reason: p.g.finish } };
  }
}

function usage(p: ResponsePlan): Record<string, unknown> | null {
  const g = p.g;
  if (g.d?.usageOff === true) return null;
  const output = g.n + g.reasoning;
  return {
    input_tokens: g.promptTokens,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: g.reasoning },
    total_tokens: g.promptTokens + output,
  };
}

const textPart = (text: string): Record<string, unknown> => ({
  type: 'output_text',
  text,
  annotations: [],
  logprobs: [],
});
const reasoningPart = (text: string): Record<string, unknown> => ({ type: 'reasoning_text', text });

function reasoningItem(p: ResponsePlan, text: string, done: boolean): Record<string, unknown> {
  return {
    id: `rs_${p.id}`,
    type: 'reasoning',
    summary: [],
    content: done ? [reasoningPart(text)] : [],
    encrypted_content: null,
    status: done ? 'completed' : 'in_progress',
  };
}

function messageItem(p: ResponsePlan, text: string, status: string): Record<string, unknown> {
  return {
    id: `msg_${p.id}`,
    type: 'message',
    role: 'assistant',
    status,
    content: status === 'in_progress' ? [] : [textPart(text)],
  };
}

function callItem(p: ResponsePlan, args: string, status: string): Record<string, unknown> {
  return { id: `fc_${p.id}`, type: 'function_call', call_id: `call_${p.id}`, name: p.tool, arguments: args, status };
}

/** The output items of the finished answer: reasoning first, then the message or the function call. */
function outputItems(p: ResponsePlan, itemStatus: string): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  if (p.g.reasoning > 0) out.push(reasoningItem(p, THINK.repeat(p.g.reasoning), true));
  if (p.tool !== undefined) out.push(callItem(p, toolArguments(p.g.n), itemStatus));
  else if (p.g.n > 0) out.push(messageItem(p, TOKEN.repeat(p.g.n), itemStatus));
  return out;
}

function finalResponse(p: ResponsePlan): Record<string, unknown> {
  const e = ending(p);
  return {
    ...p.frame,
    status: e.status,
    incomplete_details: e.incomplete_details,
    output: outputItems(p, e.status === 'completed' ? 'completed' : 'incomplete'),
    usage: usage(p),
  };
}

/** The failure a buffered request gets (`sim:error_after`): status `failed` and the engine's error. */
function failedResponse(p: ResponsePlan): Record<string, unknown> {
  return {
    ...p.frame,
    status: 'failed',
    error: { code: 'server_error', message: FAILURE_MESSAGE },
    incomplete_details: null,
    output: [],
    usage: null,
  };
}

/** The engine's own failure text: a marker that must never leak past the router. */
const FAILURE_MESSAGE = 'Simulated engine failure 500: UPSTREAM-SECRET-DETAIL worker=7 path=/srv/models/weights';

/**
 * The SSE events of one streamed answer, made in the order runStream asks for them (`pre` at
 * the first token, `tok(i)` per token, `end` after the last), each numbered as it is made.
 */
class EventScript implements Script {
  private seq = 0;
  /** Output index of the message or function call (after the reasoning item, when there is one). */
  private readonly answerIndex: number;

  constructor(
    private readonly p: ResponsePlan,
    /** Where the finished Response is kept, when the request asked for it to be stored. */
    private readonly store: ResponseStore | undefined,
  ) {
    this.answerIndex = p.g.reasoning > 0 ? 1 : 0;
  }

  /** response.created and response.in_progress: the Response as it starts. */
  opening(): string {
    const r = { ...this.p.frame, status: 'in_progress', incomplete_details: null, output: [], usage: null };
    return this.event('response.created', { response: r }) + this.event('response.in_progress', { response: r });
  }

  get pre(): string {
    const g = this.p.g;
    if (g.reasoning > 0) return this.openReasoning();
    return g.n > 0 || this.p.tool !== undefined ? this.openAnswer() : '';
  }

  tok(i: number): string {
    const r = this.p.g.reasoning;
    if (i < r)
      return this.event('response.reasoning_text.delta', {
        item_id: `rs_${this.p.id}`,
        output_index: 0,
        content_index: 0,
        delta: THINK,
      });
    const k = i - r;
    const head = k === 0 && r > 0 ? this.closeReasoning() + this.openAnswer() : '';
    if (this.p.tool !== undefined)
      return (
        head +
        this.event('response.function_call_arguments.delta', {
          item_id: `fc_${this.p.id}`,
          output_index: this.answerIndex,
          delta: argumentPiece(k, this.p.g.n),
        })
      );
    return (
      head +
      this.event('response.output_text.delta', {
        item_id: `msg_${this.p.id}`,
        output_index: this.answerIndex,
        content_index: 0,
        delta: TOKEN,
        logprobs: [],
      })
    );
  }

  get end(): string {
    const g = this.p.g;
    if (fails(g)) {
      this.store?.put(failedResponse(this.p));
      // vLLM's failure during generation: an `error` event, and the stream ends.
      return this.event('error', { code: 'server_error', message: FAILURE_MESSAGE, param: null });
    }
    // A limit spent on thinking leaves the reasoning item open and no answer (no tool call
    // reasons first: planGeneration gives it no reasoning).
    let out = g.reasoning > 0 && g.n === 0 ? this.closeReasoning() : '';
    if (this.p.tool !== undefined || g.n > 0) out += this.closeAnswer();
    const final = finalResponse(this.p);
    this.store?.put(final);
    return out + this.event('response.completed', { response: final });
  }

  private openReasoning(): string {
    const item = reasoningItem(this.p, '', false);
    return (
      this.event('response.output_item.added', { output_index: 0, item }) +
      this.event('response.content_part.added', {
        item_id: item['id'],
        output_index: 0,
        content_index: 0,
        part: reasoningPart(''),
      })
    );
  }

  private closeReasoning(): string {
    const text = THINK.repeat(this.p.g.reasoning);
    const ids = { item_id: `rs_${this.p.id}`, output_index: 0, content_index: 0 };
    return (
      this.event('response.reasoning_text.done', { ...ids, text }) +
      this.event('response.content_part.done', { ...ids, part: reasoningPart(text) }) +
      this.event('response.output_item.done', { output_index: 0, item: reasoningItem(this.p, text, true) })
    );
  }

  private openAnswer(): string {
    const index = this.answerIndex;
    if (this.p.tool !== undefined)
      return this.event('response.output_item.added', {
        output_index: index,
        item: callItem(this.p, '', 'in_progress'),
      });
    return (
      this.event('response.output_item.added', { output_index: index, item: messageItem(this.p, '', 'in_progress') }) +
      this.event('response.content_part.added', {
        item_id: `msg_${this.p.id}`,
        output_index: index,
        content_index: 0,
        part: textPart(''),
      })
    );
  }

  private closeAnswer(): string {
    const index = this.answerIndex;
    const status = ending(this.p).status === 'completed' ? 'completed' : 'incomplete';
    if (this.p.tool !== undefined) {
      const args = toolArguments(this.p.g.n);
      return (
        this.event('response.function_call_arguments.done', {
          item_id: `fc_${this.p.id}`,
          output_index: index,
          arguments: args,
        }) + this.event('response.output_item.done', { output_index: index, item: callItem(this.p, args, status) })
      );
    }
    const text = TOKEN.repeat(this.p.g.n);
    const ids = { item_id: `msg_${this.p.id}`, output_index: index, content_index: 0 };
    return (
      this.event('response.output_text.done', { ...ids, text, logprobs: [] }) +
      this.event('response.content_part.done', { ...ids, part: textPart(text) }) +
      this.event('response.output_item.done', { output_index: index, item: messageItem(this.p, text, status) })
    );
  }

  /** One named SSE event, as vLLM frames it: `event: <type>`, then its JSON on one `data:` line. */
  private event(type: string, fields: Record<string, unknown>): string {
    return `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: this.seq++, ...fields })}\n\n`;
  }
}

/** The function the request asks for (`tool_choice`), else its first function tool, else a fixed name. */
function toolName(body: Record<string, unknown>): string {
  const tools = body['tools'];
  const name =
    functionName(body['tool_choice']) ?? (Array.isArray(tools) ? functionName(tools[0]) : undefined) ?? DEFAULT_TOOL;
  return name.slice(0, 64);
}

/** `name` of a Responses function tool or tool choice (`{"type": "function", "name": ...}`). */
function functionName(v: unknown): string | undefined {
  if (v === null || typeof v !== 'object') return undefined;
  const name = (v as { name?: unknown }).name;
  return typeof name === 'string' && name.length > 0 ? name : undefined;
}
