import type { IncomingMessage } from 'node:http';
import { sendError, sendJson, type SimResponse } from './engine-sim-http.js';

/*
 * The Responses the sim keeps, as vLLM keeps its own in the memory of its process: what
 * `GET /v1/responses/{id}` reads back and `POST /v1/responses/{id}/cancel` cancels while a
 * `background` response is still `queued` or `in_progress`. Bounded (vLLM's store is not):
 * a benchmark that sends millions of requests through the sim must not grow it forever.
 */

/** Responses kept at most; the oldest goes first. */
export const MAX_STORED_RESPONSES = 1024;

/** One kept Response, and the timers that still change it (a background answer's progress). */
interface Stored {
  response: Record<string, unknown>;
  timers: NodeJS.Timeout[];
}

export class ResponseStore {
  private readonly byId = new Map<string, Stored>();

  constructor(private readonly max = MAX_STORED_RESPONSES) {}

  /** Keeps `response` (under its `id`), replacing what was kept under that id; timers that still change it go with it. */
  put(response: Record<string, unknown>, timers: NodeJS.Timeout[] = []): void {
    const id = response['id'] as string;
    const old = this.byId.get(id);
    if (old !== undefined) {
      this.byId.delete(id);
      stop(old.timers);
    }
    this.byId.set(id, { response, timers });
    if (this.byId.size > this.max) {
      const [oldest, entry] = this.byId.entries().next().value as [string, Stored];
      stop(entry.timers);
      this.byId.delete(oldest);
    }
  }

  /** Replaces a kept Response by a later state of it (a timer of its own fired), if it is still kept. */
  update(id: string, response: Record<string, unknown>): void {
    const s = this.byId.get(id);
    if (s !== undefined) s.response = response;
  }

  get(id: string): Record<string, unknown> | undefined {
    return this.byId.get(id)?.response;
  }

  /**
   * Cancels a background response still `queued` or `in_progress` (its timers stop; it stays
   * kept as `cancelled`) and returns it; 'sync' for one in any other state; undefined when unknown.
   */
  cancel(id: string): Record<string, unknown> | 'sync' | undefined {
    const s = this.byId.get(id);
    if (s === undefined) return undefined;
    const status = s.response['status'];
    if (status !== 'queued' && status !== 'in_progress') return 'sync';
    stop(s.timers);
    s.timers = [];
    s.response = { ...s.response, status: 'cancelled' };
    return s.response;
  }

  /** Stops every timer (the sim is closing). */
  clear(): void {
    for (const s of this.byId.values()) stop(s.timers);
    this.byId.clear();
  }
}

function stop(timers: readonly NodeJS.Timeout[]): void {
  for (const t of timers) clearTimeout(t);
}

/** A response id vLLM takes: it begins with `resp` (anything else is its 400). */
const RESPONSE_ID = /^resp/;

/**
 * `GET /v1/responses/{id}` and `POST /v1/responses/{id}/cancel`, as vLLM answers them for the
 * Responses it keeps: the Response; 404 for an id it does not hold; 400 for an id that does
 * not begin with `resp`, and for a cancel of a response that is no background one in
 * progress. `rest` is the path after `/v1/responses/`. Any other path under it is 404, and
 * another method on a response's path 405 (vLLM serves no DELETE and no input items).
 */
export function handleStoredResponse(
  store: ResponseStore,
  req: IncomingMessage,
  res: SimResponse,
  rest: string,
  method: string | undefined,
): void {
  const slash = rest.indexOf('/');
  const id = slash < 0 ? rest : rest.slice(0, slash);
  const action = slash < 0 ? '' : rest.slice(slash + 1);
  const known = action === '' ? method === 'GET' : action === 'cancel' ? method === 'POST' : undefined;
  if (known === undefined || id.length === 0)
    return sendError(req, res, 404, 'Not Found', 'invalid_request_error', 404);
  if (!known) return sendError(req, res, 405, 'Method Not Allowed', 'invalid_request_error', 405);
  if (!RESPONSE_ID.test(id))
    return sendError(
      req,
      res,
      400,
      "Invalid 'response_id'. Expected an ID that begins with 'resp'.",
      'invalid_request_error',
      400,
      'response_id',
    );
  const found = action === 'cancel' ? store.cancel(id) : store.get(id);
  if (found === undefined)
    // vLLM names the id it did not find; the sim does not echo what it was sent.
    return sendError(req, res, 404, 'Response not found.', 'invalid_request_error', 404, 'response_id');
  if (found === 'sync')
    return sendError(req, res, 400, 'Cannot cancel a synchronous response.', 'invalid_request_error', 400);
  sendJson(req, res, 200, JSON.stringify(found));
}
