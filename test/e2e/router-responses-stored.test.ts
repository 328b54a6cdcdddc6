/**
 * Stored responses through the router (decision 0032): `client.responses.retrieve`, `.cancel`,
 * `.delete` and `.inputItems.list` with the official OpenAI SDK against the real router and
 * real engine sim processes, two of them replicas of one alias that each keep only the
 * responses they made.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { checkTerminalRecord, type TerminalRecord } from '../../src/schema/terminal-record.js';
import { GID } from '../support/router-e2e.js';
import { startRouterHarness, type RouterHarness } from '../support/router-harness.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { runCli } from '../cli/run-cli.js';

const T = { timeout: 120_000 };

/** An `engine sim` process on a free loopback port, serving the harness's model name. */
function sim(): Promise<RunningProcess> {
  return spawnNode(CLI, ['engine', 'sim', '--listen', '127.0.0.1:0', '--ttft-ms', '5', '--tokens', '3']);
}

type ApiError = InstanceType<typeof OpenAI.APIError>;

describe(
  'router end to end: stored responses (retrieve, cancel; delete and input items not served), OpenAI SDK client',
  T,
  () => {
    let h: RouterHarness;
    let client: OpenAI;
    let a: RunningProcess;
    let b: RunningProcess;
    before(async () => {
      [a, b] = await Promise.all([sim(), sim()]);
      h = await startRouterHarness({
        models: [
          { alias: 'resp', max_output_tokens: 16 },
          // Two replicas, one attempt: the create goes to one of them, which alone keeps the response.
          { alias: 'pair', upstreams: [`${a.url}/v1`, `${b.url}/v1`], max_attempts: 1, upstream_model: 'sim-model' },
        ],
      });
      client = h.client();
    });
    after(async () => {
      await h?.stop();
      await Promise.all([a?.stop(), b?.stop()]);
    });

    const record = async (id: string): Promise<TerminalRecord> => {
      const r = await eventually(
        async () => {
          const got = await h.lookup(id);
          return got.status === 200 ? got : undefined;
        },
        3000,
        20,
      );
      assert.ok(checkTerminalRecord.Check(r.body.request), 'a valid terminal record');
      return r.body.request as TerminalRecord;
    };
    const gidOf = (res: { headers: Headers }): string => {
      const id = res.headers.get('x-svc-request-id');
      assert.match(id ?? '', GID);
      return id!;
    };
    /** What the SDK's error says about the router's answer, and that answer's record. */
    const refused = async (p: Promise<unknown>): Promise<{ err: ApiError; rec: TerminalRecord }> => {
      let caught: unknown;
      await p.catch((e: unknown) => {
        caught = e;
      });
      assert.ok(caught instanceof OpenAI.APIError, `an APIError, got ${String(caught)}`);
      const err = caught as ApiError;
      const gid = err.headers?.get('x-svc-request-id');
      assert.match(gid ?? '', GID, 'the refusal carries its id');
      return { err, rec: await record(gid!) };
    };

    it('retrieve goes to the replica that made the response: each answers its own (buffered and streamed), the record says which', async () => {
      const made: Array<{ response: OpenAI.Responses.Response; replica: number | null }> = [];
      for (let i = 0; i < 4; i++) {
        if (i % 2 === 0) {
          const { data, response } = await client.responses
            .create({ model: 'pair', input: `hello ${i}` })
            .withResponse();
          made.push({ response: data, replica: (await record(gidOf(response))).upstream_replica ?? null });
        } else {
          const { data: stream, response } = await client.responses
            .create({ model: 'pair', input: `hello ${i}`, stream: true })
            .withResponse();
          let final: OpenAI.Responses.Response | undefined;
          for await (const e of stream) if (e.type === 'response.completed') final = e.response;
          made.push({ response: final!, replica: (await record(gidOf(response))).upstream_replica ?? null });
        }
      }
      assert.deepEqual(
        new Set(made.map((m) => m.replica)),
        new Set([0, 1]),
        'both replicas made some (each keeps only its own)',
      );
      for (const m of made) {
        const { data, response } = await client.responses.retrieve(m.response.id).withResponse();
        assert.equal(data.id, m.response.id);
        assert.equal(data.output_text, 'tok tok tok ');
        assert.equal(data.status, 'completed');
        const r = await record(gidOf(response));
        assert.equal(response.headers.get('x-request-id'), r.request_id);
        assert.deepEqual(
          {
            route: r.route,
            model: r.model,
            outcome: r.outcome,
            status: r.status_code,
            upstream: r.upstream_status,
            replica: r.upstream_replica,
            attempts: r.attempts,
          },
          {
            route: 'responses',
            model: 'pair',
            outcome: 'success',
            status: 200,
            upstream: 200,
            replica: m.replica,
            attempts: 1,
          },
        );
        // Nothing was generated: no finish, usage unknown (the tokens are the create's), no output limit.
        assert.equal(r.finish_reason, null);
        assert.deepEqual(r.usage, {
          prompt_tokens: null,
          completion_tokens: null,
          prompt_source: 'unknown',
          completion_source: 'unknown',
        });
        assert.equal(r.output_limit, null);
        assert.equal(r.time_to_first_content_ms, null);
        assert.equal(typeof r.upstream_duration_ms, 'number');
      }
    });

    it('background: create answers queued; retrieve polls it to completed; cancel of one in progress is relayed; a second cancel is the engine 400', async () => {
      const queued = await client.responses.create({
        model: 'pair',
        input: 'sim:tokens=3 sim:ttft_ms=200 sim:token_delay_ms=20',
        background: true,
      });
      assert.equal(queued.status, 'queued');
      const done = await eventually(
        async () => {
          const r = await client.responses.retrieve(queued.id);
          return r.status === 'completed' ? r : undefined;
        },
        5000,
        50,
      );
      assert.equal(done.output_text, 'tok tok tok ');
      const slow = await client.responses.create({ model: 'pair', input: 'sim:ttft_ms=60000', background: true });
      const { data: cancelled, response } = await client.responses.cancel(slow.id).withResponse();
      assert.equal(cancelled.status, 'cancelled');
      const r = await record(gidOf(response));
      assert.equal(r.outcome, 'success');
      assert.equal(r.route, 'responses');
      assert.equal((await client.responses.retrieve(slow.id)).status, 'cancelled');
      // The engine's refusal, relayed with its status and words to this caller only.
      const again = await refused(client.responses.cancel(slow.id));
      assert.ok(again.err instanceof OpenAI.BadRequestError);
      assert.equal(again.err.code, 'upstream_rejected');
      assert.match(again.err.message, /Cannot cancel a synchronous response/);
      assert.equal(again.rec.outcome, 'rejected');
      assert.equal(again.rec.refusal, 'upstream_rejected');
      assert.equal(again.rec.status_code, 400);
      assert.equal(again.rec.model, 'pair');
      // Canary: the engine's text is the caller's only.
      assert.doesNotMatch(JSON.stringify(h.decisions()), /Cannot cancel/);
      assert.doesNotMatch(h.routerOutput(), /Cannot cancel/);
    });

    it('an id the router did not relay is 404 response_not_found, refused before routing and recorded; so is one of another shape', async () => {
      for (const [call, id] of [
        ['retrieve', 'resp_0123456789abcdef'],
        ['cancel', 'resp_0123456789abcdef'],
        ['retrieve', 'not-a-response-id'],
      ] as const) {
        const p = call === 'retrieve' ? client.responses.retrieve(id) : client.responses.cancel(id);
        const { err, rec } = await refused(p);
        assert.ok(err instanceof OpenAI.NotFoundError, `${call} ${id}`);
        assert.equal(err.code, 'response_not_found');
        assert.equal(err.param, 'response_id');
        assert.equal(err.type, 'invalid_request_error');
        assert.doesNotMatch(err.message, new RegExp(id), 'never the value the caller sent');
        assert.deepEqual(
          {
            outcome: rec.outcome,
            refusal: rec.refusal,
            model: rec.model,
            status: rec.status_code,
            attempts: rec.attempts,
          },
          { outcome: 'rejected', refusal: 'invalid_request', model: null, status: 404, attempts: 0 },
        );
      }
    });

    it('a response the engine no longer holds (store false) is the engine 404, relayed as upstream_rejected', async () => {
      const unkept = await client.responses.create({ model: 'resp', input: 'x', store: false });
      const { err, rec } = await refused(client.responses.retrieve(unkept.id));
      assert.ok(err instanceof OpenAI.NotFoundError);
      assert.equal(err.code, 'upstream_rejected');
      assert.deepEqual(
        { outcome: rec.outcome, refusal: rec.refusal, model: rec.model, upstream: rec.upstream_status },
        { outcome: 'rejected', refusal: 'upstream_rejected', model: 'resp', upstream: 404 },
      );
    });

    it('delete and input items are 404 not_served (no engine offers them), each with its id and record; a query string on retrieve is 400', async () => {
      const made = await client.responses.create({ model: 'resp', input: 'keep' });
      for (const call of [() => client.responses.delete(made.id), () => client.responses.inputItems.list(made.id)]) {
        const { err, rec } = await refused(call());
        assert.ok(err instanceof OpenAI.NotFoundError);
        assert.equal(err.code, 'not_served');
        assert.deepEqual(
          { outcome: rec.outcome, refusal: rec.refusal, route: rec.route, status: rec.status_code },
          { outcome: 'rejected', refusal: 'invalid_request', route: 'responses', status: 404 },
        );
      }
      // Still there: a delete was never sent to the engine.
      assert.equal((await client.responses.retrieve(made.id)).id, made.id);
      const q = await h.get(`/v1/responses/${made.id}?stream=true&starting_after=2`);
      assert.equal(q.status, 400);
      const body = (await q.json()) as { error: { code: string; message: string } };
      assert.equal(body.error.code, 'unsupported_parameter');
      assert.equal((await record(gidOf(q))).refusal, 'invalid_request');
    });

    it('router diagnose on a refused stored-response request says what it asked for and why it was refused, not "malformed" or "named no model"', async () => {
      const diagnose = async (id: string): Promise<string> => {
        const r = await runCli(['router', 'diagnose', id, '--router-url', h.routerUrl, '--auth-env', 'SVC_DIAG_KEY'], {
          SVC_DIAG_KEY: h.key,
        });
        assert.equal(r.code, 0, r.stderr);
        return r.stdout;
      };
      const made = await client.responses.create({ model: 'resp', input: 'keep' });
      for (const [call, words] of [
        [() => client.responses.retrieve('resp_0123456789abcdef'), /names no response this router relayed/],
        [() => client.responses.cancel('resp_0123456789abcdef'), /names no response this router relayed/],
        [() => client.responses.delete(made.id), /no engine behind the router serves/],
      ] as const) {
        const { err } = await refused(call());
        const text = await diagnose(err.requestID!);
        assert.match(
          text,
          /^Request req_[0-9a-f]{32}: responses \(a stored response, by its id\), outcome rejected \(HTTP 404\)/,
        );
        assert.match(text, words);
        assert.doesNotMatch(text, /malformed|named none this router serves|before choosing a model alias/);
      }
    });

    it('without a data-plane key: 401 (WWW-Authenticate) or 403, no id, counted apart; an OpenAI error object either way', async () => {
      const made = await client.responses.create({ model: 'resp', input: 'x' });
      const none = await h.get(`/v1/responses/${made.id}`, null);
      assert.equal(none.status, 401);
      assert.equal(none.headers.get('www-authenticate'), 'Bearer');
      assert.equal(none.headers.get('x-svc-request-id'), null);
      assert.equal(((await none.json()) as { error: { code: string } }).error.code, 'unauthenticated');
      const reader = await h.get(`/v1/responses/${made.id}`, h.readerToken);
      assert.equal(reader.status, 403);
      assert.equal(reader.headers.get('x-svc-request-id'), null);
      const metrics = await (await h.get('/metrics')).text();
      assert.match(metrics, /svc_router_auth_refusals_total\{status="401"\} [1-9]/);
      assert.match(metrics, /svc_router_auth_refusals_total\{status="403"\} [1-9]/);
    });

    it('canary: the response retrieved (its instructions and text) never reaches a record, the log or the decision log', async () => {
      const canary = `RETRIEVE-CANARY-${Date.now()}`;
      const made = await client.responses.create({ model: 'resp', input: canary, instructions: `${canary}-i` });
      const { data, response } = await client.responses.retrieve(made.id).withResponse();
      assert.equal(data.instructions, `${canary}-i`, 'the caller gets it');
      const gid = gidOf(response);
      await record(gid);
      assert.doesNotMatch(JSON.stringify((await h.lookup(gid)).body), /RETRIEVE-CANARY/);
      assert.doesNotMatch(JSON.stringify(h.decisions()), /RETRIEVE-CANARY/);
      assert.doesNotMatch(h.routerOutput(), /RETRIEVE-CANARY/);
      // Nor the response id itself in the log (it is the engine's identifier, not the router's).
      assert.doesNotMatch(h.routerOutput(), new RegExp(made.id));
    });

    it('after a reload that removes the alias, its responses are not found (the router cannot reach their engine)', async () => {
      const made = await client.responses.create({ model: 'pair', input: 'x' });
      assert.equal((await client.responses.retrieve(made.id)).id, made.id);
      const hash = async (): Promise<string> =>
        ((await (await h.get('/v1/router/status')).json()) as { routing_config_hash: string }).routing_config_hash;
      const before = await hash();
      h.writeModels([{ alias: 'resp', max_output_tokens: 16 }]);
      h.router.proc.kill('SIGHUP');
      await eventually(async () => (await hash()) !== before);
      const { err } = await refused(client.responses.retrieve(made.id));
      assert.equal(err.code, 'response_not_found');
    });
  },
);
