import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { pino } from 'pino';
import { checkNodeResult } from '../../src/schema/envelopes.js';
import { startController, type ControllerHandle } from '../../src/servers/controller.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { writeTestPolicy } from '../support/policy.js';
import { batch, enc, rec } from '../support/records.js';

describe('controller MCP (Streamable HTTP, SDK client)', () => {
  const p = writeTestPolicy();
  const bus = new InProcessBus();
  let ctl: ControllerHandle;
  const lines: string[] = [];
  before(async () => {
    const logger = pino({ level: 'debug' }, { write: (s: string) => void lines.push(s) });
    ctl = await startController(
      { hostId: 'node-a', listen: { host: '127.0.0.1', port: 0 }, nats: undefined, policyPath: p.path, staleAfterMs: 30_000, stateDir: p.dir },
      { logger, env: p.env, bus },
    );
    const now = Date.now();
    bus.publish('svc.v1.node-a.obs.media', enc(batch('node-a', 'media', { at: now, upserts: [rec('node-a', 'media', 'j', { at: now })] })));
  });
  after(async () => {
    await ctl.close();
    await bus.close();
  });
  const connect = async (token: string): Promise<Client> => {
    const c = new Client({ name: 't', version: '1' });
    await c.connect(new StreamableHTTPClientTransport(new URL(`${ctl.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${token}` } } }));
    return c;
  };

  it('lists node_workloads to a workloads:read client and answers with a NodeResult', async () => {
    const c = await connect(p.tokens.reader);
    const { tools } = await c.listTools();
    assert.deepEqual(tools.map((t) => t.name), ['node_workloads']);
    const props = (tools[0]!.inputSchema as { properties: Record<string, unknown> }).properties;
    assert.deepEqual(Object.keys(props).sort(), ['active_only', 'host', 'kind', 'limit', 'owner', 'recent_seconds', 'state']);
    const res = await c.callTool({ name: 'node_workloads', arguments: { owner: 'media' } });
    assert.ok(checkNodeResult.Check(res.structuredContent));
    await c.close();
  });

  it('rejects unknown, null and mistyped filters as tool errors', async () => {
    const c = await connect(p.tokens.reader);
    for (const args of [{ ownr: 'media' }, { limit: null }, { limit: '5' }, { active_only: 'true' }]) {
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
      headers: { authorization: `Bearer ${p.tokens.reader}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 'rpc-id-canary-7731', method: 'tools/list' }),
    });
    assert.equal(res.status, 200);
    assert.match(await res.text(), /rpc-id-canary-7731/, 'the id comes back in the outer response');
    assert.ok(!lines.join('').includes('rpc-id-canary-7731'));
    assert.ok(!lines.join('').includes(p.tokens.reader));
  });

  it('other methods are 405 with Allow: POST; a caller without a credential gets 401 whatever body it sent', async () => {
    for (const method of ['GET', 'DELETE', 'PUT']) {
      const res = await fetch(`${ctl.url}/mcp`, { method, headers: { authorization: `Bearer ${p.tokens.reader}` } });
      assert.equal(res.status, 405, method);
      assert.equal(res.headers.get('allow'), 'POST', method);
      assert.match(res.headers.get('content-type') ?? '', /^application\/problem\+json/);
    }
    const anon = await fetch(`${ctl.url}/mcp`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'x' });
    assert.equal(anon.status, 401);
  });
});
