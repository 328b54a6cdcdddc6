import { Type, type Static } from '@sinclair/typebox';
import { PROBLEM_TYPE_PREFIX } from '../errors.js';

/** One failing member of an invalid input (CONTRACT.md `invalid_params`): fixed texts only. */
export const InvalidParam = Type.Object(
  {
    name: Type.String({ description: 'the member, argument or filter name' }),
    reason: Type.String({ description: 'a fixed phrase; never a value the caller sent' }),
  },
  { additionalProperties: false },
);

/**
 * The control plane's error body (RFC 9457 `application/problem+json`, CONTRACT.md): a fixed
 * type, title and status; `invalid_params` names the failing member where the route knows it.
 * Never the URL, a query value, a credential, an upstream body or exception text.
 */
export const Problem = Type.Object(
  {
    type: Type.String({ description: `\`${PROBLEM_TYPE_PREFIX}\` followed by the problem's slug` }),
    title: Type.String({ description: 'fixed text of the problem' }),
    status: Type.Integer({ minimum: 400, maximum: 599 }),
    code: Type.Optional(Type.String({ description: 'stable slug of the problem (CONTRACT.md)' })),
    invalid_params: Type.Optional(Type.Array(InvalidParam, { minItems: 1 })),
  },
  { additionalProperties: false, title: 'Problem' },
);
export type Problem = Static<typeof Problem>;

/** The `type` of an OpenAI error object, by HTTP status (CONTRACT.md, revision 2). */
export const OPENAI_ERROR_TYPES = [
  'invalid_request_error',
  'authentication_error',
  'permission_error',
  'rate_limit_error',
  'api_error',
] as const;

/**
 * The router data plane's error body (every `/v1/*` inference and model route; CONTRACT.md
 * revision 2): what OpenAI SDKs read, so they show the message and do not retry a client mistake.
 */
export const OpenAIError = Type.Object(
  {
    error: Type.Object(
      {
        message: Type.String({ description: 'a fixed sentence naming what is wrong and which parameter' }),
        type: Type.Union(
          OPENAI_ERROR_TYPES.map((t) => Type.Literal(t)),
          {
            description:
              'invalid_request_error (400, 404, 413, 415, 422), authentication_error (401), permission_error (403), rate_limit_error (429), api_error (5xx)',
          },
        ),
        param: Type.Union([Type.String(), Type.Null()], { description: 'the parameter at fault, or null' }),
        code: Type.String({ description: 'stable slug, e.g. model_not_found, upstream_rejected' }),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false, title: 'OpenAIError' },
);
export type OpenAIError = Static<typeof OpenAIError>;
