import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { Type } from '@sinclair/typebox';
import { ErrorCode, ForbiddenError, UnauthenticatedError } from '../errors.js';
import { jsonResponse, openAIErrorResponses, parsedByHandler } from '../http/route-schemas.js';
import type { Caller, RelayContext } from './relay-context.js';
import { identify } from './relay-intake.js';
import { turnAway } from './relay-refusal.js';
import { RESPONSE_ID_RE } from './response-ids.js';
import { sendRawError } from './relay-support.js';
import { relayStored, type StoredAction } from './responses-stored.js';

export interface ResponsesRoutesOptions {
  readonly ctx: RelayContext;
  /** Counts a request refused before authentication (`svc_router_auth_refusals_total`). */
  readonly authRefused: (status: number) => void;
}

const ResponseIdParams = parsedByHandler(
  Type.Object({
    response_id: Type.String({
      pattern: RESPONSE_ID_RE.source,
      description:
        'the id of a response this router relayed (`resp_...`); any other is 404 response_not_found, after the credential check',
    }),
  }),
  'the route (response-ids.ts)',
);

const RefusedQuery = parsedByHandler(
  Type.Object(
    {},
    {
      additionalProperties: false,
      description: 'none: a query string (stream, starting_after, include) is refused, 400 unsupported_parameter',
    },
  ),
  'the route',
);

const ENGINE_RESPONSE = Type.Object(
  {},
  { additionalProperties: true, description: "the engine's Response object, relayed as it came" },
);

const RECORDED =
  'Answers carry X-Svc-Request-Id and X-Request-Id once authenticated (errors included), and each such request leaves one terminal record (route `responses`). docs/decisions/0032.';

const retrieveSchema = {
  summary: 'A response this router relayed, retrieved from the replica that made it',
  description: RECORDED,
  tags: ['router'],
  params: ResponseIdParams,
  querystring: RefusedQuery,
  response: {
    200: jsonResponse('the Response as the engine keeps it', ENGINE_RESPONSE),
    ...openAIErrorResponses(400, 401, 403, 404, 409, 413, 422, 429, 502, 503, 504),
  },
};

const cancelSchema = {
  ...retrieveSchema,
  summary: 'Cancels a background response this router relayed, at the replica that made it',
  response: {
    200: jsonResponse('the Response, status cancelled', ENGINE_RESPONSE),
    ...openAIErrorResponses(400, 401, 403, 404, 409, 413, 415, 422, 429, 502, 503, 504),
  },
};

const notServedSchema = (summary: string) => ({
  summary,
  description: `Not served: the engines the router relays to (vLLM) offer no such route. ${RECORDED}`,
  tags: ['router'],
  params: ResponseIdParams,
  response: { ...openAIErrorResponses(400, 401, 403, 404) },
});

/**
 * The Responses API routes on a stored response (decision 0032): retrieve and cancel are
 * relayed to the replica that made the response; delete and the input items list are 404
 * `not_served` (no engine the router relays to offers them). Each request is authenticated
 * with a data-plane key and, from then on, answered with its ids and recorded once, as the
 * inference routes are (it leaves Fastify's reply for the relay's own writers then).
 */
export const responsesRoutes: FastifyPluginAsync<ResponsesRoutesOptions> = async (
  app: FastifyInstance,
  o: ResponsesRoutesOptions,
) => {
  const ctx = o.ctx;
  /** The caller once authenticated (the reply is then the relay's to write), else thrown. */
  const authenticated = (req: FastifyRequest, reply: FastifyReply): Caller | undefined => {
    const authorization = req.headers.authorization;
    if (!ctx.keys.accepts(authorization)) {
      // A policy client's token is a known credential without data-plane access: 403, not 401.
      const known = ctx.knownCredential(authorization);
      o.authRefused(known ? 403 : 401);
      throw known ? new ForbiddenError() : new UnauthenticatedError();
    }
    reply.hijack();
    return identify(req.raw, reply.raw, 'responses', ctx);
  };
  const stored =
    (action: StoredAction) =>
    async (req: FastifyRequest, reply: FastifyReply): Promise<void> => {
      const c = authenticated(req, reply);
      if (c === undefined) return;
      if (req.url.includes('?'))
        return turnAway(
          ctx,
          c,
          reply.raw,
          { code: ErrorCode.RESPONSE_QUERY_REFUSED, refusal: 'invalid_request' },
          undefined,
        );
      try {
        await relayStored(ctx, c, reply.raw, (req.params as { response_id: string }).response_id, action);
      } catch (err) {
        // Nothing expected throws here (its record is written whatever happens): the last line
        // of defence, as for the relay (router.ts relayCrashed).
        ctx.logger.error({ err }, 'relay failed unexpectedly');
        if (!reply.raw.headersSent) sendRawError(reply.raw, ErrorCode.INTERNAL);
        else reply.raw.destroy();
      }
    };
  const notServed = async (req: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const c = authenticated(req, reply);
    if (c !== undefined)
      turnAway(ctx, c, reply.raw, { code: ErrorCode.RESPONSE_ROUTE_NOT_SERVED, refusal: 'invalid_request' }, undefined);
  };

  app.get('/v1/responses/:response_id', { schema: retrieveSchema }, stored('retrieve'));
  app.post('/v1/responses/:response_id/cancel', { schema: cancelSchema }, stored('cancel'));
  app.delete(
    '/v1/responses/:response_id',
    { schema: notServedSchema('Deleting a response: not served (404 not_served)') },
    notServed,
  );
  app.get(
    '/v1/responses/:response_id/input_items',
    { schema: notServedSchema("A response's input items: not served (404 not_served)") },
    notServed,
  );
};
