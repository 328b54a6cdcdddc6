import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { REGENERATE, SERVERS, documentPath, openApiDocument } from '../../tools/openapi/openapi-document.js';

// build/test/docs -> the repository root.
const ROOT = join(import.meta.dirname, '..', '..', '..');

for (const server of SERVERS) {
  test(`${documentPath(server)} is what the ${server}'s routes generate`, async () => {
    const generated = await openApiDocument(server);
    let committed: string;
    try {
      committed = readFileSync(join(ROOT, documentPath(server)), 'utf8');
    } catch {
      committed = '';
    }
    assert.ok(
      committed === generated,
      `${documentPath(server)} does not match the routes' schemas: run \`${REGENERATE}\` and commit the result`,
    );
  });
}

test('the documents are generated the same way twice (no dates, ports or unsorted keys)', async () => {
  assert.equal(await openApiDocument('controller'), await openApiDocument('controller'));
});

test('every route of each document takes a bearer credential unless it says otherwise, and errors reference Problem or OpenAIError', async () => {
  const router = JSON.parse(await openApiDocument('router'));
  assert.equal(router.openapi, '3.1.0');
  assert.deepEqual(router.security, [{ bearerAuth: [] }]);
  assert.equal(router.components.securitySchemes.bearerAuth.scheme, 'bearer');
  // Data plane: OpenAI error objects; control plane: problems.
  const chat = router.paths['/v1/chat/completions'].post.responses['404'].content['application/json'].schema;
  assert.equal(chat.$ref, '#/components/schemas/OpenAIError');
  const models = router.paths['/v1/models'].get.responses['401'].content['application/json'].schema;
  assert.equal(models.$ref, '#/components/schemas/OpenAIError');
  const lookup = router.paths['/v1/requests/{id}'].get.responses['404'].content['application/problem+json'].schema;
  assert.equal(lookup.$ref, '#/components/schemas/Problem');
  // The workload filters are the seven query parameters, from the filters' own schema.
  const names = router.paths['/v1/workloads'].get.parameters.map((p: { name: string }) => p.name).sort();
  assert.deepEqual(names, ['active_only', 'host', 'kind', 'limit', 'owner', 'recent_seconds', 'state']);
  const dashboard = JSON.parse(await openApiDocument('dashboard'));
  assert.deepEqual(dashboard.paths['/ws'].get.security, []);
});
