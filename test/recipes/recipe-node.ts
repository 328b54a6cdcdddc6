import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { LOG_OPTIONS } from '../../src/logger.js';
import type { NodeResult, SourceResult } from '../../src/schema/envelopes.js';
import { recordId } from '../../src/schema/record-id.js';
import { startController, type ControllerHandle } from '../../src/controller/controller.js';
import { InProcessBus } from '../../src/streams/in-process-bus.js';
import { writeTestPolicy, type TestPolicy } from '../support/policy.js';
import { eventually } from '../support/processes.js';
import { startFakeDocker, type FakeDocker, type FakeDockerOptions } from './fake-docker.js';
import { MISTRAL, recipesDir } from './recipe-dirs.js';

export const HOST = 'node-a';
/** The value of the recipe's env variable in the controller's environment: it must reach the runtime and nothing else. */
export const ENV_CANARY = 'hf_canary_value_0a9f3e';

/** A controller with recipes_dir and container_socket on the recorded runtime, logs captured. */
export interface RecipeNode {
  readonly fake: FakeDocker;
  readonly ctl: ControllerHandle;
  readonly policy: TestPolicy;
  readonly recipes: string;
  readonly stateDir: string;
  readonly logs: string[];
  call(path: string, token: string, body?: unknown): Promise<Response>;
  /** Plans and, when the plan is 201, applies; the caller checks the answers. */
  planApply(
    command: string,
    params: unknown,
  ): Promise<{ plan: Response; planBody: string; apply?: Response; applyBody?: string; operationId?: string }>;
  /** Polls the operation until it is terminal. */
  settle(operationId: string): Promise<{ state: string; outcome: string; summary: Record<string, unknown> }>;
  nodeWorkloads(): Promise<NodeResult>;
  /** The recipe record of `name` as `state/quality`, waiting up to 8 s for `want` (else the last seen). */
  recipeRecord(name: string, want: string): Promise<string>;
  /** Every byte the controller wrote to its state directory. */
  stateBytes(): string;
  close(): Promise<void>;
}

export const source = (r: NodeResult, owner: string): SourceResult => r.sources.find((s) => s.owner === owner)!;

export async function startRecipeNode(
  opts: { fake?: FakeDockerOptions; recipesDir?: string | null } = {},
): Promise<RecipeNode> {
  const policy = writeTestPolicy();
  const fake = await startFakeDocker(opts.fake);
  const logs: string[] = [];
  const bus = new InProcessBus();
  const stateDir = mkdtempSync(join(tmpdir(), 'svc-state-'));
  const recipes = opts.recipesDir === undefined ? recipesDir(MISTRAL) : opts.recipesDir;
  const ctl = await startController(
    {
      hostId: HOST,
      listen: { host: '127.0.0.1', port: 0 },
      nats: undefined,
      policyPath: policy.path,
      staleAfterMs: 30_000,
      stateDir,
      ...(recipes ? { recipesDir: recipes } : {}),
      containerSocket: fake.socketPath,
    },
    {
      logger: pino({ ...LOG_OPTIONS, level: 'debug' }, { write: (s: string) => void logs.push(s) }),
      env: { ...policy.env, HF_TOKEN: ENV_CANARY },
      bus,
    },
  );
  const call = (path: string, token: string, body?: unknown): Promise<Response> =>
    fetch(`${ctl.url}${path}`, {
      method: body === undefined ? 'GET' : 'POST',
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  const node: RecipeNode = {
    fake,
    ctl,
    policy,
    recipes: recipes ?? '',
    stateDir,
    logs,
    call,
    async planApply(command, params) {
      const plan = await call('/v1/lifecycle/plan', policy.tokens.lifecycle, { command, params });
      const planBody = await plan.text();
      if (plan.status !== 201) return { plan, planBody };
      const token = (JSON.parse(planBody) as { confirmation_token: string }).confirmation_token;
      const apply = await call('/v1/lifecycle/apply', policy.tokens.lifecycle, { confirmation_token: token });
      const applyBody = await apply.text();
      const operationId =
        apply.status === 200 ? (JSON.parse(applyBody) as { operation_id: string }).operation_id : undefined;
      return { plan, planBody, apply, applyBody, ...(operationId ? { operationId } : {}) };
    },
    async settle(operationId) {
      return eventually(
        async () => {
          const s = (await (await call(`/v1/lifecycle/status/${operationId}`, policy.tokens.lifecycle)).json()) as {
            state: string;
            outcome: string;
            summary: Record<string, unknown>;
          };
          return ['succeeded', 'failed', 'interrupted', 'expired'].includes(s.state) ? s : undefined;
        },
        10_000,
        25,
      );
    },
    async nodeWorkloads() {
      const res = await call('/tools/call', policy.tokens.reader, { name: 'node_workloads', arguments: {} });
      return (await res.json()) as NodeResult;
    },
    async recipeRecord(name, want) {
      let last = '';
      try {
        return await eventually(
          async () => {
            const r = source(await node.nodeWorkloads(), 'recipe');
            const x = r.records.find((rec) => rec.id === recordId(HOST, 'recipe', 'recipe-serve', name));
            last = x ? `${x.state}/${x.observation_quality}` : `${r.status}:none`;
            return last === want ? last : undefined;
          },
          8000,
          50,
        );
      } catch {
        return last;
      }
    },
    stateBytes() {
      return readdirSync(stateDir)
        .map((f) => readFileSync(join(stateDir, f)).toString('latin1'))
        .join('\n');
    },
    async close() {
      await ctl.close();
      await fake.close();
      await bus.close();
    },
  };
  return node;
}
