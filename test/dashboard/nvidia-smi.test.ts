import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { NVIDIA_SMI_ARGS, aggregateMemory, parseLine, parseNvidiaSmiCsv } from '../../src/telemetry/nvidia-smi.js';
import { parseRouterMetrics } from '../../src/telemetry/router-metrics.js';
import { FIXTURES } from './support.js';
import { fileURLToPath } from 'node:url';

const fixture = (name: string): string => readFileSync(join(FIXTURES, name), 'utf8');

describe('nvidia-smi CSV parser', () => {
  it('asks for exactly the documented fields, without header or units', () => {
    assert.deepEqual(NVIDIA_SMI_ARGS, [
      '--query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw',
      '--format=csv,noheader,nounits',
    ]);
  });

  it('reads every field of a two-card recording, keyed by uuid', () => {
    const { cards, skipped } = parseNvidiaSmiCsv(fixture('h100x2.csv'));
    assert.equal(skipped, 0);
    assert.deepEqual(cards[0], {
      index: 0,
      uuid: 'GPU-5c3c6f2b-8a1e-3b2e-9f0c-1d2e3f4a5b6c',
      name: 'NVIDIA H100 80GB HBM3',
      memory_used_mib: 40960,
      memory_total_mib: 81559,
      utilization_pct: 87,
      temperature_c: 64,
      power_w: 412.35,
    });
    assert.equal(cards[1]!.uuid, 'GPU-a1b2c3d4-0000-4e5f-8a9b-0c1d2e3f4a5b');
  });

  it('reads a recording from a real H200 exactly (driver 580.159.04)', () => {
    const { cards, skipped } = parseNvidiaSmiCsv(fixture('h200-recorded.csv'));
    assert.equal(skipped, 0);
    assert.deepEqual(cards, [
      {
        index: 0,
        uuid: 'GPU-0ed127a3-aaaf-bd46-d58d-483944756ab2',
        name: 'NVIDIA H200',
        memory_used_mib: 0,
        memory_total_mib: 143771,
        utilization_pct: 0,
        temperature_c: 35,
        power_w: 125.56,
      },
    ]);
    assert.deepEqual(aggregateMemory(cards), { used_mib: 0, total_mib: 143771, cards_counted: 1, cards_unreported: 0 });
  });

  it('turns [N/A] and [Not Supported] into null, never into zero', () => {
    const { cards, skipped } = parseNvidiaSmiCsv(fixture('mixed-na.csv'));
    assert.equal(skipped, 0);
    assert.equal(cards.length, 3);
    const a100 = cards[1]!;
    assert.equal(a100.name, 'NVIDIA A100-SXM4-40GB');
    assert.deepEqual(
      [a100.memory_used_mib, a100.memory_total_mib, a100.utilization_pct, a100.temperature_c, a100.power_w],
      [null, null, null, 35, null],
    );
    assert.equal(cards[2]!.power_w, null);
    assert.equal(cards[2]!.memory_used_mib, 0, 'a reported 0 stays 0');
  });

  it('skips malformed, truncated and duplicated lines and nulls out-of-range numbers', () => {
    const { cards, skipped } = parseNvidiaSmiCsv(fixture('malformed.csv'));
    assert.deepEqual(
      cards.map((c) => c.uuid),
      ['GPU-5c3c6f2b-8a1e-3b2e-9f0c-1d2e3f4a5b6c', 'GPU-87654321-4321-4321-4321-cba987654321'],
    );
    assert.equal(skipped, 6);
    const l4 = cards[1]!;
    assert.deepEqual(
      [l4.memory_used_mib, l4.memory_total_mib, l4.utilization_pct, l4.temperature_c, l4.power_w],
      [null, null, null, null, null],
    );
  });

  it('reads "No devices were found" as zero cards and one skipped line', () => {
    assert.deepEqual(parseNvidiaSmiCsv(fixture('no-devices.txt')), { cards: [], skipped: 1 });
    assert.deepEqual(parseNvidiaSmiCsv(''), { cards: [], skipped: 0 });
  });

  it('keeps a product name that contains commas, and strips control characters from names', () => {
    const card = parseLine('2, GPU-0a0a0a0a-1111-2222-3333-444444444444, Weird, Name\u0007 X, 10, 20, 30, 40, 50');
    assert.equal(card?.name, 'Weird, Name X');
    assert.equal(card?.power_w, 50);
  });

  it('never throws, whatever the output', () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 400 }),
        fc.array(fc.constantFrom(', ', '[N/A]', 'GPU-1', '\n', '-', '1.5', 'x'), { maxLength: 30 }),
        (a, parts) => {
          const out = parseNvidiaSmiCsv(a + parts.join(''));
          assert.ok(Array.isArray(out.cards) && out.skipped >= 0);
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('aggregate GPU memory (a display sum)', () => {
  it('sums reported cards and counts the ones that did not report', () => {
    const { cards } = parseNvidiaSmiCsv(fixture('mixed-na.csv'));
    assert.deepEqual(aggregateMemory(cards), {
      used_mib: 23017,
      total_mib: 24564 + 15360,
      cards_counted: 2,
      cards_unreported: 1,
    });
  });
});

describe('router metrics figures', () => {
  it('reads per-alias figures in milliseconds, requests summed over their labels, NaN quantiles (no samples) as unknown', () => {
    const text = [
      '# HELP svc_router_requests_total x',
      'svc_router_requests_total{alias="sim-chat",route="chat.completions",outcome="success",status_class="2xx"} 6',
      'svc_router_requests_total{alias="sim-chat",route="chat.completions",outcome="rejected",status_class="4xx"} 1',
      'svc_router_in_flight{alias="sim-chat"} 2',
      'svc_router_buffer_time_to_first_content_seconds_p50{alias="sim-chat"} 0.1512',
      'svc_router_buffer_latency_seconds_p95{alias="sim-chat"} NaN',
      'svc_router_buffer_records{alias="other\\"alias"} 3',
      'garbage line',
    ].join('\n');
    const figures = parseRouterMetrics(text);
    assert.equal(figures.length, 2);
    assert.deepEqual(figures[0], {
      model: 'sim-chat',
      requests_total: 7,
      active: 2,
      buffered: null,
      ttfc_p50_ms: 151.2,
      ttfc_p95_ms: null,
      latency_p50_ms: null,
      latency_p95_ms: null,
    });
    assert.equal(figures[1]!.model, 'other"alias');
  });
});

describe('telemetry is display data only', () => {
  it('the telemetry code cannot reach workload state: it imports no bus, actor, fold or record module', () => {
    const src = fileURLToPath(new URL('../../../src/', import.meta.url));
    for (const file of [
      'telemetry/nvidia-smi.ts',
      'telemetry/gpu-sampler.ts',
      'telemetry/router-metrics.ts',
      'dashboard/dashboard-telemetry.ts',
    ]) {
      const imports = [...readFileSync(join(src, file), 'utf8').matchAll(/from '([^']+)'/g)].map((m) => m[1]!);
      const reaching = imports.filter((i) => /streams|actors|stores|jobs|schema\/record|envelopes|controller/.test(i));
      assert.deepEqual(reaching, [], file);
    }
  });
});
