/** `npm run docs:openapi`: rewrites docs/reference/openapi-<server>.json from the built code. */
import { writeFileSync } from 'node:fs';
import { SERVERS, documentPath, openApiDocument } from './openapi-document.js';

for (const server of SERVERS) {
  writeFileSync(documentPath(server), await openApiDocument(server));
  process.stdout.write(`${documentPath(server)}\n`);
}
