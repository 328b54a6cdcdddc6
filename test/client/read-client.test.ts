import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { readFleet, readNode, READ_FAILURES } from '../../src/client/read-client.js';
import { startController, type ControllerHandle } from '../../src/controller/controller.js';
import { ErrorCode, SvcError } from '../../src/errors.js';
import { startFleet, type FleetHandle } from '../../src/fleet/fleet.js';
import { checkFleetResult, checkNodeResult } from '../../src/schema/envelopes.js';
import { resolveFilters } from '../../src/schema/filters.js';
import { createNodeSnapshot } from '../../src/streams/node-snapshot.js';
import { ROUTER_OWNERS, queryNode } from '../../src/streams/query-node.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { writeTestPolicy } from '../support/policy.js';
import { batch, enc, rec } from '../support/records.js';

/** A stand-in server: answers every request with what `answer` writes. */
async function fakeServer(
  answer: (res: ServerResponse, path: string) => void,
): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => answer(res, req.url ?? ''));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

/** Asserts a coded failure whose message is the fixed text and carries none of `secrets`. */
async function rejectsWith(p: Promise<unknown>, code: ErrorCode, message: string, secrets: string[]): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof SvcError);
    assert.equal(err.code, code);
    assert.equal(err.message, message);
    for (const s of secrets) assert.ok(!String(err.stack).includes(s) && !err.message.includes(s));
    return true;
  });
}

describe('read client against a real controller and fleet (in process)', () => {
  const p = writeTestPolicy();
  const bus = new InProcessBus();
  const logger = pino({ level: 'silent' });
  let ctl: ControllerHandle;
  let fleet: FleetHandle;
  before(async () => {
    ctl = await startController(
      {
        hostId: 'node-a',
        listen: { host: '127.0.0.1', port: 0 },
        nats: undefined,
        policyPath: p.path,
        staleAfterMs: 30_000,
        stateDir: p.dir,
      },
      { logger, env: p.env, bus },
    );
    fleet = await startFleet(
      {
        listen: { host: '127.0.0.1', port: 0 },
        nats: undefined,
        policyPath: p.path,
        nodeTimeoutMs: 300,
        nodes: [
          { hostId: 'node-a', sleeping: false },
          { hostId: 'node-z', sleeping: false },
        ],
      },
      { logger, env: p.env, bus },
    );
    const now = Date.now();
    bus.publish(
      'svc.v1.node-a.obs.media',
      enc(batch('node-a', 'media', { at: now, upserts: [rec('node-a', 'media', 'j', { at: now })] })),
    );
  });
  after(async () => {
    await fleet.close();
    await ctl.close();
    await bus.close();
  });

  it("readNode returns the controller's NodeResult, filtered, for the expected node", async () => {
    const r = await readNode({
      url: ctl.url,
      token: p.tokens.reader,
      filters: { owner: 'media' },
      expectedNode: 'node-a',
    });
    assert.ok(checkNodeResult.Check(r));
    assert.equal(r.expected_host, 'node-a');
    assert.deepEqual(
      r.sources.flatMap((s) => s.records.map((x) => x.owner)),
      ['media'],
    );
  });

  it('readNode refuses an answer for another node than expected', async () => {
    await rejectsWith(
      readNode({ url: ctl.url, token: p.tokens.reader, expectedNode: 'node-b' }),
      ErrorCode.UPSTREAM_FAILED,
      READ_FAILURES.identity,
      [p.tokens.reader, ctl.url],
    );
  });

  it('a refused credential is SVC_ERR_UNAUTHENTICATED or SVC_ERR_FORBIDDEN with a fixed message', async () => {
    const canary = 'canary-token-9931';
    await rejectsWith(readNode({ url: ctl.url, token: canary }), ErrorCode.UNAUTHENTICATED, READ_FAILURES.status, [
      canary,
      ctl.url,
    ]);
    await rejectsWith(
      readFleet({ url: fleet.url, token: p.tokens.lifecycle }),
      ErrorCode.FORBIDDEN,
      READ_FAILURES.status,
      [p.tokens.lifecycle, fleet.url],
    );
  });

  it('readFleet returns the FleetResult with every declared node, the silent one unreachable', async () => {
    const f = await readFleet({ url: fleet.url, token: p.tokens.reader, filters: { owner: 'media' } });
    assert.ok(checkFleetResult.Check(f));
    assert.deepEqual(
      f.nodes.map((n) => [n.expected_host, n.condition]),
      [
        ['node-a', undefined],
        ['node-z', 'unreachable'],
      ],
    );
    assert.equal(f.status, 'partial');
  });

  it('invalid filters and URLs are refused before anything is sent', async () => {
    await assert.rejects(
      readNode({ url: ctl.url, token: p.tokens.reader, filters: { limit: 0 } }),
      (e: unknown) => e instanceof SvcError && e.code === ErrorCode.INVALID_INPUT,
    );
    for (const url of [`${ctl.url}/tools`, 'ftp://127.0.0.1', 'http://user:pw@127.0.0.1:1', 'not a url']) {
      await rejectsWith(readNode({ url, token: p.tokens.reader }), ErrorCode.INVALID_INPUT, READ_FAILURES.url, [
        p.tokens.reader,
        'pw',
      ]);
    }
    // As in the CLI: the credential crosses a network in the clear only to a private address.
    for (const url of ['http://controller.example:8100', 'http://8.8.8.8:8100', 'http://[2001:db8::1]:8100']) {
      await rejectsWith(readFleet({ url, token: p.tokens.reader }), ErrorCode.INVALID_INPUT, READ_FAILURES.plainHttp, [
        p.tokens.reader,
        'example',
      ]);
    }
  });
});

describe('read client against answers it must not believe', () => {
  const token = 'tok-canary-4417';
  const servers: Server[] = [];
  const serve = async (answer: (res: ServerResponse, path: string) => void): Promise<string> => {
    const s = await fakeServer(answer);
    servers.push(s.server);
    return s.url;
  };
  after(() => servers.forEach((s) => s.close()));
  const json = (res: ServerResponse, body: unknown): void =>
    void res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(typeof body === 'string' ? body : JSON.stringify(body));

  it('a malformed answer (not JSON, wrong schema, a member named twice) is refused with a fixed message', async () => {
    for (const body of [
      '{"schema": "svc-workloads/v1", "secret-body-text": ',
      JSON.stringify({ schema: 'svc-workloads/v1', secret: 'secret-body-text' }),
      '{"a":1,"a":"secret-body-text"}',
    ]) {
      const url = await serve((res) => json(res, body));
      await rejectsWith(readNode({ url, token }), ErrorCode.UPSTREAM_FAILED, READ_FAILURES.malformed, [
        token,
        url,
        'secret-body-text',
      ]);
      await rejectsWith(readFleet({ url, token }), ErrorCode.UPSTREAM_FAILED, READ_FAILURES.malformed, [
        token,
        url,
        'secret-body-text',
      ]);
    }
  });

  it('a redirect is never followed, and an oversized answer is discarded', async () => {
    let followed = false;
    const target = await serve(() => void (followed = true));
    const url = await serve((res) => void res.writeHead(307, { location: `${target}/tools/call` }).end());
    await rejectsWith(readNode({ url, token }), ErrorCode.UPSTREAM_FAILED, READ_FAILURES.redirect, [
      token,
      url,
      target,
    ]);
    assert.equal(followed, false);
    const big = await serve((res) => json(res, `{"x":"${'a'.repeat(2 * 1024 * 1024)}"}`));
    await rejectsWith(readNode({ url: big, token }), ErrorCode.UPSTREAM_FAILED, READ_FAILURES.oversized, [token, big]);
  });

  it('via router: GET /v1/workloads with the filters as a query, one router source held to its claims', async () => {
    let asked = '';
    const answer = queryNode(createNodeSnapshot('node-r'), resolveFilters({ owner: 'router' }), Date.now(), {
      owners: ROUTER_OWNERS,
      staleAfterMs: 30_000,
    });
    const url = await serve((res, path) => {
      asked = path;
      json(res, answer);
    });
    const r = await readNode({
      url,
      token,
      via: 'router',
      filters: { owner: 'router', limit: 5 },
      expectedNode: 'node-r',
    });
    assert.equal(asked, '/v1/workloads?owner=router&limit=5');
    assert.equal(r.status, 'unavailable');
    await rejectsWith(
      readNode({ url, token, via: 'router', expectedNode: 'node-q' }),
      ErrorCode.UPSTREAM_FAILED,
      READ_FAILURES.identity,
      [token],
    );
  });

  it('a server that is not there is SVC_ERR_UNAVAILABLE; one that sends nothing times out', async () => {
    const gone = await serve(() => undefined);
    servers.pop()!.close();
    await new Promise((r) => setTimeout(r, 50));
    await rejectsWith(readNode({ url: gone, token }), ErrorCode.UNAVAILABLE, READ_FAILURES.transport, [token, gone]);
    const silent = await serve(() => undefined);
    await rejectsWith(
      readNode({ url: silent, token, timeoutMs: 200 }),
      ErrorCode.UPSTREAM_TIMEOUT,
      READ_FAILURES.timeout,
      [token, silent],
    );
    servers.forEach((s) => s.closeAllConnections());
  });
});
