import type { ModelRoute } from '../config/router-config.js';

/**
 * A Responses API response id as the router keeps it: `resp_` and up to 200 letters, digits,
 * `_` or `-` (vLLM's and OpenAI's ids are `resp_` and hex). An id of any other shape is never
 * learned, so a retrieve of it is not found.
 */
export const RESPONSE_ID_RE = /^resp_[A-Za-z0-9_-]{1,200}$/;

/** Response ids remembered at most; the one learned longest ago is forgotten first. */
export const MAX_RESPONSE_IDS = 10_000;

/** Where a relayed response was made: the alias, and its replica by base URL (not index: a reload may reorder them). */
export interface ResponseHome {
  readonly alias: string;
  readonly base: string;
}

/**
 * The responses the router relayed, by id, and where each was made. An engine keeps its
 * responses in the memory of its own process (vLLM does), so a retrieve or a cancel of one
 * must go to the replica that made it: the router learns that from the answers it relays (the
 * Response's `id`, a stream's `response.created`) and remembers the last MAX_RESPONSE_IDS of
 * them. Ids only, never anything of the responses. docs/decisions/0032.
 */
export class ResponseIds {
  private readonly homes = new Map<string, ResponseHome>();

  constructor(private readonly max = MAX_RESPONSE_IDS) {}

  /** Notes that response `id` was made by replica `replica` (index) of `route`'s alias. */
  learn(id: string, route: ModelRoute, replica: number): void {
    const target = route.replicas[replica];
    if (target === undefined || !RESPONSE_ID_RE.test(id)) return;
    // Learned again: it moves to the newest end.
    this.homes.delete(id);
    this.homes.set(id, { alias: route.alias, base: target.base });
    if (this.homes.size > this.max) this.homes.delete(this.homes.keys().next().value as string);
  }

  /** Where response `id` was made, or undefined when the router did not relay it or has forgotten it. */
  find(id: string): ResponseHome | undefined {
    return this.homes.get(id);
  }

  get size(): number {
    return this.homes.size;
  }
}
