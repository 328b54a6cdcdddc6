import type { IncomingMessage } from 'node:http';
import type { EngineSimOptions } from './engine-sim-options.js';
import { chatPrompt, completionPrompt, parseDirectives, type Directives } from './engine-sim-directives.js';
import { clearSimTimers, estimateTokens, sendError, sendJson, startSse, type SimResponse } from './engine-sim-http.js';
import type { ResponseStore } from './engine-sim-response-store.js';

/** What every route handler of the sim shares. */
export interface SimContext {
  readonly opts: EngineSimOptions;
  /** JSON.stringify(opts.model), computed once: the hot path splices it into templates. */
  readonly modelJson: string;
  nextId(): string;
  /** The Responses kept for retrieval and cancel (POST /v1/responses, unless `store` is false). */
  readonly responses: ResponseStore;
}

export type GenerationKind = 'chat' | 'completion';

/** One "token" of output: short, ASCII, needs no JSON escaping. */
export const TOKEN = 'tok ';
/** One fragment of reasoning (`sim:reasoning=N`). */
export const THINK = 'think ';
/** Keeps a directive like `sim:tokens=999999999` from building a gigabyte string. */
const MAX_TOKENS = 1_000_000;
const DEFAULT_TOOL = 'sim_tool';

/**
 * Answers 404 (OpenAI's model_not_found) when the body names another model; a missing model is
 * the served one, as vLLM does. Returns false when it answered.
 */
export function checkModel(ctx: SimContext, req: IncomingMessage, res: SimResponse, model: unknown): boolean {
  if (model === undefined || model === null || model === ctx.opts.model) return true;
  // A model that is no string is a malformed request (400, as vLLM's validation answers), not an unknown model.
  if (typeof model !== 'string')
    sendError(req, res, 400, "'model' must be a string", 'invalid_request_error', null, 'model');
  // OpenAI and vLLM name the model here; the sim does not echo what it was sent.
  else
    sendError(
      req,
      res,
      404,
      'The model does not exist or you do not have access to it.',
      'invalid_request_error',
      'model_not_found',
      'model',
    );
  return false;
}

/** What a generation request asks for, once its members are read (chat, completions, responses). */
export interface GenerationAsk {
  readonly prompt: { text: string; chars: number };
  /** The request's output limit (`max_tokens`, `max_completion_tokens`, `max_output_tokens`). */
  readonly maxTokens: number | undefined;
  readonly stream: boolean;
  /** The API carries a reasoning model's thinking (chat, responses; not completions). */
  readonly reasoning: boolean;
}

/** One answer's size and timing: from the request, its `sim:` directives and the sim's options. */
export interface Generation {
  readonly d: Directives | undefined;
  readonly promptTokens: number;
  /** Answer tokens, after the reasoning ones. */
  readonly n: number;
  /** Reasoning tokens before the answer (within the output limit, as vLLM counts them). */
  readonly reasoning: number;
  /** The finish reason: `sim:finish=...` verbatim, else `length` when the limit cut the answer short, else `stop`. */
  readonly finish: string;
  readonly ttft: number;
  readonly delay: number;
  /** `sim:fail_after`: the connection is cut after this many tokens (-1: never). */
  readonly failAfter: number;
  /** `sim:error_after`: the engine reports a failure after this many tokens (-1: never). */
  readonly errorAfter: number;
}

/**
 * Reads an output limit member (`param`) and `stream`. Returns undefined when it answered 400
 * (a limit that is no integer of at least 1, a `stream` that is no boolean).
 */
export function readLimitAndStream(
  req: IncomingMessage,
  res: SimResponse,
  rawMax: unknown,
  param: string,
  stream: unknown,
): { maxTokens: number | undefined; stream: boolean } | undefined {
  let maxTokens: number | undefined;
  if (rawMax !== undefined && rawMax !== null) {
    if (typeof rawMax !== 'number' || !Number.isInteger(rawMax) || rawMax < 1) {
      sendError(req, res, 400, `${param} must be an integer of at least 1`, 'invalid_request_error', null, param);
      return undefined;
    }
    maxTokens = rawMax;
  }
  if (stream !== undefined && stream !== null && typeof stream !== 'boolean') {
    sendError(req, res, 400, 'stream must be a boolean', 'invalid_request_error', null, 'stream');
    return undefined;
  }
  return { maxTokens, stream: stream === true };
}

/**
 * Sizes the answer, or answers at once (returning undefined) what the directives and the
 * context ask for instead: `sim:status=NNN`, or vLLM's context-length rejection (a prompt
 * plus output limit longer than `maxModelLen`, or `sim:reject=context`).
 */
export function planGeneration(
  ctx: SimContext,
  req: IncomingMessage,
  res: SimResponse,
  ask: GenerationAsk,
): Generation | undefined {
  const d = parseDirectives(ask.prompt.text);
  const promptTokens = estimateTokens(ask.prompt.chars);
  if (d?.status !== undefined) {
    sendJson(req, res, d.status, simulatedFailure(d.status));
    return undefined;
  }
  const maxLen = ctx.opts.maxModelLen;
  let maxTokens = ask.maxTokens;
  if (d?.rejectContext !== undefined || promptTokens + (maxTokens ?? 0) > maxLen) {
    const requested = Math.max(maxLen + 1, promptTokens + (maxTokens ?? 0));
    sendJson(req, res, 400, contextError(maxLen, requested, promptTokens, d?.rejectContext === 'flat'));
    return undefined;
  }
  // Without an output limit, vLLM's is what the context has left after the prompt.
  const want = Math.min(d?.tokens ?? ctx.opts.tokens, MAX_TOKENS);
  if (maxTokens === undefined) maxTokens = maxLen - promptTokens;
  // Reasoning fragments come first and count as output tokens, within the limit (as vLLM
  // counts them): a budget spent on thinking leaves less (or nothing) of the answer.
  const wantReasoning = ask.reasoning && d?.finish !== 'tool_calls' ? (d?.reasoning ?? 0) : 0;
  const total = Math.min(maxTokens, wantReasoning + want);
  const reasoning = Math.min(wantReasoning, total);
  const n = total - reasoning;
  return {
    d,
    promptTokens,
    n,
    reasoning,
    finish: d?.finish ?? (n < want ? 'length' : 'stop'),
    ttft: d?.ttftMs ?? ctx.opts.ttftMs,
    delay: d?.tokenDelayMs ?? ctx.opts.tokenDelayMs,
    failAfter: d?.failAfter ?? -1,
    errorAfter: d?.errorAfter ?? -1,
  };
}

/** POST /v1/chat/completions and /v1/completions. */
export function handleGeneration(
  ctx: SimContext,
  req: IncomingMessage,
  res: SimResponse,
  body: Record<string, unknown>,
  kind: GenerationKind,
): void {
  if (!checkModel(ctx, req, res, body['model'])) return;
  const chat = kind === 'chat';
  const prompt = chat ? chatPrompt(body['messages']) : completionPrompt(body['prompt']);
  if (prompt === undefined) {
    const param = chat ? 'messages' : 'prompt';
    sendError(req, res, 400, `'${param}' is missing or malformed`, 'invalid_request_error', null, param);
    return;
  }
  const rawMax = chat ? (body['max_completion_tokens'] ?? body['max_tokens']) : body['max_tokens'];
  const limits = readLimitAndStream(req, res, rawMax, 'max_tokens', body['stream']);
  if (limits === undefined) return;
  const g = planGeneration(ctx, req, res, { prompt, ...limits, reasoning: chat });
  if (g === undefined) return;
  const { n, reasoning, promptTokens } = g;
  const plan: Plan = {
    id: (chat ? 'chatcmpl-' : 'cmpl-') + ctx.nextId(),
    created: Math.floor(Date.now() / 1000),
    modelJson: ctx.modelJson,
    n,
    finishJson: JSON.stringify(g.finish),
    tool: chat && g.d?.finish === 'tool_calls' ? toolName(body) : undefined,
    usageJson: `{"prompt_tokens":${promptTokens},"completion_tokens":${n + reasoning},"total_tokens":${promptTokens + n + reasoning}}`,
    reasoning,
  };
  if (limits.stream) {
    const usage = g.d?.usageOff !== true && includeUsage(body['stream_options']);
    startSse(req, res);
    const script = chat ? chatScript(plan, usage) : completionScript(plan, usage);
    // vLLM's way of failing during generation: an error event in the stream, then [DONE].
    if (fails(g)) script.end = `data: ${simulatedFailure(500)}\n\n${DONE}`;
    runStream(res, script, fails(g) ? g.errorAfter : n + reasoning, g.failAfter, g.ttft, g.delay);
    return;
  }
  const usage = g.d?.usageOff !== true;
  answerBuffered(
    req,
    res,
    g,
    () => (chat ? chatBody(plan, usage) : completionBody(plan, usage)),
    () => simulatedFailure(500),
  );
}

/** Whether the engine reports a failure (`sim:error_after`) before the answer is complete. */
export function fails(g: Generation): boolean {
  return g.errorAfter >= 0 && g.errorAfter < g.n + g.reasoning;
}

/**
 * Answers a buffered request once its tokens would have been generated (reasoning ones
 * included, as when streamed): `body()`, or `failure()` with status 200 when the engine
 * fails during generation (as some engines answer a buffered request), or a cut connection
 * (`sim:fail_after`), each after the tokens generated before it.
 */
export function answerBuffered(
  req: IncomingMessage,
  res: SimResponse,
  g: Generation,
  body: () => string,
  failure: () => string,
): void {
  const all = g.n + g.reasoning;
  const failed = fails(g);
  // Cut only when the answer has more tokens than fail_after: a shorter one ends normally.
  const cut = !failed && g.failAfter >= 0 && g.failAfter < all;
  const emitted = failed ? g.errorAfter : cut ? g.failAfter : all;
  const wait = Math.min(g.ttft + (emitted > 1 ? (emitted - 1) * g.delay : 0), MAX_TIMER_MS);
  const fire = (): void => {
    res.simTimer = undefined;
    if (failed) sendJson(req, res, 200, failure());
    else if (cut) {
      res.simCut = true;
      res.destroy();
    } else sendJson(req, res, 200, body());
  };
  if (wait === 0) fire();
  else res.simTimer = setTimeout(fire, wait);
}

/** The longest wait a timer can take (node fires a longer one after 1 ms, with a warning). */
export const MAX_TIMER_MS = 2_147_483_647;

interface Plan {
  id: string;
  created: number;
  modelJson: string;
  n: number;
  finishJson: string;
  /** JSON-encoded function name when the output is a tool call. */
  tool: string | undefined;
  usageJson: string;
  /** Reasoning fragments before the answer (chat only). */
  reasoning: number;
}

/** SSE text: `pre` once at the first content, `tok(i)` per token, `end` after the last. */
export interface Script {
  pre: string;
  tok(i: number): string;
  end: string;
}

export const DONE = 'data: [DONE]\n\n';

function chatScript(p: Plan, usage: boolean): Script {
  const usageNull = usage ? ',"usage":null' : '';
  const head = `data: {"id":"${p.id}","object":"chat.completion.chunk","created":${p.created},"model":${p.modelJson},"system_fingerprint":null,"choices":[{"index":0,"delta":`;
  const tail = `,"logprobs":null,"finish_reason":null}]${usageNull}}\n\n`;
  const end = `${head}{},"logprobs":null,"finish_reason":${p.finishJson}}]${usageNull}}\n\n${usageChunk(p, 'chat.completion.chunk', usage)}${DONE}`;
  if (p.tool !== undefined) {
    const n = p.n;
    const pre = `${head}{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_${p.id.slice(9)}","type":"function","function":{"name":${p.tool},"arguments":${n === 0 ? '"{}"' : '""'}}}]}${tail}`;
    return {
      pre,
      end,
      tok: (i) =>
        `${head}{"tool_calls":[{"index":0,"function":{"arguments":${JSON.stringify(argumentPiece(i, n))}}}]}${tail}`,
    };
  }
  const tokChunk = `${head}{"content":"${TOKEN}"}${tail}`;
  const r = p.reasoning;
  if (r > 0) {
    const thinkChunk = `${head}{"reasoning_content":"${THINK}"}${tail}`;
    return { pre: `${head}{"role":"assistant","content":""}${tail}`, end, tok: (i) => (i < r ? thinkChunk : tokChunk) };
  }
  return { pre: `${head}{"role":"assistant","content":""}${tail}`, end, tok: () => tokChunk };
}

function completionScript(p: Plan, usage: boolean): Script {
  const usageNull = usage ? ',"usage":null' : '';
  const head = `data: {"id":"${p.id}","object":"text_completion","created":${p.created},"model":${p.modelJson},"system_fingerprint":null,"choices":[{"text":`;
  const tokChunk = `${head}"${TOKEN}","index":0,"logprobs":null,"finish_reason":null}]${usageNull}}\n\n`;
  const end = `${head}"","index":0,"logprobs":null,"finish_reason":${p.finishJson}}]${usageNull}}\n\n${usageChunk(p, 'text_completion', usage)}${DONE}`;
  return { pre: '', end, tok: () => tokChunk };
}

/** OpenAI's include_usage tail: one chunk with empty choices and the usage. */
function usageChunk(p: Plan, object: string, usage: boolean): string {
  if (!usage) return '';
  return `data: {"id":"${p.id}","object":"${object}","created":${p.created},"model":${p.modelJson},"system_fingerprint":null,"choices":[],"usage":${p.usageJson}}\n\n`;
}

/** The i-th of n pieces of the tool call's JSON arguments `{"text":"tok tok ..."}`. */
export function argumentPiece(i: number, n: number): string {
  return (i === 0 ? '{"text":"' : '') + TOKEN + (i === n - 1 ? '"}' : '');
}

export function toolArguments(n: number): string {
  return n === 0 ? '{}' : `{"text":"${TOKEN.repeat(n)}"}`;
}

function chatBody(p: Plan, usage: boolean): string {
  const message =
    p.tool !== undefined
      ? `{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"call_${p.id.slice(9)}","type":"function","function":{"name":${p.tool},"arguments":${JSON.stringify(toolArguments(p.n))}}}]}`
      : `{"role":"assistant","content":"${TOKEN.repeat(p.n)}",${p.reasoning > 0 ? `"reasoning_content":"${THINK.repeat(p.reasoning)}",` : ''}"refusal":null}`;
  return `{"id":"${p.id}","object":"chat.completion","created":${p.created},"model":${p.modelJson},"system_fingerprint":null,"choices":[{"index":0,"message":${message},"logprobs":null,"finish_reason":${p.finishJson}}]${usage ? `,"usage":${p.usageJson}` : ''}}`;
}

function completionBody(p: Plan, usage: boolean): string {
  return `{"id":"${p.id}","object":"text_completion","created":${p.created},"model":${p.modelJson},"system_fingerprint":null,"choices":[{"text":"${TOKEN.repeat(p.n)}","index":0,"logprobs":null,"finish_reason":${p.finishJson}}]${usage ? `,"usage":${p.usageJson}` : ''}}`;
}

/** Tokens written at a time when there is no inter-token delay: a long answer never blocks the sim. */
const BURST_TOKENS = 256;

/**
 * Streams: the first content at ttft, then one token per `delay` ms. With no delay, tokens go
 * out in bursts of BURST_TOKENS as fast as the client reads them (the next burst waits for
 * 'drain'), so a million-token answer starts at once and never holds the sim's event loop.
 * With fail_after the socket is destroyed after that many tokens, without [DONE]. The shared
 * `close` listener clears the timers when the client goes away first.
 */
export function runStream(
  res: SimResponse,
  s: Script,
  n: number,
  failAfter: number,
  ttft: number,
  delay: number,
): void {
  // Cut only when the answer has more tokens than fail_after: a shorter one ends normally.
  const cut = failAfter >= 0 && failAfter < n;
  const limit = cut ? failAfter : n;
  let k = 0;
  let started = false;
  const step = (): void => {
    if (res.destroyed) return;
    let out = started ? '' : s.pre;
    started = true;
    if (delay === 0) {
      const until = Math.min(limit, k + BURST_TOKENS);
      while (k < until) out += s.tok(k++);
    } else if (k < limit) out += s.tok(k++);
    if (k < limit) {
      const flowing = res.write(out);
      if (delay === 0) {
        if (flowing) setImmediate(step);
        else res.once('drain', step);
      }
      return;
    }
    clearSimTimers(res);
    if (!cut) {
      res.end(out + s.end);
      return;
    }
    res.simCut = true;
    // Let what was produced reach the client first, then cut the connection mid-body.
    if (out.length > 0) res.write(out, () => res.destroy());
    else res.destroy();
  };
  const begin = (): void => {
    res.simTimer = undefined;
    step();
    if (delay > 0 && k < limit && !res.destroyed) res.simInterval = setInterval(step, Math.min(delay, MAX_TIMER_MS));
  };
  if (ttft > 0) res.simTimer = setTimeout(begin, Math.min(ttft, MAX_TIMER_MS));
  else begin();
}

function includeUsage(streamOptions: unknown): boolean {
  return (
    streamOptions !== null &&
    typeof streamOptions === 'object' &&
    (streamOptions as { include_usage?: unknown }).include_usage === true
  );
}

/** The function the request asks for (tool_choice), else its first tool, else a fixed name. */
function toolName(body: Record<string, unknown>): string {
  const choice = body['tool_choice'] as { function?: { name?: unknown } } | undefined;
  const tools = body['tools'];
  const first = Array.isArray(tools) ? (tools[0] as { function?: { name?: unknown } } | undefined) : undefined;
  const name = pickName(choice) ?? pickName(first) ?? DEFAULT_TOOL;
  return JSON.stringify(name.slice(0, 64));
}

function pickName(v: { function?: { name?: unknown } } | undefined): string | undefined {
  if (v === null || typeof v !== 'object') return undefined;
  const fn = v.function;
  return fn !== null && typeof fn === 'object' && typeof fn.name === 'string' && fn.name.length > 0
    ? fn.name
    : undefined;
}

/** vLLM's context-length rejection (`flat`: the body vLLM sent before 0.10.1). */
function contextError(maxLen: number, requested: number, promptTokens: number, flat: boolean): string {
  return vllmBadRequest(
    `This model's maximum context length is ${maxLen} tokens. However, you requested ${requested} tokens (${promptTokens} in the messages, ${requested - promptTokens} in the completion). Please reduce the length of the messages or completion.`,
    flat,
  );
}

/** vLLM's rejection of an input longer than the context on a pooling route (embeddings, rerank). */
export function inputContextError(maxLen: number, tokens: number, what: string): string {
  return vllmBadRequest(
    `This model's maximum context length is ${maxLen} tokens. However, you requested ${tokens} tokens in the input for ${what}. Please reduce the length of the input.`,
  );
}

/**
 * vLLM's 400: OpenAI's error envelope, as vLLM answers since 0.10.1; `flat`: the object it
 * answered before (`{"object":"error","message":...}`, which OpenAI's SDKs cannot read).
 */
function vllmBadRequest(message: string, flat = false): string {
  const error = { message, type: 'BadRequestError', param: null, code: 400 };
  return JSON.stringify(flat ? { object: 'error', ...error } : { error });
}

const FAILURE_TYPES: Readonly<Record<number, string>> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  429: 'rate_limit_error',
};

/** `sim:status=NNN`: the body carries a marker that must never leak past the router. */
export function simulatedFailure(status: number): string {
  const type = FAILURE_TYPES[status] ?? (status >= 500 ? 'server_error' : 'invalid_request_error');
  return JSON.stringify({
    error: {
      message: `Simulated engine failure ${status}: UPSTREAM-SECRET-DETAIL worker=7 path=/srv/models/weights`,
      type,
      code: status,
    },
  });
}
