// The router panel of the Telemetry tab: request and error rates, and p50/p95 of first token
// and duration, over the last 15 minutes, as the dashboard server computed them from
// successive scrapes of the router's Prometheus counters and histograms (one-minute rates,
// histogram_quantile's interpolation). The first frame carries the whole 15 minutes
// (`router_rates`), later ones only the new point (`router_rates_delta`).
const $ = (id) => document.getElementById(id);
const KEEP_MS = 15 * 60_000;

let points = [];
let charts = null;

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

function draw(ok) {
  if (charts === null) build();
  const last = points.at(-1);
  for (const c of charts) {
    c.figures.textContent = !ok
      ? 'router metrics unavailable: the chart is history only'
      : last
        ? c.spec.series.map(([label, key]) => `${label} ${fmt(last[key], c.spec.unit)}`).join(' · ')
        : 'no point yet: rates need two scrapes';
    c.plot?.setData([points.map((p) => p.t / 1000), ...c.spec.series.map(([, key]) => points.map((p) => p[key]))]);
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
  draw(frame.router?.status === 'ok');
}

/** Not current (link lost, locked, overdue): the charts go rather than stand as current. */
export function hide() {
  $('router-charts').hidden = true;
}
