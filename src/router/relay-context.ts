import type { ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { ActiveRequest, RouterRegistry } from './records/router-registry.js';
import type { ModelRoute, RouterConfig } from '../config/router-config.js';
import type { FinishReason, OutputLimit, Refusal, RequestOutcome, RouteName } from '../schema/terminal-record.js';
import type { Admission } from './admission.js';
import type { DataPlaneKeys } from '../auth/api-keys.js';
import type { ReplicaSet } from './replica-set.js';
import type { UploadBudget } from './upload-budget.js';
import type { LineBudget } from '../http/line-budget.js';
import type { StreamObserver } from './stream-observer.js';
import type { ErrorCode } from '../errors.js';
import type { RequestTrace, SpanIds } from '../telemetry/trace-context.js';
import type { ResponseIds } from './response-ids.js';

/*
 * The types the relay's modules share (relay.ts and relay-upstream, -stream, -record,
 * -support): in their own module so that none of them imports relay.ts back.
 */

export interface Upstream {
  readonly route: ModelRoute;
  /** The alias's replicas: readiness, choice and failover (replica-set.ts). */
  readonly replicas: ReplicaSet;
  readonly admission: Admission;
  readonly apiKey: string | undefined;
  /** The routing configuration this entry belongs to: a request's record carries it, also after a reload. */
  readonly routingConfigHash: string;
}

export interface RelayContext {
  readonly cfg: RouterConfig;
  readonly registry: RouterRegistry;
  readonly keys: DataPlaneKeys;
  /** True for a credential the router knows that is not a data-plane key (a policy client's). */
  readonly knownCredential: (authorization: string | string[] | undefined) => boolean;
  /** True when a header value is itself a credential the router knows (a key or a policy token). */
  readonly isCredential: (value: string) => boolean;
  /** The routing table by alias: replaced whole by a reload (a request keeps the entry it began with). */
  upstreams: ReadonlyMap<string, Upstream>;
  readonly logger: Logger;
  readonly packageVersion: string;
  /** Bounds the `request finished` lines of failed requests (LineBudget). */
  readonly failureLines: LineBudget;
  /** Set when a graceful stop cuts the requests still running: they end as errors, not as client cancellations. */
  readonly stopping: { value: boolean };
  /** Answers whose request body is still arriving (cutUploads answers them at a graceful stop's cut). */
  readonly uploading: Map<ServerResponse, Caller>;
  /** Bounds the request bytes held while bodies arrive, across all requests. */
  readonly uploadBudget: UploadBudget;
  /** Ids for the router's own request spans: set only when traces are exported (docs/operations.md). */
  readonly spanIds: SpanIds | undefined;
  /** The Responses API responses relayed, and the replica of each (decision 0032); absent: none are remembered. */
  readonly responseIds?: ResponseIds;
}

/** What one exchange measured; turned into exactly one terminal record. */
export interface Exchange {
  readonly a: ActiveRequest;
  readonly route: RouteName;
  readonly t0: number;
  readonly obs: StreamObserver;
  readinessMs: number | null;
  admissionWaitMs: number | null;
  dispatchAt: number | null;
  upstreamEndAt: number | null;
  statusCode: number;
  outcome: RequestOutcome;
  outputLimit: OutputLimit | null;
  promptEstimate: number | null;
  streaming: boolean;
  finishOverride: FinishReason | null;
  /** The upstream's answer was seen: an SSE stream began, or a whole body arrived. */
  answered: boolean;
  /** The engine's HTTP status, once its answer's head arrived (else null). */
  upstreamStatus: number | null;
  /** Index of the replica that answered (the last one tried), or null when none was called. */
  upstreamReplica: number | null;
  /** Upstream attempts made (failover included). */
  attempts: number;
  /** The routing configuration the request began on. */
  routingConfigHash: string;
  /** Why a rejected exchange was refused (CONTRACT.md `refusal`), when it was. */
  refusal: Refusal | undefined;
}

/**
 * An authenticated inference request, as known before routing: its ids (set on every answer
 * to it), where it arrived, and the caller's lineage ids (credentials already dropped).
 */
export interface Caller {
  readonly gid: string;
  /** The record's `request_id`: the caller's valid legacy id, else `gid`. */
  readonly requestId: string;
  readonly route: RouteName;
  /** performance.now() and Date.now() when the request's headers arrived. */
  readonly arrivedAt: number;
  readonly arrivedMs: number;
  readonly sessionId: string | undefined;
  readonly workbenchRunId: string | undefined;
  readonly taskId: string | undefined;
  /** The W3C trace it belongs to (the caller's, continued), or undefined: trace-context.ts. */
  readonly trace: RequestTrace | undefined;
}

/**
 * A request turned away before routing: the error it is answered with, the record's
 * `refusal` (null: not a refusal, e.g. a graceful stop's 503), the alias it named when it
 * named one, and a parameter name (fixed, ours) for the error object.
 */
export interface Turned {
  readonly code: ErrorCode;
  readonly refusal: Refusal | null;
  readonly model?: string;
  readonly param?: string;
  /** The client left before its body arrived: nothing reached it (outcome disconnected). */
  readonly gone?: boolean;
}
