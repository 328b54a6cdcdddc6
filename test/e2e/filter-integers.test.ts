import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serveNodeWorkloads } from '../../src/controller/workloads-responder.js';
import { workloadsSubject } from '../../src/schema/subjects.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { createNodeSnapshot } from '../../src/streams/node-snapshot.js';
import { CONTROLLER_OWNERS, queryNode } from '../../src/streams/query-node.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { runCli } from '../cli/run-cli.js';

/**
 * One table, every entry point that takes the integer filters: the router's HTTP query, the
 * controller's /tools/call and /mcp (raw JSON text, as a client may write it), NATS
 * request/reply, and the CLI. An integer is accepted written as plain digits only.
 */
const TABLE: ReadonlyArray<{ readonly written: string; readonly accepted: boolean }> = [
  { written: '100', accepted: true },
  { written: '1', accepted: true },
  { written: '1e2', accepted: false },
  { written: '1E2', accepted: false },
  { written: '1e+2', accepted: false },
  { written: '100.0', accepted: false },
  { written: '100.00', accepted: false },
  { written: '1.5', accepted: false },
  { written: '10e1', accepted: false },
  { written: '1000.0e-1', accepted: false },
  { written: '-0', accepted: false },
  { written: '0', accepted: false },
  { written: '100000', accepted: false },
];
const MEMBERS = ['limit', 'recent_seconds'] as const;

describe('integer filters written as plain integers only, at every entry point (one table)', () => {
  const home = mkdtempSync(join(tmpdir(), 'svc-ints-'));
  let node: RunningProcess;
  let routerUrl = '';
  let controllerUrl = '';
  let reader = '';

  before(async () => {
    node = await spawnNode(CLI, ['up', '--router-port', '0', '--controller-port', '0', '--dashboard-port', '0'], {
      env: { SVC_SERVING_HOME: home },
    });
    await eventually(() => /controller +(http:\/\/\S+)/.test(node.output()), 10_000);
    routerUrl = /router +(http:\/\/\S+)/.exec(node.output())![1]!;
    controllerUrl = /controller +(http:\/\/\S+)/.exec(node.output())![1]!;
    reader = readFileSync(join(home, 'reader.token'), 'utf8').trim();
  });
  after(async () => {
    await node?.stop();
  });

  const post = (path: string, text: string, extra: Record<string, string> = {}): Promise<Response> =>
    fetch(`${controllerUrl}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${reader}`, 'content-type': 'application/json', ...extra },
      body: text,
    });

  it("the router's HTTP query", async () => {
    for (const m of MEMBERS) {
      for (const { written, accepted } of TABLE) {
        const res = await fetch(`${routerUrl}/v1/workloads?${m}=${encodeURIComponent(written)}`, {
          headers: { authorization: `Bearer ${reader}` },
        });
        await res.arrayBuffer();
        assert.equal(res.status, accepted ? 200 : 400, `${m}=${written}`);
      }
    }
  });

  it("the controller's /tools/call, with the number written as the client wrote it", async () => {
    for (const m of MEMBERS) {
      for (const { written, accepted } of TABLE) {
        const res = await post('/tools/call', `{"name":"node_workloads","arguments":{"${m}":${written}}}`);
        const body = (await res.json()) as Record<string, unknown>;
        assert.equal(res.status, accepted ? 200 : 400, `${m}: ${written}`);
        if (!accepted && written.length > 1)
          assert.ok(
            !JSON.stringify(body).includes(written),
            `the refusal does not repeat the value: ${JSON.stringify(body)}`,
          );
      }
    }
  });

  it("the controller's /mcp tools/call (raw JSON-RPC text)", async () => {
    for (const m of MEMBERS) {
      for (const { written, accepted } of TABLE) {
        const res = await post(
          '/mcp',
          `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"node_workloads","arguments":{"${m}":${written}}}}`,
          {
            accept: 'application/json, text/event-stream',
            'mcp-protocol-version': '2025-06-18',
          },
        );
        const body = (await res.json()) as { id: unknown; result?: { isError?: boolean; structuredContent?: unknown } };
        assert.equal(res.status, 200, `${m}: ${written}`);
        assert.equal(body.id, 7);
        assert.equal(
          body.result?.isError === true,
          !accepted,
          `${m}: ${written} ${accepted ? 'answered' : 'refused as a tool error'}`,
        );
        if (accepted) assert.ok(body.result?.structuredContent);
      }
    }
  });

  it('a JSON-RPC id written with a fraction is not echoed back as something else', async () => {
    const res = await post('/mcp', '{"jsonrpc":"2.0","id":7.0,"method":"tools/list"}', {
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-06-18',
    });
    const body = (await res.json()) as { id: unknown; error?: { code: number } };
    assert.equal(res.status, 400);
    assert.equal(body.id, null);
    assert.equal(body.error?.code, -32600);
  });

  it('NATS request/reply (node_workloads on svc.v1.<host>.workloads)', async () => {
    const bus = new InProcessBus();
    const snap = createNodeSnapshot('node-a');
    const service = serveNodeWorkloads(bus, 'node-a', (f) =>
      queryNode(snap, f, Date.now(), { staleAfterMs: 30_000, owners: CONTROLLER_OWNERS }),
    );
    try {
      for (const m of MEMBERS) {
        for (const { written, accepted } of TABLE) {
          const reply = JSON.parse(
            new TextDecoder().decode(
              await bus.request(workloadsSubject('node-a'), new TextEncoder().encode(`{"${m}":${written}}`), {
                timeoutMs: 1000,
              }),
            ),
          ) as Record<string, unknown>;
          assert.equal(reply['schema'] === 'svc-workloads/v1', accepted, `${m}: ${written}`);
          if (!accepted) assert.equal(reply['status'], 400);
        }
      }
    } finally {
      service.stop();
      await bus.close();
    }
  });

  it('the CLI (exit 2 before any read; the value is not repeated)', async () => {
    for (const [m, flag] of [
      ['limit', '--limit'],
      ['recent_seconds', '--recent-seconds'],
    ] as const) {
      for (const { written, accepted } of TABLE) {
        const r = await runCli(
          [
            'router',
            'workloads',
            '--router-url',
            routerUrl,
            '--auth-env',
            'TOKEN',
            '--expected-node',
            'local',
            flag,
            written,
            '--json',
          ],
          { TOKEN: reader },
        );
        assert.equal(r.code, accepted ? 0 : 2, `${m} ${written}: ${r.stderr}`);
        if (!accepted && written.length > 1) assert.ok(!r.stderr.includes(written), 'the error omits the operand');
      }
    }
  });
});
