import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { Type, type TSchema } from '@sinclair/typebox';
import { ErrorCode, SvcError } from '../errors.js';
import { ROUTES, isGenerationRoute, type RouteName } from '../schema/terminal-record.js';
import { openAIErrorResponses, parsedByHandler } from '../http/route-schemas.js';

/** The path of each inference route (`chat.completions` -> `/v1/chat/completions`), as router.ts matches them. */
export const INFERENCE_PATHS: ReadonlyMap<RouteName, string> = new Map(
  ROUTES.map((r) => [r, `/v1/${r.replace('.', '/')}`] as const),
);

const RELAYED =
  "Relayed to the engine as sent (bytes, not a re-encoding), except `model` (the engine's served name) and the output limit (bounded by the alias's `max_output_tokens`). The router reads only the members below; the engine judges the rest.";

const Alias = Type.String({ description: 'the model alias (router configuration `[[models]] alias`)' });
const OutputLimit = Type.Integer({ minimum: 0, description: "bounded by the alias's max_output_tokens" });

const JSON_BODIES: Readonly<Record<Exclude<RouteName, 'audio.transcriptions'>, TSchema>> = {
  'chat.completions': Type.Object(
    {
      model: Alias,
      stream: Type.Optional(Type.Boolean()),
      max_completion_tokens: Type.Optional(Type.Union([OutputLimit, Type.Null()])),
      max_tokens: Type.Optional(Type.Union([OutputLimit, Type.Null()])),
    },
    { additionalProperties: true, description: RELAYED },
  ),
  completions: Type.Object(
    {
      model: Alias,
      stream: Type.Optional(Type.Boolean()),
      max_tokens: Type.Optional(Type.Union([OutputLimit, Type.Null()])),
    },
    { additionalProperties: true, description: RELAYED },
  ),
  responses: Type.Object(
    {
      model: Alias,
      stream: Type.Optional(Type.Boolean()),
      max_output_tokens: Type.Optional(Type.Union([OutputLimit, Type.Null()])),
    },
    { additionalProperties: true, description: RELAYED },
  ),
  embeddings: Type.Object({ model: Alias }, { additionalProperties: true, description: RELAYED }),
  rerank: Type.Object({ model: Alias }, { additionalProperties: true, description: RELAYED }),
};

const TranscriptionForm = Type.Object(
  { model: Alias, file: Type.String({ contentEncoding: 'binary' }) },
  { additionalProperties: true, description: RELAYED },
);

/** The request headers the router reads on an inference route (docs/api.md, Request identification headers). */
const InferenceHeaders = Type.Object({
  'x-request-id': Type.Optional(
    Type.String({ description: "the caller's own request id, kept as the record's request_id when valid" }),
  ),
  'x-svc-session-id': Type.Optional(Type.String({ description: 'bounded opaque session id' })),
  'x-session-affinity': Type.Optional(Type.String({ description: 'read when X-Svc-Session-Id is absent' })),
  'x-svc-workbench-run-id': Type.Optional(Type.String({ description: 'lineage; never forwarded upstream' })),
  'x-svc-task-id': Type.Optional(Type.String({ description: 'lineage; never forwarded upstream' })),
});

const ENGINE_ANSWER = Type.Object(
  {},
  { additionalProperties: true, description: "the engine's OpenAI-compatible answer, relayed as it came" },
);

function bodyOf(route: RouteName): object {
  if (route === 'audio.transcriptions')
    return { content: { 'multipart/form-data': { schema: parsedByHandler(TranscriptionForm, 'the relay') } } };
  return { content: { 'application/json': { schema: parsedByHandler(JSON_BODIES[route], 'the relay') } } };
}

function successOf(route: RouteName): object {
  const streams = isGenerationRoute(route);
  return {
    description: streams
      ? "the engine's answer; with `stream: true`, its server-sent events as the engine streams them"
      : "the engine's answer",
    content: {
      'application/json': { schema: ENGINE_ANSWER },
      ...(streams ? { 'text/event-stream': { schema: Type.String() } } : {}),
    },
  };
}

/**
 * The router's inference routes, for the OpenAPI document only. In the router they never reach
 * Fastify: its node:http server hands them straight to the relay (router.ts), which reads and
 * forwards the body itself. So this plugin is registered by the document's generator
 * (tools/openapi), never by the router; its handlers answer nothing but the fixed 500.
 */
export const inferenceRouteDocs: FastifyPluginAsync = async (app: FastifyInstance) => {
  for (const [route, path] of INFERENCE_PATHS) {
    const schema = {
      summary: `OpenAI-compatible ${route}, relayed to the alias's engine`,
      description:
        'Answers carry X-Svc-Request-Id (every authenticated request, errors included) and X-Request-Id; every such request leaves one terminal record.',
      tags: ['router'],
      headers: parsedByHandler(InferenceHeaders, 'the relay'),
      body: bodyOf(route),
      response: {
        200: successOf(route),
        ...openAIErrorResponses(400, 401, 403, 404, 409, 413, 415, 422, 429, 502, 503, 504),
      },
    };
    app.post(path, { schema }, async () => {
      throw new SvcError(ErrorCode.INTERNAL);
    });
  }
};
