// The router panel of the Telemetry tab: request and error rates, and p50/p95 of first token
// and duration, over the last 15 minutes, as the dashboard server computed them from
// successive scrapes of the router's Prometheus counters and histograms (one-minute rates,
// histogram_quantile's interpolation). The first frame carries the whole 15 minutes
// (`router_rates`), later ones only the new point (`router_rates_delta`). Each point also
// carries every alias's own figures (`by_alias`): the charts show all aliases summed, or the
// one alias chosen in the selector (decision 0036).
const $ = (id) => document.getElementById(id);
const KEEP_MS = 15 * 60_000;

let points = [];
let charts = null;
/** The alias the charts show ('': all aliases summed): the operator's choice, kept across frames. */
let alias = '';
/** Whether the last frame read the router (a redraw for another alias says the same). */
let lastOk = false;

/** A point's figures for the alias shown; null when that alias has no figures at that point. */
function figuresAt(p) {
  if (alias === '') return p;
  const by = p.by_alias;
  return by !== null && typeof by === 'object' && Object.hasOwn(by, alias) ? by[alias] : null;
}

/** The latest figures of one alias (the Router table's rate column); null when none. */
export function latestFor(name) {
  const by = points.at(-1)?.by_alias;
  return by !== null && typeof by === 'object' && Object.hasOwn(by, name) ? by[name] : null;
}

function el(tag, text, className) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (className) e.className = className;
  return e;
}

const CHARTS = [
  {
    title: 'Requests per second (1-minute rate)',
    unit: '/s',
    series: [
      ['requests', 'req_per_s', '#1f5fa8'],
      ['errors and timeouts', 'err_per_s', '#a40e26'],
    ],
  },
  {
    title: 'Time to first token (ms)',
    unit: 'ms',
    series: [
      ['p50', 'ttft_p50_ms', '#1f5fa8'],
      ['p95', 'ttft_p95_ms', '#b3541e'],
    ],
  },
  {
    title: 'Request duration (ms)',
    unit: 'ms',
    series: [
      ['p50', 'dur_p50_ms', '#1f5fa8'],
      ['p95', 'dur_p95_ms', '#b3541e'],
    ],
  },
];

const fmt = (v, unit) =>
  v === null || v === undefined ? 'no data' : unit === '/s' ? `${v.toFixed(2)}/s` : `${Math.round(v)} ms`;

function build() {
  const box = $('router-charts');
  charts = CHARTS.map((spec) => {
    const root = el('article', undefined, 'card chart-card');
    const figures = el('div', '', 'figures');
    const plotBox = el('div', '', 'plot');
    root.append(el('h3', spec.title), figures, plotBox);
    box.append(root);
    const plot = window.uPlot
      ? new window.uPlot(
          {
            width: 380,
            height: 120,
            scales: {
              x: { time: true },
              y: { range: (_u, _min, max) => [0, Math.max(max ?? 0, spec.unit === '/s' ? 0.1 : 10)] },
            },
            series: [{}, ...spec.series.map(([label, , stroke]) => ({ label, stroke, width: 2 }))],
            axes: [{}, { label: spec.unit }],
            legend: { show: true, live: false },
          },
          [[], ...spec.series.map(() => [])],
          plotBox,
        )
      : null;
    return { spec, figures, plot };
  });
}

/**
 * The selector offers "all aliases" and every alias with figures in the 15 minutes kept,
 * plus the one chosen (it is never switched for the operator). Options are added and removed
 * one by one, never redrawn: an open list is not closed under the pointer.
 */
function syncAliases() {
  const names = new Set();
  for (const p of points)
    if (p.by_alias !== null && typeof p.by_alias === 'object') for (const a of Object.keys(p.by_alias)) names.add(a);
  if (alias !== '') names.add(alias);
  const select = $('router-alias');
  for (const o of [...select.options]) if (o.value !== '' && !names.has(o.value)) o.remove();
  const have = new Set([...select.options].map((o) => o.value));
  for (const a of [...names].sort()) {
    if (have.has(a)) continue;
    const before = [...select.options].find((o) => o.value !== '' && o.value > a) ?? null;
    select.add(new Option(a, a), before);
  }
  select.value = alias;
  // One alias or none: "all aliases" is that alias, and there is nothing to choose.
  $('router-alias-row').hidden = names.size < 2 && alias === '';
  const omitted = points.at(-1)?.aliases_omitted ?? 0;
  $('router-alias-note').textContent =
    omitted > 0 ? `${omitted} more alias(es) count in "all aliases" but have no charts of their own` : '';
}

function draw(ok) {
  if (charts === null) build();
  syncAliases();
  const last = points.at(-1);
  const lastFigures = last ? figuresAt(last) : null;
  const scope = alias === '' ? 'all aliases' : `alias ${alias}`;
  for (const c of charts) {
    c.figures.textContent = !ok
      ? 'router metrics unavailable: the chart is history only'
      : !last
        ? 'no point yet: rates need two scrapes'
        : lastFigures === null
          ? `${scope}: no figures in the last scrape (new, or not in the router's metrics)`
          : `${scope}: ${c.spec.series.map(([label, key]) => `${label} ${fmt(lastFigures[key], c.spec.unit)}`).join(' · ')}`;
    c.plot?.setData([
      points.map((p) => p.t / 1000),
      ...c.spec.series.map(([, key]) => points.map((p) => figuresAt(p)?.[key] ?? null)),
    ]);
  }
  $('router-charts').hidden = false;
}

/** Takes a telemetry frame's router points (whole, or the new one); draws nothing without a router. */
export function onFrame(frame) {
  if (Array.isArray(frame.router_rates)) points = frame.router_rates.slice();
  else if (Array.isArray(frame.router_rates_delta)) points.push(...frame.router_rates_delta);
  else {
    hide();
    return;
  }
  const newest = points.at(-1)?.t ?? 0;
  points = points.filter((p) => Number.isFinite(p.t) && p.t > newest - KEEP_MS);
  lastOk = frame.router?.status === 'ok';
  draw(lastOk);
}

/** Not current (link lost, locked, overdue): the charts go rather than stand as current. */
export function hide() {
  $('router-charts').hidden = true;
  $('router-alias-row').hidden = true;
}

/** Wires the alias selector (once, at start). */
export function init() {
  $('router-alias-row').addEventListener('submit', (ev) => ev.preventDefault());
  $('router-alias').addEventListener('change', () => {
    alias = $('router-alias').value;
    if (charts !== null && !$('router-charts').hidden) draw(lastOk);
  });
}
