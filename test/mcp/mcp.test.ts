import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { pino } from 'pino';
import { LOG_OPTIONS } from '../../src/logger.js';
import { request } from 'node:http';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkNodeResult } from '../../src/schema/envelopes.js';
import { startController, type ControllerHandle } from '../../src/controller/controller.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { writeTestPolicy } from '../support/policy.js';
import { batch, enc, rec } from '../support/records.js';

describe('controller MCP (Streamable HTTP, SDK client)', () => {
  const p = writeTestPolicy();
  const bus = new InProcessBus();
  let ctl: ControllerHandle;
  const lines: string[] = [];
  before(async () => {
    const logger = pino({ ...LOG_OPTIONS, level: 'debug' }, { write: (s: string) => void lines.push(s) });
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
    const now = Date.now();
    bus.publish(
      'svc.v1.node-a.obs.media',
      enc(batch('node-a', 'media', { at: now, upserts: [rec('node-a', 'media', 'j', { at: now })] })),
    );
  });
  after(async () => {
    await ctl.close();
    await bus.close();
  });
  const connect = async (token: string): Promise<Client> => {
    const c = new Client({ name: 't', version: '1' });
    await c.connect(
      new StreamableHTTPClientTransport(new URL(`${ctl.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${token}` } },
      }),
    );
    return c;
  };

  it('lists node_workloads to a workloads:read client and answers with a NodeResult', async () => {
    const c = await connect(p.tokens.reader);
    const { tools } = await c.listTools();
    assert.deepEqual(
      tools.map((t) => t.name),
      ['node_workloads'],
    );
    const props = (tools[0]!.inputSchema as { properties: Record<string, unknown> }).properties;
    assert.deepEqual(Object.keys(props).sort(), [
      'active_only',
      'host',
      'kind',
      'limit',
      'owner',
      'recent_seconds',
      'state',
    ]);
    const res = await c.callTool({ name: 'node_workloads', arguments: { owner: 'media' } });
    assert.ok(checkNodeResult.Check(res.structuredContent));
    await c.close();
  });

  it('rejects unknown, null and mistyped filters as tool errors', async () => {
    const c = await connect(p.tokens.reader);
    // `constructor` too (the SDK's own validator would throw on it: an Internal error).
    for (const args of [
      { ownr: 'media' },
      { limit: null },
      { limit: '5' },
      { active_only: 'true' },
      JSON.parse('{"constructor":1}'),
      JSON.parse('{"owner":"router","constructor":{}}'),
    ]) {
      const res = await c.callTool({ name: 'node_workloads', arguments: args as Record<string, unknown> });
      assert.equal(res.isError, true, JSON.stringify(args));
    }
    await c.close();
  });

  it('shows nothing to clients without the grant and cannot be called by them', async () => {
    const c = await connect(p.tokens.bootstrap);
    assert.deepEqual((await c.listTools()).tools, []);
    const res = await c.callTool({ name: 'node_workloads', arguments: {} });
    assert.equal(res.isError, true);
    await c.close();
  });

  it('the JSON-RPC id never reaches the logs', async () => {
    const res = await fetch(`${ctl.url}/mcp`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${p.tokens.reader}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 'rpc-id-canary-7731', method: 'tools/list' }),
    });
    assert.equal(res.status, 200);
    assert.match(await res.text(), /rpc-id-canary-7731/, 'the id comes back in the outer response');
    assert.ok(!lines.join('').includes('rpc-id-canary-7731'));
    assert.ok(!lines.join('').includes(p.tokens.reader));
  });

  it('malformed JSON-RPC params are -32602 "Invalid params"; no error answer carries a validator\'s words or the input', async () => {
    const rpc = async (
      msg: Record<string, unknown>,
    ): Promise<{
      status: number;
      text: string;
      body: { id?: unknown; error?: { code: number; message: string; data?: unknown } };
    }> => {
      const res = await fetch(`${ctl.url}/mcp`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${p.tokens.reader}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body: JSON.stringify({ jsonrpc: '2.0', ...msg }),
      });
      const text = await res.text();
      return { status: res.status, text, body: JSON.parse(text) as never };
    };
    const canary = 'params-canary-5521';
    const bad: Record<string, unknown>[] = [
      { id: 1, method: 'tools/call', params: { name: 'node_workloads', arguments: canary } },
      { id: 2, method: 'tools/call', params: [canary] },
      { id: 3, method: 'tools/call', params: { arguments: {} } },
      { id: 4, method: 'tools/list', params: canary },
      {
        id: 'x5',
        method: 'initialize',
        params: { protocolVersion: 7, capabilities: {}, clientInfo: { name: canary, version: '1' } },
      },
      { id: 6, method: 'ping', params: 5 },
      // Shapes inside params, as the SDK's own schemas read them (it would answer -32603, or
      // -32600 without the id).
      {
        id: 13,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: { roots: 5 }, clientInfo: { name: 'n', version: '1' } },
      },
      {
        id: 14,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'n', version: '1', title: 5 } },
      },
      { id: 15, method: 'tools/call', params: { name: 'node_workloads', task: 5 } },
      { id: 16, method: 'tools/call', params: { name: 'node_workloads', _meta: { progressToken: { x: 1 } } } },
      { id: 'keep-me', method: 'ping', params: { _meta: { progressToken: 1.5 } } },
      { id: 17, method: 'tools/list', params: { _meta: { progressToken: null } } },
      {
        id: 18,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'n', version: '1' }, _meta: 5 },
      },
    ];
    for (const msg of bad) {
      const r = await rpc(msg);
      assert.equal(r.status, 200, JSON.stringify(msg));
      assert.deepEqual(
        r.body,
        { jsonrpc: '2.0', id: msg['id'], error: { code: -32602, message: 'Invalid params' } },
        JSON.stringify(msg),
      );
    }
    // What reaches the SDK and fails there keeps the SDK's code with a fixed text.
    const unknown = await rpc({ id: 7, method: `resources/${canary}` });
    assert.deepEqual(unknown.body.error, { code: -32601, message: 'Method not found' });
    const caps = await rpc({
      id: 8,
      method: 'initialize',
      params: {
        protocolVersion: '2025-06-18',
        capabilities: { sampling: canary },
        clientInfo: { name: 'n', version: '1' },
      },
    });
    assert.deepEqual(
      caps.body,
      { jsonrpc: '2.0', id: 8, error: { code: -32602, message: 'Invalid params' } },
      caps.text,
    );
    // A batch (a JSON array) is refused whole: one Invalid Request, nothing of it answered or echoed.
    const batchRes = await fetch(`${ctl.url}/mcp`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${p.tokens.reader}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify([
        { jsonrpc: '2.0', id: 10, method: 'tools/call', params: { name: 'node_workloads', arguments: canary } },
        { jsonrpc: '2.0', id: 11, method: 'ping' },
      ]),
    });
    assert.equal(batchRes.status, 400);
    assert.deepEqual(await batchRes.json(), {
      jsonrpc: '2.0',
      id: null,
      error: { code: -32600, message: 'Invalid Request' },
    });
    // Errors the SDK's transport writes itself carry fixed text too: never a header's value.
    const post = (headers: Record<string, string>, body: string) =>
      fetch(`${ctl.url}/mcp`, {
        method: 'POST',
        headers: { authorization: `Bearer ${p.tokens.reader}`, 'content-type': 'application/json', ...headers },
        body,
      });
    const both = { accept: 'application/json, text/event-stream' };
    const version = await post(
      { ...both, 'mcp-protocol-version': canary },
      JSON.stringify({ jsonrpc: '2.0', id: 12, method: 'ping' }),
    );
    const versionText = await version.text();
    assert.equal(version.status, 400);
    assert.ok(!versionText.includes(canary), versionText);
    assert.deepEqual(JSON.parse(versionText), { jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Error' } });
    const noAccept = await post({}, JSON.stringify({ jsonrpc: '2.0', id: 13, method: 'ping' }));
    assert.equal(noAccept.status, 406);
    assert.deepEqual(await noAccept.json(), { jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Error' } });
    // JSON that is not a JSON-RPC message is an Invalid Request, not a parse error.
    for (const body of [
      'null',
      JSON.stringify({ jsonrpc: '1.0', id: 14, method: 'ping' }),
      JSON.stringify({ jsonrpc: '2.0', id: { canary }, method: 'ping' }),
    ]) {
      const r = await post(both, body);
      const t = await r.text();
      assert.equal(r.status, 400, body);
      assert.deepEqual(
        JSON.parse(t),
        { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Invalid Request' } },
        body,
      );
    }
    // A well-formed call still works.
    const ok = await rpc({
      id: 9,
      method: 'tools/call',
      params: { name: 'node_workloads', arguments: { owner: 'media' } },
    });
    assert.equal((ok.body as { result?: { isError?: boolean } }).result?.isError, undefined);
  });

  it('other methods are 405 with Allow: POST; a caller without a credential gets 401 whatever body it sent', async () => {
    for (const method of ['GET', 'DELETE', 'PUT']) {
      const res = await fetch(`${ctl.url}/mcp`, { method, headers: { authorization: `Bearer ${p.tokens.reader}` } });
      assert.equal(res.status, 405, method);
      assert.equal(res.headers.get('allow'), 'POST', method);
      assert.match(res.headers.get('content-type') ?? '', /^application\/problem\+json/);
    }
    const anon = await fetch(`${ctl.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain' },
      body: 'x',
    });
    assert.equal(anon.status, 401);
    // Even a body that is not JSON from a caller without a credential: 401, not a parse error.
    const anonJson = await fetch(`${ctl.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"jsonrpc"',
    });
    assert.equal(anonJson.status, 401);
    assert.match(anonJson.headers.get('content-type') ?? '', /^application\/problem\+json/);
  });

  it('a query string on /mcp is refused (filters belong in the tool arguments), never answered unfiltered', async () => {
    const body = JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'node_workloads', arguments: {} },
    });
    const headers = {
      authorization: `Bearer ${p.tokens.reader}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    };
    const res = await fetch(`${ctl.url}/mcp?owner=media`, { method: 'POST', headers, body });
    assert.equal(res.status, 400);
    assert.match(res.headers.get('content-type') ?? '', /^application\/problem\+json/);
    assert.ok(!(await res.text()).includes('media'));
    // Without a credential the answer is still 401 first.
    assert.equal(
      (
        await fetch(`${ctl.url}/mcp?owner=media`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
        })
      ).status,
      401,
    );
  });

  it('a body that is not JSON is JSON-RPC -32700 "Parse error" (HTTP 400), without any of its text', async () => {
    const raw = (body: string) =>
      fetch(`${ctl.url}/mcp`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${p.tokens.reader}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body,
      });
    for (const body of ['{"jsonrpc":"2.0","id":1,"method":"tools/list"', 'parse-canary-7731', '']) {
      const res = await raw(body);
      assert.equal(res.status, 400, body);
      assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
      assert.deepEqual(
        await res.json(),
        { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } },
        body,
      );
    }
    // Valid JSON refused for `__proto__`, and a member named twice: not parse errors, the
    // fixed problem of every JSON route.
    for (const body of [
      '{"jsonrpc":"2.0","id":1,"method":"ping","__proto__":{"x":1}}',
      '{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"ping"}',
    ]) {
      const res = await raw(body);
      assert.equal(res.status, 400, body);
      assert.match(res.headers.get('content-type') ?? '', /^application\/problem\+json/, body);
    }
  });
});

describe('controller MCP Host guard: on loopback its own names only; listening elsewhere, any name (a credential is required either way)', () => {
  const p = writeTestPolicy();
  const post = (port: number, headers: Record<string, string>, address = '127.0.0.1'): Promise<number> =>
    new Promise((resolve, reject) => {
      // node:http, not fetch: fetch may not set Host.
      const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} });
      const req = request(
        {
          host: address,
          port,
          path: '/mcp',
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            authorization: `Bearer ${p.tokens.reader}`,
            ...headers,
          },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on('error', reject);
      req.end(body);
    });

  it('a controller on 0.0.0.0 (deploy/, docker-compose) serves MCP by any Host name or port mapping; a foreign Origin is still refused', async () => {
    const bus = new InProcessBus();
    const wide = await startController(
      {
        hostId: 'node-a',
        listen: { host: '0.0.0.0', port: 0 },
        nats: undefined,
        policyPath: p.path,
        staleAfterMs: 30_000,
        stateDir: p.dir,
      },
      { logger: pino({ level: 'silent' }), env: p.env, bus },
    );
    const loop = await startController(
      {
        hostId: 'node-b',
        listen: { host: '127.0.0.1', port: 0 },
        nats: undefined,
        policyPath: p.path,
        staleAfterMs: 30_000,
        stateDir: mkdtempSync(join(tmpdir(), 'svc-mcp-host-')),
      },
      { logger: pino({ level: 'silent' }), env: p.env, bus },
    );
    try {
      const wport = Number(new URL(wide.url).port);
      const lport = Number(new URL(loop.url).port);
      assert.equal(await post(wport, { host: `node-a.internal:${wport}` }), 200);
      assert.equal(await post(wport, { host: '127.0.0.1:8101' }), 200, 'a port mapping (compose node-b)');
      assert.equal(await post(wport, { host: 'node-a.internal', origin: 'http://node-a.internal' }), 200);
      assert.equal(await post(wport, { host: `node-a.internal:${wport}`, origin: 'http://evil.example' }), 403);
      // On loopback, a page that rebinds a name to 127.0.0.1 is refused.
      assert.equal(await post(lport, { host: `evil.example:${lport}` }), 403);
      assert.equal(await post(lport, { host: `127.0.0.1:${lport}` }), 200);
      // Another loopback address it listens on names it too.
      const other = await startController(
        {
          hostId: 'node-c',
          listen: { host: '127.0.0.2', port: 0 },
          nats: undefined,
          policyPath: p.path,
          staleAfterMs: 30_000,
          stateDir: mkdtempSync(join(tmpdir(), 'svc-mcp-host-')),
        },
        { logger: pino({ level: 'silent' }), env: p.env, bus },
      );
      try {
        const oport = Number(new URL(other.url).port);
        assert.equal(await post(oport, { host: `127.0.0.2:${oport}` }, '127.0.0.2'), 200);
        assert.equal(await post(oport, { host: `evil.example:${oport}` }, '127.0.0.2'), 403);
      } finally {
        await other.close();
      }
    } finally {
      await wide.close();
      await loop.close();
      await bus.close();
    }
  });
});
