// The Telemetry tab: GPU cards from nvidia-smi and router figures from its metrics. Cards are
// keyed by their observed uuid (the driver's index can change), and the aggregate is labelled
// as what it is: a display sum, not one unified memory capacity.
import { send } from './link.js';
import * as routerPanel from './router-panel.js';

const $ = (id) => document.getElementById(id);
/** Writes a live region's words only when they change (the same words again are not news). */
function say(el, text) {
  if (el.textContent !== text) el.textContent = text;
}
let credential = null;
/** What a credential is (docs/api.md): 1-4096 printable ASCII characters without spaces. */
const CREDENTIAL_RE = /^[\x21-\x7e]{1,4096}$/;
let required = false;
const charts = new Map(); // uuid -> { root, plot, figures, note }

const gib = (mib) => (mib / 1024).toFixed(1);
const known = (v, fmt) => (v === null || v === undefined ? 'not reported' : fmt(v));

function el(tag, text, className) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (className) e.className = className;
  return e;
}

function statusLine(gpu) {
  const when = gpu.sampled_at ? ` (last run ${new Date(gpu.sampled_at).toLocaleTimeString()})` : '';
  switch (gpu.status) {
    case 'pending':
      return ['GPU telemetry: waiting for the first nvidia-smi sample…', 'pending'];
    case 'absent':
      return ['no GPU telemetry: nvidia-smi is not installed on this host', 'idle'];
    case 'failed':
      return [`GPU telemetry unavailable: nvidia-smi failed on its last run${when}`, 'unavailable'];
    default: {
      const skipped = gpu.skipped_lines > 0 ? ` · ${gpu.skipped_lines} unreadable line(s) skipped` : '';
      if (gpu.cards.length === 0) return [`nvidia-smi reported no readable GPU card${when}${skipped}`, 'partial'];
      return [
        `${gpu.cards.length} GPU card(s) sampled by nvidia-smi every ${Math.round(gpu.interval_ms / 1000)} s${when}${skipped}`,
        'complete',
      ];
    }
  }
}

function renderAggregate(gpu) {
  const p = $('gpu-aggregate');
  const a = gpu.aggregate;
  if (gpu.status !== 'ok' || gpu.cards.length === 0) {
    p.hidden = true;
    return;
  }
  p.replaceChildren(
    el('strong', 'Aggregate GPU memory: '),
    document.createTextNode(`${gib(a.used_mib)} / ${gib(a.total_mib)} GiB used across ${a.cards_counted} card(s) `),
    el('span', '(display sum of per-card memory, not one unified capacity)', 'note'),
  );
  if (a.cards_unreported > 0)
    p.append(el('span', ` · ${a.cards_unreported} card(s) did not report memory and are not included`, 'warn'));
  p.hidden = false;
}

function cardFor(series) {
  let c = charts.get(series.uuid);
  if (c) return c;
  const root = el('article', undefined, 'card');
  root.dataset.uuid = series.uuid;
  const title = el('h3');
  const uuid = el('div', series.uuid, 'mono note');
  const figures = el('div', '', 'figures');
  const note = el('div', '', 'warn');
  const plotBox = el('div', '', 'plot');
  root.append(title, uuid, figures, note, plotBox);
  $('gpu-cards').append(root);
  // uPlot loads with `defer`; a missing library only loses the charts, not the figures.
  // Memory on its own chart, from 0 to the card's capacity (50 of 80 GiB is drawn at 5/8,
  // not as full); utilization on another, 0-100 %.
  const chart = (label, stroke, scale) =>
    window.uPlot
      ? new window.uPlot(
          {
            width: 380,
            height: 110,
            scales: { x: { time: true }, y: scale },
            series: [{}, { label, stroke, width: 2 }],
            axes: [{}, { label: label.includes('GiB') ? 'GiB' : '%' }],
            legend: { show: true, live: false },
          },
          [[], []],
          plotBox,
        )
      : null;
  const capacity = { gib: 1 };
  const memPlot = chart('memory used (GiB)', '#1f5fa8', { range: () => [0, capacity.gib] });
  const utilPlot = chart('utilization (%)', '#b3541e', { range: [0, 100] });
  const plot = memPlot
    ? {
        setData([t, mem, util]) {
          memPlot.setData([t, mem]);
          utilPlot.setData([t, util]);
        },
        destroy() {
          memPlot.destroy();
          utilPlot.destroy();
        },
      }
    : null;
  c = { root, title, figures, note, plot, capacity };
  charts.set(series.uuid, c);
  return c;
}

/** From this many cards on, one compact table instead of a pair of charts per card. */
const COMPACT_AT = 8;

function pct(used, total) {
  return typeof used === 'number' && typeof total === 'number' && total > 0 ? Math.round((used / total) * 100) : null;
}

/** A bar with its words beside it: the words carry the figure, the bar only helps the eye. */
function bar(percent, text) {
  const td = el('td', undefined, 'bar-cell');
  const track = el('span', undefined, 'bar');
  track.setAttribute('aria-hidden', 'true');
  const fill = el('span', undefined, 'bar-fill');
  fill.style.width = `${percent ?? 0}%`;
  track.append(fill);
  td.append(track, el('span', text));
  return td;
}

/**
 * Eight cards or more: one row a card (index, name, memory used / total with its share,
 * utilization, temperature, power), the latest sample only. A card missing from it keeps its
 * row, marked, until it ages out of the history, as a chart would keep its history.
 */
function renderTable(gpu) {
  for (const c of charts.values()) {
    c.plot?.destroy();
    c.root.remove();
  }
  charts.clear();
  const current = new Map(gpu.cards.map((card) => [card.uuid, card]));
  const rows = gpu.series.map((s) => {
    const card = current.get(s.uuid);
    const tr = el('tr', undefined, card ? '' : 'stale');
    tr.dataset.uuid = s.uuid;
    const head = el('th', `GPU ${s.index}`);
    head.scope = 'row';
    head.title = s.uuid;
    if (!card) {
      tr.append(head, el('td', s.name), el('td', 'not in the latest sample', 'warn'), el('td'), el('td'), el('td'));
      return tr;
    }
    const memPct = pct(card.memory_used_mib, card.memory_total_mib);
    tr.append(
      head,
      el('td', s.name),
      bar(
        memPct,
        `${known(card.memory_used_mib, gib)} / ${known(card.memory_total_mib, gib)} GiB${memPct === null ? '' : ` (${memPct} %)`}`,
      ),
      bar(
        card.utilization_pct,
        known(card.utilization_pct, (v) => `${v} %`),
      ),
      el(
        'td',
        known(card.temperature_c, (v) => `${v} °C`),
      ),
      el(
        'td',
        known(card.power_w, (v) => `${v} W`),
      ),
    );
    return tr;
  });
  $('gpu-table').tBodies[0].replaceChildren(...rows);
  $('gpu-table-box').hidden = false;
}

function renderCards(gpu) {
  if (gpu.series.length >= COMPACT_AT) return renderTable(gpu);
  $('gpu-table-box').hidden = true;
  const current = new Map(gpu.cards.map((card) => [card.uuid, card]));
  const alive = new Set();
  for (const s of gpu.series) {
    alive.add(s.uuid);
    const c = cardFor(s);
    const card = current.get(s.uuid);
    c.title.textContent = `GPU ${s.index} · ${s.name}`;
    c.figures.textContent = card
      ? `memory ${known(card.memory_used_mib, gib)} / ${known(card.memory_total_mib, gib)} GiB · utilization ${known(card.utilization_pct, (v) => `${v} %`)} · ${known(card.temperature_c, (v) => `${v} °C`)} · power ${known(card.power_w, (v) => `${v} W`)}`
      : '';
    c.note.textContent = card ? '' : 'not in the latest sample: figures below are history only';
    // The axis runs to the card's capacity (the highest used value only when none is reported).
    const used = s.memory_used_mib.map((v) => (v === null ? null : v / 1024));
    const total = card?.memory_total_mib;
    c.capacity.gib =
      typeof total === 'number' && total > 0 ? total / 1024 : Math.max(1, ...used.filter((v) => v !== null));
    if (c.plot) c.plot.setData([s.t, used, s.utilization_pct]);
  }
  for (const [uuid, c] of charts) {
    if (alive.has(uuid)) continue;
    c.plot?.destroy();
    c.root.remove();
    charts.delete(uuid);
  }
}

function ms(v) {
  return v === null ? '—' : `${Math.round(v)} ms`;
}

const rate = (v) => (typeof v === 'number' ? `${v.toFixed(2)}/s` : '—');

/** Whether the server said a router is wired in (null: no telemetry frame has said yet). */
let routerWired = null;

function renderRouter(router) {
  const status = $('router-status');
  const table = $('router-figures');
  routerWired = router !== null;
  if (router === null) {
    say(status, 'no router is wired to this dashboard');
    table.hidden = true;
    return;
  }
  if (router.status !== 'ok') {
    say(status, 'router metrics could not be read (unavailable); figures are not shown rather than shown as zero');
    status.className = 'status-line status-unavailable';
    table.hidden = true;
    return;
  }
  say(
    status,
    'Router figures from its metrics (current in-memory buffer; eviction and restart reduce them). "—" means not measured.',
  );
  status.className = 'status-line';
  const rows = router.models.map((m) => {
    const tr = el('tr');
    // The alias's own one-minute rates, beside one another: which alias is busy or failing, at a glance.
    const r = routerPanel.latestFor(m.model);
    tr.append(
      el('td', m.model),
      el('td', m.requests_total === null ? '—' : String(m.requests_total)),
      el('td', m.active === null ? '—' : String(m.active)),
      el('td', m.buffered === null ? '—' : String(m.buffered)),
      el('td', `${ms(m.ttfc_p50_ms)} / ${ms(m.ttfc_p95_ms)}`),
      el('td', `${ms(m.latency_p50_ms)} / ${ms(m.latency_p95_ms)}`),
      el('td', r === null ? 'no rate yet' : `${rate(r.req_per_s)} / ${rate(r.err_per_s)}`),
    );
    return tr;
  });
  table.tBodies[0].replaceChildren(...rows);
  table.hidden = rows.length === 0;
}

/** When the last telemetry frame arrived (this page's clock), and the sampling interval it gave. */
let lastFrameAt = null;
let lastIntervalMs = 3000;
let current = false;

/**
 * Figures that are no longer current are not left on screen as if they were: the aggregate
 * and router figures go, each card keeps only its history, and the status line says why.
 */
function clearCurrent(why) {
  current = false;
  say($('gpu-status'), why);
  $('gpu-status').className = 'status-line status-unavailable';
  $('gpu-aggregate').hidden = true;
  for (const c of charts.values()) {
    c.figures.textContent = '';
    c.note.textContent = 'not current: figures below are history only';
  }
  // The compact table holds only the latest figures: none of them is current now.
  $('gpu-table-box').hidden = true;
  $('router-figures').hidden = true;
  routerPanel.hide();
  // Only a router this dashboard reads can have figures that are "not current".
  if (routerWired === true) {
    say($('router-status'), 'router figures are not current');
    $('router-status').className = 'status-line status-unavailable';
  } else if (routerWired === null) {
    say(
      $('router-status'),
      why.includes('locked') ? 'router figures: locked with the telemetry' : 'router figures: none received',
    );
    $('router-status').className = 'status-line';
  }
}

/** Called every second: a frame overdue (a sampler or scrape that stopped) makes the figures not current. */
function checkAge() {
  if (!current || lastFrameAt === null) return;
  // One interval, plus a run that used its whole 5 s timeout, plus a scrape, plus slack.
  if (Date.now() - lastFrameAt > 2 * lastIntervalMs + 10_000) {
    clearCurrent(`GPU telemetry unavailable: no sample since ${new Date(lastFrameAt).toLocaleTimeString()}`);
  }
}

export function onHello(frame) {
  required = frame.telemetry === 'credential-required';
  $('telemetry-auth').hidden = !required;
  if (required && credential !== null) send({ type: 'telemetry-auth', credential });
  // Locked until a credential is accepted: no sample is on its way, so none is "awaited".
  else if (required) clearCurrent('GPU telemetry: locked — enter the telemetry credential');
}

/** Each card's history as this page holds it (uuid -> series), kept up to date by the frames. */
let history = new Map();

/**
 * A frame with the whole history (`series`, the first after subscribing) replaces what is
 * held; later frames carry only new points per card (`series_delta`: points added, `trim`
 * old ones aged out) and the cards still kept (`series_keep`). Returns the frame's figures
 * with the whole history, as the cards draw it.
 */
function withHistory(gpu) {
  if (Array.isArray(gpu.series)) {
    history = new Map(gpu.series.map((s) => [s.uuid, s]));
    return gpu;
  }
  if (!Array.isArray(gpu.series_delta) || !Array.isArray(gpu.series_keep)) throw new Error('not a telemetry frame');
  for (const d of gpu.series_delta) {
    const s = history.get(d.uuid) ?? { uuid: d.uuid, t: [], memory_used_mib: [], utilization_pct: [] };
    s.name = d.name;
    s.index = d.index;
    for (const key of ['t', 'memory_used_mib', 'utilization_pct']) {
      s[key].splice(0, d.trim);
      s[key].push(...d[key]);
    }
    history.set(d.uuid, s);
  }
  const keep = new Set(gpu.series_keep);
  for (const uuid of history.keys()) if (!keep.has(uuid)) history.delete(uuid);
  return { ...gpu, series: gpu.series_keep.map((uuid) => history.get(uuid)) };
}

export function onFrame(frame) {
  if (frame.type === 'telemetry-denied') {
    credential = null;
    $('telemetry-auth-status').textContent = `telemetry credential refused (HTTP ${frame.status})`;
    clearCurrent('GPU telemetry: locked — enter the telemetry credential');
    return;
  }
  if (required) $('telemetry-auth').hidden = true;
  frame = { ...frame, gpu: withHistory(frame.gpu) };
  const [text, kind] = statusLine(frame.gpu);
  say($('gpu-status'), text);
  $('gpu-status').className = `status-line status-${kind}`;
  renderAggregate(frame.gpu);
  renderCards(frame.gpu);
  // The panel's points first: the Router table shows each alias's latest rates from them.
  if (frame.router !== null && frame.router !== undefined) routerPanel.onFrame(frame);
  renderRouter(frame.router);
  // Current only once the whole frame was drawn (a frame that cannot be read throws first).
  lastFrameAt = Date.now();
  lastIntervalMs = Number.isInteger(frame.gpu.interval_ms) && frame.gpu.interval_ms > 0 ? frame.gpu.interval_ms : 3000;
  current = true;
}

/** A telemetry frame this page cannot read: nothing on screen stays current. */
export function onBadFrame() {
  clearCurrent('GPU telemetry unavailable: the dashboard server sent a frame this page cannot read');
}

export function onLinkLost() {
  clearCurrent('GPU telemetry: the dashboard server is unreachable');
}

export function init() {
  routerPanel.init();
  setInterval(checkAge, 1000);
  $('telemetry-auth').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const input = $('telemetry-credential');
    const value = input.value.trim();
    input.value = '';
    // Never sent when no server could take it (see workloads.js).
    if (!CREDENTIAL_RE.test(value)) {
      $('telemetry-auth-status').textContent = 'not a credential: 1-4096 printable ASCII characters without spaces';
      return;
    }
    credential = value;
    $('telemetry-auth-status').textContent = '';
    send({ type: 'telemetry-auth', credential });
  });
}
