import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** Runs `source` as an ES module in a fresh directory where `svc-serving` is installed by a link to this repository. */
function runAsConsumer(source: string): unknown {
  const dir = mkdtempSync(join(tmpdir(), 'svc-consumer-'));
  mkdirSync(join(dir, 'node_modules'));
  symlinkSync(ROOT, join(dir, 'node_modules', 'svc-serving'), 'dir');
  writeFileSync(join(dir, 'main.mjs'), source);
  return JSON.parse(execFileSync(process.execPath, [join(dir, 'main.mjs')], { cwd: dir, encoding: 'utf8' }));
}

describe('the package imported by name', () => {
  it('exports the public API, and its pure functions work', () => {
    const out = runAsConsumer(`
      const api = await import('svc-serving');
      const f = api.resolveFilters(api.parseFilterArgs({ owner: 'router', limit: 5 }));
      const now = Date.parse('2026-11-27T12:00:00.000Z');
      const node = api.queryNode(api.createNodeSnapshot('node-a'), f, now, { owners: api.CONTROLLER_OWNERS, staleAfterMs: api.DEFAULT_STALE_AFTER_MS });
      const fleet = api.composeFleet([{ hostId: 'node-a' }, { hostId: 'node-b', sleeping: true }], [{ kind: 'unreachable' }, { kind: 'sleeping' }], f, now);
      let refused = '';
      try { api.parseFilterArgs({ limit: 0 }); } catch (e) { refused = e instanceof api.SvcError ? e.code : 'other'; }
      let deep = '';
      try { await import('svc-serving/dist/cli/main.js'); } catch (e) { deep = e.code; }
      const pkg = (await import('svc-serving/package.json', { with: { type: 'json' } })).default;
      console.log(JSON.stringify({
        names: Object.keys(api).sort(),
        filters: f,
        nodeValid: api.checkNodeResult.Check(node), nodeStatus: node.status,
        fleetValid: api.checkFleetResult.Check(fleet), fleetConditions: fleet.nodes.map((n) => n.condition),
        refused, deep, pkgName: pkg.name, types: pkg.types, bin: pkg.bin['svc-serving'],
      }));
    `) as Record<string, unknown>;
    for (const name of [
      'SCHEMA_ID',
      'WorkloadRecord',
      'Truncation',
      'SourceResult',
      'NodeResult',
      'FleetResult',
      'ObservationBatch',
      'checkNodeResult',
      'checkFleetResult',
      'checkBatch',
      'FilterArgs',
      'parseFilterArgs',
      'resolveFilters',
      'TerminalRecord',
      'checkTerminalRecord',
      'DIAGNOSIS_SCHEMA_ID',
      'interpret',
      'terminalEvidence',
      'diagnoseLookup',
      'diagnoseHistory',
      'FleetDiagnosis',
      'checkFleetDiagnosis',
      'createNodeSnapshot',
      'foldNode',
      'queryNode',
      'composeFleet',
      'SvcError',
      'ErrorCode',
      'readNode',
      'readFleet',
    ])
      assert.ok((out['names'] as string[]).includes(name), name);
    assert.deepEqual(out['filters'], { owner: 'router', active_only: false, recent_seconds: 3600, limit: 5 });
    assert.equal(out['nodeValid'], true);
    assert.equal(out['nodeStatus'], 'unavailable');
    assert.equal(out['fleetValid'], true);
    assert.deepEqual(out['fleetConditions'], ['unreachable', 'sleeping']);
    assert.equal(out['refused'], 'SVC_ERR_INVALID_INPUT');
    // Internals are reachable by no package path: only `.` and `./package.json` are exported.
    assert.equal(out['deep'], 'ERR_PACKAGE_PATH_NOT_EXPORTED');
    assert.equal(out['pkgName'], 'svc-serving');
    assert.ok(existsSync(join(ROOT, out['types'] as string)), 'the declared types file is built');
    // The CLI is a bin, not an export: the exports map leaves it where it was.
    assert.ok(existsSync(join(ROOT, out['bin'] as string)), 'the CLI bin is built');
    assert.match(
      execFileSync(process.execPath, [join(ROOT, out['bin'] as string), '--version'], { encoding: 'utf8' }),
      /^\d+\.\d+\.\d+/,
    );
  });
});
