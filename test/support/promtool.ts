/** `promtool check metrics` (Debian `prometheus`): the Prometheus project's own lint of an exposition. */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

export const PROMTOOL = '/usr/bin/promtool';
export const PROMETHEUS = '/usr/bin/prometheus';

/** The reason a promtool test is skipped, or false when promtool is installed. */
export const noPromtool: string | false = existsSync(PROMTOOL)
  ? false
  : `${PROMTOOL} is absent (install the Debian prometheus package)`;

/** What `promtool check metrics` prints about `text` (empty: nothing to report), with its exit status. */
export function promtoolCheck(text: string): { status: number | null; output: string } {
  const r = spawnSync(PROMTOOL, ['check', 'metrics'], { input: text, encoding: 'utf8', timeout: 30_000 });
  return { status: r.status, output: `${r.stdout ?? ''}${r.stderr ?? ''}`.trim() };
}
