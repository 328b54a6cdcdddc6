import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { pino } from 'pino';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startOtlpReceiver, type OtlpReceiver } from '../support/otlp-receiver.js';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { connect } from '@nats-io/transport-node';
import { connectNatsBus, type NatsBus } from '../../src/streams/nats-bus.js';
import { writeTestPolicy } from '../support/policy.js';
import { startController } from '../../src/controller/controller.js';
import { startFleet } from '../../src/fleet/fleet.js';

/*
 * The controller's and the fleet's reads as spans, as a collector receives them: a fleet read
 * over real NATS is one server span (the caller's trace continued) with one child span per
 * declared node; the node's NATS read is a span of its own. The OTEL_* variables are in the
 * env each server is given (deps.env), as `svc-serving up` gives it.
 */

const SERVER = 2;
const CLIENT = 3;
const STATUS_ERROR = 2;
const STATUS_UNSET = 0;

describe('controller and fleet traces over OTLP: a fleet read has one child span per node', () => {
  const logger = pino({ level: 'silent' });
  const p = writeTestPolicy();
  let otlp: OtlpReceiver;
  let nats: NatsServerHandle;
  let ctlBus: NatsBus;
  let fleetBus: NatsBus;
  let ctl: { url: string; close(): Promise<void> };
  let fleet: { url: string; close(): Promise<void> };
  before(async () => {
    otlp = await startOtlpReceiver();
    const env = {
      ...p.env,
      OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '50',
      OTEL_SERVICE_NAME: 'svc-test-fleet',
    };
    nats = await startNatsServer();
    ctlBus = await connectNatsBus({ servers: nats.url, logger });
    fleetBus = await connectNatsBus({ servers: nats.url, logger });
    ctl = await startController(
      {
        hostId: 'node-a',
        listen: { host: '127.0.0.1', port: 0 },
        nats: undefined,
        policyPath: p.path,
        staleAfterMs: 30_000,
        stateDir: p.dir,
      },
      { logger, env, bus: ctlBus },
    );
    fleet = await startFleet(
      {
        listen: { host: '127.0.0.1', port: 0 },
        nats: undefined,
        policyPath: p.path,
        nodeTimeoutMs: 300,
        nodes: [
          { hostId: 'node-a', sleeping: false },
          { hostId: 'node-b', sleeping: false },
        ],
      },
      { logger, env, bus: fleetBus },
    );
  });
  after(async () => {
    await fleet?.close();
    await ctl?.close();
    await ctlBus?.close();
    await fleetBus?.close();
    await nats?.stop();
    await otlp?.close();
  });

  const toolsCall = (base: string, name: string, traceparent: string, more: Record<string, string> = {}) =>
    fetch(`${base}/tools/call`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${p.tokens.reader}`,
        'content-type': 'application/json',
        traceparent,
        ...more,
      },
      body: JSON.stringify({ name, arguments: {} }),
      signal: AbortSignal.timeout(10_000),
    });

  it("fleet_workloads: the caller's trace continued, a client span per node (the silent one failed), the node's NATS read under its node's span", async () => {
    const traceId = randomBytes(16).toString('hex');
    const parent = randomBytes(8).toString('hex');
    const res = await toolsCall(fleet.url, 'fleet_workloads', `00-${traceId}-${parent}-01`);
    assert.equal(res.status, 200);
    await res.text();
    const read = await otlp.waitFor((s) => s.traceId === traceId && s.name === 'tools/call fleet_workloads');
    assert.equal(read.parentSpanId, parent);
    assert.equal(read.kind, SERVER);
    assert.equal(read.status.code, STATUS_UNSET);
    assert.deepEqual(read.attributes, {
      'svc.tool': 'fleet_workloads',
      'http.route': '/tools/call',
      'http.response.status_code': 200,
    });
    assert.equal(read.resource['service.name'], 'svc-test-fleet');
    const a = await otlp.waitFor((s) => s.traceId === traceId && s.name === 'workloads node-a');
    const b = await otlp.waitFor((s) => s.traceId === traceId && s.name === 'workloads node-b');
    for (const child of [a, b]) {
      assert.equal(child.parentSpanId, read.spanId);
      assert.equal(child.kind, CLIENT);
      assert.ok(child.startNs >= read.startNs && child.endNs <= read.endNs, 'within the read');
    }
    assert.deepEqual(a.attributes, { 'svc.node': 'node-a', 'svc.node.answer': 'reply' });
    assert.equal(a.status.code, STATUS_UNSET);
    assert.deepEqual(b.attributes, {
      'svc.node': 'node-b',
      'svc.node.answer': 'unreachable',
      'error.type': 'unreachable',
    });
    assert.equal(b.status.code, STATUS_ERROR);
    // The node's read joins the trace over NATS: a child of the fleet's span for that node.
    const nodeRead = await otlp.waitFor((s) => s.traceId === traceId && s.name === 'node_workloads');
    assert.equal(nodeRead.kind, SERVER);
    assert.equal(nodeRead.attributes['svc.outcome'], 'ok');
    assert.equal(nodeRead.attributes['svc.node'], 'node-a');
    assert.equal(nodeRead.parentSpanId, a.spanId);
    assert.equal(nodeRead.resource['service.name'], 'svc-test-fleet');
  });

  it("the caller's tracestate goes with the fleet's NATS requests into the node's span; one naming a known credential goes nowhere", async () => {
    // What the fleet puts on the wire, seen by a plain subscriber beside the node's responder.
    const nc = await connect({ servers: nats.url });
    const seen: { traceparent: string; tracestate: string }[] = [];
    nc.subscribe('svc.v1.*.workloads', {
      callback: (_err, msg) => {
        seen.push({
          traceparent: msg.headers?.get('traceparent') ?? '',
          tracestate: msg.headers?.get('tracestate') ?? '',
        });
      },
    });
    await nc.flush();
    try {
      const traceId = randomBytes(16).toString('hex');
      const res = await toolsCall(fleet.url, 'fleet_workloads', `00-${traceId}-${randomBytes(8).toString('hex')}-01`, {
        tracestate: 'vendor=abc123,other=x-1',
      });
      assert.equal(res.status, 200);
      await res.text();
      const a = await otlp.waitFor((s) => s.traceId === traceId && s.name === 'workloads node-a');
      const nodeRead = await otlp.waitFor((s) => s.traceId === traceId && s.name === 'node_workloads');
      assert.equal(nodeRead.parentSpanId, a.spanId);
      assert.equal(nodeRead.traceState, 'vendor=abc123,other=x-1');
      const sent = seen.filter((h) => h.traceparent.includes(traceId));
      assert.equal(sent.length, 2, 'one request per awake node');
      assert.ok(sent.some((h) => h.traceparent === `00-${traceId}-${a.spanId}-01`));
      for (const h of sent) assert.equal(h.tracestate, 'vendor=abc123,other=x-1');

      // The caller's own token pasted into its tracestate: dropped whole, on the wire and in every span.
      const canary = randomBytes(16).toString('hex');
      const res2 = await toolsCall(fleet.url, 'fleet_workloads', `00-${canary}-${randomBytes(8).toString('hex')}-01`, {
        tracestate: `vendor=${p.tokens.reader}`,
      });
      assert.equal(res2.status, 200);
      await res2.text();
      const nodeRead2 = await otlp.waitFor((s) => s.traceId === canary && s.name === 'node_workloads');
      assert.equal(nodeRead2.traceState, '');
      const sent2 = seen.filter((h) => h.traceparent.includes(canary));
      assert.equal(sent2.length, 2);
      for (const h of sent2) assert.equal(h.tracestate, '', 'no tracestate on the wire');
      await nc.flush();
      assert.ok(!JSON.stringify(seen).includes(p.tokens.reader), 'the token never reached NATS');
      for (const e of otlp.exports)
        assert.ok(!e.body.toString('latin1').includes(p.tokens.reader), 'the token is in no export');
    } finally {
      await nc.close();
    }
  });

  it('a node checks the trace context a NATS request brings: an invalid traceparent starts its own trace; a tracestate naming one of its credentials is dropped', async () => {
    const ask = (headers: Record<string, string>) =>
      fleetBus.request('svc.v1.node-a.workloads', new TextEncoder().encode('{}'), { timeoutMs: 5_000, headers });
    const before = otlp.spans.length;
    await ask({ traceparent: 'not-a-traceparent', tracestate: 'vendor=keep-out' });
    const own = await otlp.waitFor(
      (s) => s.name === 'node_workloads' && otlp.spans.indexOf(s) >= before && s.parentSpanId === '',
    );
    assert.equal(own.traceState, '', 'no tracestate without a valid traceparent');
    const traceId = randomBytes(16).toString('hex');
    const parent = randomBytes(8).toString('hex');
    await ask({ traceparent: `00-${traceId}-${parent}-01`, tracestate: `vendor=${p.tokens.lifecycle}` });
    const joined = await otlp.waitFor((s) => s.traceId === traceId && s.name === 'node_workloads');
    assert.equal(joined.parentSpanId, parent);
    assert.equal(joined.traceState, '', "a node's known credential is dropped");
    for (const e of otlp.exports)
      assert.ok(!e.body.toString('latin1').includes(p.tokens.lifecycle), 'the token is in no export');
  });

  it("the controller's node_workloads over /tools/call is a span of the caller's trace; a refused call ends it failed", async () => {
    const traceId = randomBytes(16).toString('hex');
    const parent = randomBytes(8).toString('hex');
    const res = await toolsCall(ctl.url, 'node_workloads', `00-${traceId}-${parent}-01`);
    assert.equal(res.status, 200);
    await res.text();
    const s = await otlp.waitFor((x) => x.traceId === traceId && x.name === 'tools/call node_workloads');
    assert.equal(s.parentSpanId, parent);
    assert.equal(s.attributes['svc.tool'], 'node_workloads');
    // The fleet tool is not served by a node: 404, and its span says so.
    const other = randomBytes(16).toString('hex');
    const refused = await toolsCall(ctl.url, 'fleet_workloads', `00-${other}-${parent}-01`);
    assert.equal(refused.status, 404);
    await refused.text();
    const f = await otlp.waitFor((x) => x.traceId === other);
    assert.equal(f.status.code, STATUS_ERROR);
    assert.equal(f.attributes['error.type'], 'SVC_ERR_NOT_FOUND');
  });

  it("an MCP tools/call on the fleet (the official MCP client) is a span of the caller's trace, with its per-node children", async () => {
    const traceId = randomBytes(16).toString('hex');
    const parent = randomBytes(8).toString('hex');
    const c = new Client({ name: 't', version: '1' });
    await c.connect(
      new StreamableHTTPClientTransport(new URL(`${fleet.url}/mcp`), {
        requestInit: {
          headers: { authorization: `Bearer ${p.tokens.reader}`, traceparent: `00-${traceId}-${parent}-01` },
        },
      }),
    );
    try {
      const res = await c.callTool({ name: 'fleet_workloads', arguments: {} });
      assert.notEqual(res.isError, true);
    } finally {
      await c.close();
    }
    const read = await otlp.waitFor((s) => s.traceId === traceId && s.name === 'tools/call fleet_workloads');
    assert.equal(read.parentSpanId, parent);
    assert.equal(read.attributes['http.route'], '/mcp');
    assert.equal(read.status.code, STATUS_UNSET);
    const child = await otlp.waitFor((s) => s.traceId === traceId && s.name === 'workloads node-a');
    assert.equal(child.parentSpanId, read.spanId);
  });
});
