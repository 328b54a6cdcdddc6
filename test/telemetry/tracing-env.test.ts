/**
 * Tracing reads the environment a server is given (deps.env, as `svc-serving up` and tests
 * pass it), not process.env: two routers in one process export to their own collectors, with
 * their own settings, and a third without OTEL_* settings exports nothing. Real routers, a
 * real engine sim, real OTLP/HTTP receivers.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { loadRouterConfig } from '../../src/config/router-config.js';
import { startEngineSim, type EngineSim } from '../../src/engine-sim/engine-sim.js';
import { startRouter, type RouterHandle } from '../../src/router/router.js';
import { tracingRequested } from '../../src/telemetry/tracing.js';
import { startOtlpReceiver, type OtlpReceiver } from '../support/otlp-receiver.js';
import { writeTestPolicy } from '../support/policy.js';

const KEY = 'tracing-env-key-0123';

describe('tracing reads the env each server is given', () => {
  const p = writeTestPolicy();
  let sim: EngineSim;
  let otlpA: OtlpReceiver;
  let otlpB: OtlpReceiver;
  const routers: RouterHandle[] = [];

  const start = async (host: string, otel: Record<string, string>): Promise<RouterHandle> => {
    const path = join(p.dir, `${host}.toml`);
    writeFileSync(
      path,
      [
        '[server]',
        `host_id = "${host}"`,
        'listen = "127.0.0.1:0"',
        'api_keys_env = "UNIT_KEYS"',
        `authorization_policy = "${p.path}"`,
        '',
        '[[models]]',
        'alias = "m"',
        `upstream = "${sim.url}/v1"`,
        'upstream_model = "sim"',
      ].join('\n'),
    );
    const router = await startRouter(loadRouterConfig(path), {
      logger: pino({ level: 'silent' }),
      env: { ...p.env, UNIT_KEYS: KEY, ...otel },
    });
    routers.push(router);
    return router;
  };
  const chat = async (router: RouterHandle): Promise<string> => {
    const res = await fetch(`${router.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hello' }] }),
    });
    assert.equal(res.status, 200);
    await res.text();
    return res.headers.get('x-svc-request-id')!;
  };

  before(async () => {
    // The test process itself asks for no traces: only the routers' own env may.
    assert.equal(tracingRequested(process.env), false, 'run without OTEL_* export settings');
    sim = await startEngineSim({
      host: '127.0.0.1',
      port: 0,
      logger: pino({ level: 'silent' }),
      ttftMs: 0,
      tokenDelayMs: 0,
      tokens: 3,
      model: 'sim',
      maxModelLen: 8192,
    });
    otlpA = await startOtlpReceiver();
    otlpB = await startOtlpReceiver();
  });
  after(async () => {
    for (const r of routers) await r.close();
    await sim?.close();
    await otlpA?.close();
    await otlpB?.close();
  });

  it('two routers in one process export to their own collectors with their own settings; one without settings exports nothing', async () => {
    const a = await start('node-a', {
      OTEL_EXPORTER_OTLP_ENDPOINT: otlpA.url,
      OTEL_SERVICE_NAME: 'svc-router-a',
      OTEL_BSP_SCHEDULE_DELAY: '50',
    });
    const b = await start('node-b', {
      OTEL_EXPORTER_OTLP_ENDPOINT: otlpB.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_SERVICE_NAME: 'svc-router-b',
      OTEL_BSP_SCHEDULE_DELAY: '50',
    });
    const c = await start('node-c', {});
    const idA = await chat(a);
    const idB = await chat(b);
    const idC = await chat(c);
    const spanA = await otlpA.waitFor((s) => s.attributes['svc.request_id'] === idA);
    const spanB = await otlpB.waitFor((s) => s.attributes['svc.request_id'] === idB);
    assert.equal(spanA.resource['service.name'], 'svc-router-a');
    assert.equal(spanB.resource['service.name'], 'svc-router-b');
    // Each collector got its own router's export, in its own protocol.
    assert.ok(otlpA.exports.every((e) => /^application\/x-protobuf/.test(e.contentType)));
    assert.ok(otlpB.exports.every((e) => /^application\/json/.test(e.contentType)));
    // Close the routers: whatever is left is exported before the check below.
    for (const r of routers.splice(0)) await r.close();
    const ids = (o: OtlpReceiver) => o.spans.map((s) => s.attributes['svc.request_id']);
    assert.deepEqual(ids(otlpA), [idA], "only router a's span at a's collector");
    assert.deepEqual(ids(otlpB), [idB], "only router b's span at b's collector");
    assert.ok(!ids(otlpA).includes(idC) && !ids(otlpB).includes(idC), 'router c exports nothing');
  });
});
