import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { pino } from 'pino';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startOtlpReceiver, type OtlpReceiver } from '../support/otlp-receiver.js';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
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

  const toolsCall = (base: string, name: string, traceparent: string) =>
    fetch(`${base}/tools/call`, {
      method: 'POST',
      headers: { authorization: `Bearer ${p.tokens.reader}`, 'content-type': 'application/json', traceparent },
      body: JSON.stringify({ name, arguments: {} }),
      signal: AbortSignal.timeout(10_000),
    });

  it("fleet_workloads: the caller's trace continued, a client span per node (the silent one failed), the node's NATS read its own span", async () => {
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
    const nodeRead = await otlp.waitFor(
      (s) => s.name === 'node_workloads' && s.startNs >= a.startNs && s.attributes['svc.node'] === 'node-a',
    );
    assert.equal(nodeRead.kind, SERVER);
    assert.equal(nodeRead.attributes['svc.outcome'], 'ok');
    assert.equal(nodeRead.parentSpanId, '');
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
