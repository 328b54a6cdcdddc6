import { Type, type TSchema, type TUnsafe } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import type { FastifySchemaCompiler, FastifySerializerCompiler } from 'fastify';
import { InvalidInputError } from '../errors.js';
import { OpenAIError, Problem } from '../schema/problem.js';

/**
 * Route schemas (docs/decisions/0040-route-schemas-document-the-parsers.md). Every route
 * declares its params, query string, body and responses; the OpenAPI document
 * (docs/reference/openapi.json) is generated from them. Two rules keep the wire unchanged:
 * - A request part whose route reads it with the project's own parser (the query string,
 *   every JSON body checked after the route's credential check, a relayed body) is declared
 *   with `parsedByHandler`: Fastify runs no validator on it, and its type is `unknown` so the
 *   handler must parse it. Any other part is checked by TypeBox's compiled checker (no
 *   coercion, no defaults, nothing stripped) and a failure is the fixed invalid-input problem.
 * - Responses are documentation only: they are serialized by JSON.stringify (what Fastify
 *   does without a response schema), never by fast-json-stringify, which drops members the
 *   schema does not name and writes numbers its own way.
 */
const PARSED_BY_HANDLER = Symbol('svc.parsedByHandler');

/**
 * `schema` as the description of a request part that the route's own parser enforces
 * (`parser`, named for the reader of this code): Fastify does not validate it (that would come
 * before the route's credential check, or disagree with the parser's finer errors).
 */
export function parsedByHandler<T extends TSchema>(schema: T, _parser: string): TUnsafe<unknown> {
  const out = Type.Unsafe<unknown>(schema);
  Object.defineProperty(out, PARSED_BY_HANDLER, { value: true });
  return out;
}

/** The app's validator compiler: the parser's part passes through; every other part is checked strictly. */
export const validatorCompiler: FastifySchemaCompiler<TSchema> = ({ schema }) => {
  if ((schema as { [PARSED_BY_HANDLER]?: boolean })[PARSED_BY_HANDLER]) return () => true;
  const check = TypeCompiler.Compile(schema);
  return (data: unknown) => (check.Check(data) ? true : { error: new InvalidInputError() });
};

/** The app's serializer compiler: JSON.stringify, byte for byte what Fastify sends without a response schema. */
export const serializerCompiler: FastifySerializerCompiler<unknown> = () => (data) => JSON.stringify(data);

/** Schemas every app knows by name; the OpenAPI document lists them once under components. */
export const SHARED_SCHEMAS: readonly TSchema[] = [
  { ...Problem, $id: 'Problem' },
  { ...OpenAIError, $id: 'OpenAIError' },
];

/** A query string that the route refuses outright (400), never ignores. */
export const NoQuery = parsedByHandler(
  Type.Object({}, { additionalProperties: false, description: 'no query string: any is refused (400)' }),
  'the route (noQuery)',
);

const ref = (id: string): TSchema => Type.Unsafe({ $ref: `${id}#` });

/** A response with a JSON body described by `schema`. */
export function jsonResponse(description: string, schema: TSchema, type = 'application/json'): object {
  return { description, content: { [type]: { schema } } };
}

const STATUS_TEXT: Readonly<Record<number, string>> = {
  400: 'invalid input (names the failing member in invalid_params where the route knows it)',
  401: 'missing or unknown credential (with WWW-Authenticate: Bearer)',
  403: 'the credential lacks the needed grant, or the Host or Origin is not this server',
  404: 'not found',
  405: 'method not allowed (with Allow)',
  413: 'request body too large',
  415: 'unsupported media type (JSON only)',
  429: 'admission refused',
  500: 'internal error',
  502: 'upstream failed',
  503: 'unavailable (reads disabled, or the owner cannot answer now)',
  504: 'upstream timed out',
};

/** Problem answers (application/problem+json) for these statuses. */
export function problemResponses(...statuses: number[]): Record<number, object> {
  const out: Record<number, object> = {};
  for (const s of statuses)
    out[s] = jsonResponse(STATUS_TEXT[s] ?? 'error', ref('Problem'), 'application/problem+json');
  return out;
}

/** OpenAI error objects (application/json) for these statuses: the router's data plane. */
export function openAIErrorResponses(...statuses: number[]): Record<number, object> {
  const out: Record<number, object> = {};
  for (const s of statuses) out[s] = jsonResponse(STATUS_TEXT[s] ?? 'error', ref('OpenAIError'));
  return out;
}

/** No credential needed (`security: []` in the document); every other route takes a bearer token. */
export const NO_CREDENTIAL: { [scheme: string]: readonly string[] }[] = [];
/** A bearer token only when the server's configuration asks for one. */
export const OPTIONAL_CREDENTIAL: { [scheme: string]: readonly string[] }[] = [{}, { bearerAuth: [] }];
