/**
 * Summary of a V8 .cpuprofile (from `node --cpu-prof`): top self-time functions, self time
 * per file, and inclusive time of this project's own functions.
 */
import { readFileSync } from 'node:fs';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

function shortUrl(url: string, root: string): string {
  let u = url.replace(/^file:\/\//, '');
  if (u.startsWith(root + '/')) u = u.slice(root.length + 1);
  u = u.replace(/^node_modules\//, 'nm/');
  return u;
}

function keyOf(cf: CallFrame, root: string): string {
  const name = cf.functionName || '(anonymous)';
  if (!cf.url) return name;
  return `${name}  ${shortUrl(cf.url, root)}:${cf.lineNumber + 1}`;
}

function areaOf(cf: CallFrame, root: string): string {
  if (!cf.url) return cf.functionName || '(native)';
  const u = shortUrl(cf.url, root);
  const m = /^nm\/((?:@[^/]+\/)?[^/]+)/.exec(u);
  if (m) return `nm/${m[1]}`;
  return u;
}

/**
 * Text summary. Sample times are wall time on the main thread (a thread waiting for a core
 * counts as busy), so percentages are shares of where the main thread was, not CPU ms.
 */
export function summarizeCpuProfile(path: string, root: string, top = 25): string {
  const prof = JSON.parse(readFileSync(path, 'utf8')) as CpuProfile;
  const byId = new Map<number, ProfileNode>(prof.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  // DevTools attributes timeDeltas[i + 1] to samples[i].
  for (let i = 0; i < prof.samples.length; i++) {
    const id = prof.samples[i]!;
    const dt = prof.timeDeltas[i + 1] ?? 0;
    self.set(id, (self.get(id) ?? 0) + dt);
  }
  const totalUs = [...self.values()].reduce((a, b) => a + b, 0);
  let idleUs = 0;
  const fnSelf = new Map<string, number>();
  const areaSelf = new Map<string, number>();
  for (const [id, us] of self) {
    const n = byId.get(id);
    if (!n) continue;
    if (n.callFrame.functionName === '(idle)') {
      idleUs += us;
      continue;
    }
    const k = keyOf(n.callFrame, root);
    fnSelf.set(k, (fnSelf.get(k) ?? 0) + us);
    const a = areaOf(n.callFrame, root);
    areaSelf.set(a, (areaSelf.get(a) ?? 0) + us);
  }
  const busyUs = totalUs - idleUs;

  // Inclusive time per function (a function counted once per stack, so recursion is not doubled).
  const parent = new Map<number, number>();
  for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const incl = new Map<string, number>();
  for (const [id, us] of self) {
    const seen = new Set<string>();
    let cur: number | undefined = id;
    while (cur !== undefined) {
      const n = byId.get(cur);
      if (!n) break;
      if (n.callFrame.url.includes('/dist/') || n.callFrame.url.includes('/build/src/')) {
        const k = keyOf(n.callFrame, root);
        if (!seen.has(k)) {
          seen.add(k);
          incl.set(k, (incl.get(k) ?? 0) + us);
        }
      }
      cur = parent.get(cur);
    }
  }

  const pct = (us: number): string => ((100 * us) / Math.max(1, busyUs)).toFixed(1).padStart(5) + '%';
  const msS = (us: number): string => (us / 1000).toFixed(0).padStart(7) + ' ms';
  const lines: string[] = [];
  lines.push(`profile ${path}`);
  lines.push(
    `  wall ${((prof.endTime - prof.startTime) / 1000).toFixed(0)} ms, sampled ${(totalUs / 1000).toFixed(0)} ms, idle ${(idleUs / 1000).toFixed(0)} ms, ` +
      `busy ${(busyUs / 1000).toFixed(0)} ms (main thread, wall: includes waiting for a core)`,
  );
  lines.push(`  top ${top} functions by self time (% of busy):`);
  for (const [k, us] of [...fnSelf].sort((a, b) => b[1] - a[1]).slice(0, top))
    lines.push(`    ${msS(us)} ${pct(us)}  ${k}`);
  lines.push('  self time by file / package:');
  for (const [k, us] of [...areaSelf].sort((a, b) => b[1] - a[1]).slice(0, 20))
    lines.push(`    ${msS(us)} ${pct(us)}  ${k}`);
  lines.push("  inclusive time of this project's functions:");
  for (const [k, us] of [...incl].sort((a, b) => b[1] - a[1]).slice(0, 20))
    lines.push(`    ${msS(us)} ${pct(us)}  ${k}`);
  return lines.join('\n');
}
