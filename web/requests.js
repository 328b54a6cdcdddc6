// The Requests tab: the router's requests in flight and the finished ones it listed as
// recent while this page watched, with filters, and a search by request id or session id
// that opens the diagnosis. The dashboard server reads the router with its own router
// credential (never sent here) and diagnoses with `router diagnose`'s own pure code; this
// page only draws what it is sent. No prompt or answer is ever shown: the router keeps none.
import { requestsVisible, send } from './link.js';
import { heldWhilePressed, syncRows } from './render.js';

const $ = (id) => document.getElementById(id);
const OUTCOMES = ['success', 'error', 'cancelled', 'timeout', 'rejected', 'disconnected'];
const MAX_FINISHED = 200;

/** Whether the workload session is connected (the server checks the grant itself). */
let session = false;
let watching = false;
let finished = [];
let active = [];
let lastState = null;
/** The number of the newest search: answers to older ones are dropped. */
let searchN = 0;
/** A search the page started itself (an opened request that finished): its answer takes no focus. */
let quietN = null;
/** The request in flight whose details are open (null: none), kept up to date by each round. */
let openedActive = null;

function el(tag, text, className) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (className) e.className = className;
  return e;
}

function say(id, text, kind) {
  const e = $(id);
  if (e.textContent !== text) e.textContent = text;
  if (kind) e.className = `status-line status-${kind}`;
}

const ms = (v) =>
  v === null || v === undefined ? 'not measured' : v < 1000 ? `${Math.round(v)} ms` : `${(v / 1000).toFixed(2)} s`;
const tokens = (n, src) => `${n === null ? '?' : n} (${src})`;

function syncWatch() {
  const want = session && requestsVisible();
  if (want && !watching) watching = send({ type: 'requests-watch' });
  else if (!want && watching) {
    send({ type: 'requests-unwatch' });
    watching = false;
  }
}

function filters() {
  const minText = $('rq-min-latency').value.trim();
  const min = minText === '' ? null : Number(minText);
  return {
    alias: $('rq-alias').value,
    outcome: $('rq-outcome').value,
    session: $('rq-session').value.trim(),
    min: Number.isFinite(min) ? min : null,
  };
}

function requestCell(id, inFlight = false) {
  const td = el('td', undefined, 'mono');
  const b = el('button', id, 'link');
  b.type = 'button';
  b.title = inFlight
    ? `${id}: its figures while in flight, then its diagnosis once it finishes`
    : `diagnose ${id} (svc-serving router diagnose ${id})`;
  b.addEventListener('click', () => (inFlight ? openActive(id) : search(id)));
  td.append(b);
  return td;
}

/**
 * What a round redraws runs now, or once a pointer pressed in the Requests panel is released
 * (heldWhilePressed, set by init): nothing above or under a pressed row moves.
 */
let later = (_key, fn) => fn();
const renderFinished = () => later('finished', drawFinished);
const renderActive = () => later('active', drawActive);

function drawFinished() {
  const f = filters();
  const shown = finished.filter(
    ({ request: r }) =>
      (f.alias === '' || r.model === f.alias) &&
      (f.outcome === '' || r.outcome === f.outcome) &&
      (f.session === '' || r.session_id === f.session) &&
      (f.min === null || (r.latency_ms !== null && r.latency_ms >= f.min)),
  );
  // In place (syncRows): a row drawn again under a click (a new round, or a filter's change
  // event firing as the pointer goes down elsewhere) would lose that click.
  syncRows($('rq-finished').tBodies[0], shown.map(finishedRow));
  $('rq-finished-count').textContent = `(${shown.length} shown of ${finished.length} seen)`;
  // The alias filter offers the aliases seen.
  const aliases = new Set(finished.map((e) => e.request.model));
  for (const a of active) aliases.add(a.model);
  const select = $('rq-alias');
  const have = new Set([...select.options].map((o) => o.value));
  for (const a of [...aliases].sort()) if (!have.has(a)) select.append(new Option(a, a));
}

function finishedRow({ request: r, interpretation }) {
  const tr = el('tr', undefined, r.outcome === 'success' ? '' : 'rq-failed');
  tr.dataset.id = r.request_id;
  // A caller's own id may come back on a later request: the finish time tells them apart.
  tr.dataset.key = `${r.request_id}|${r.finished_at}`;
  tr.title = interpretation.join(', ');
  tr.append(
    requestCell(r.request_id),
    el('td', r.model),
    el('td', r.outcome, `outcome-${r.outcome}`),
    el('td', String(r.status_code)),
    el('td', ms(r.latency_ms)),
    el('td', ms(r.time_to_first_content_ms)),
    el('td', r.finish_reason ?? '—'),
    el(
      'td',
      `${tokens(r.usage.prompt_tokens, r.usage.prompt_source)} / ${tokens(r.usage.completion_tokens, r.usage.completion_source)}`,
    ),
    el('td', r.session_id ?? '—'),
    el('td', new Date(r.finished_at).toLocaleTimeString()),
  );
  return tr;
}

const activeTokens = (a) =>
  `${a.tokens.prompt_estimated ?? '?'}+${a.tokens.completion_estimated ?? '?'} / ${a.tokens.prompt_upstream ?? '?'}+${a.tokens.completion_upstream ?? '?'}`;

function activeRow(a) {
  const tr = el('tr', undefined, 'rq-active');
  tr.dataset.id = a.request_id;
  tr.dataset.key = a.request_id;
  tr.append(
    requestCell(a.request_id, true),
    el('td', a.model),
    el('td', a.phase, `state-${a.phase}`),
    el('td', ms(a.elapsed_ms)),
    el('td', ms(a.since_upstream_activity_ms)),
    el('td', activeTokens(a)),
    el('td', a.session_id ?? '—'),
  );
  return tr;
}

function drawActive() {
  // Rows keyed by request id and updated in place: every round changes the elapsed times,
  // and a table drawn anew each time swallows a click that spans one.
  syncRows($('rq-active').tBodies[0], active.map(activeRow));
  const t = lastState?.active_truncation;
  $('rq-active-count').textContent =
    t && t.omitted !== 0
      ? `(${active.length}, plus ${t.omitted === null ? 'an unknown number' : t.omitted} more)`
      : `(${active.length})`;
}

/** The figures of a request in flight, as the last round read them. */
function activeDetail(a) {
  const dl = el('dl', undefined, 'evidence');
  const add = (k, v) => dl.append(el('dt', k), el('dd', v));
  add('request', a.request_id);
  add('alias · route', `${a.model} · ${a.route}`);
  add('phase', a.phase);
  add('elapsed · since upstream activity', `${ms(a.elapsed_ms)} · ${ms(a.since_upstream_activity_ms)}`);
  add('admission wait', ms(a.admission_wait_ms));
  add('tokens (estimated / engine)', activeTokens(a));
  if (a.session_id) add('session', a.session_id);
  add('started', a.started_at);
  return [dl, el('p', 'In flight: its diagnosis (svc-serving router diagnose) opens here once it finishes.', 'note')];
}

/** Opens a request in flight (its row's button); the next rounds keep it current. */
function openActive(id) {
  const a = active.find((x) => x.request_id === id);
  if (a === undefined) return search(id);
  openedActive = id;
  say('rq-search-status', '');
  showDetail(`In flight: ${id}`, activeDetail(a));
}

/** After a round: the request opened in flight gets its new figures, or its diagnosis once it left. */
function followOpened() {
  // A round that could not read the router says nothing about whether it finished.
  if (openedActive === null || lastState?.status !== 'ok') return;
  const a = active.find((x) => x.request_id === openedActive);
  if (a !== undefined) {
    $('rq-detail-body').replaceChildren(...activeDetail(a));
    return;
  }
  const id = openedActive;
  openedActive = null;
  search(id, true);
}

function evidenceList(r) {
  const dl = el('dl', undefined, 'evidence');
  const add = (k, v) => dl.append(el('dt', k), el('dd', v));
  add('request', r.request_id);
  add('alias · route', `${r.model} · ${r.route}`);
  add('outcome · status', `${r.outcome} · HTTP ${r.status_code}`);
  add('latency · first token', `${ms(r.latency_ms)} · ${ms(r.time_to_first_content_ms)}`);
  add('finish', r.finish_reason ?? '—');
  add(
    'tokens',
    `prompt ${tokens(r.usage.prompt_tokens, r.usage.prompt_source)} · completion ${tokens(r.usage.completion_tokens, r.usage.completion_source)}`,
  );
  if (r.session_id) add('session', r.session_id);
  add('started · finished', `${r.started_at} · ${r.finished_at}`);
  return dl;
}

function historyTable(h) {
  const box = el('div');
  if (h?.kind !== 'found') {
    box.append(
      el(
        'p',
        h?.kind === 'malformed'
          ? 'The router answered the session lookup with something malformed: not shown.'
          : 'The session history could not be read from the router.',
        'warn',
      ),
    );
    return box;
  }
  const more =
    h.truncation.omitted === 0
      ? ''
      : h.truncation.omitted === null
        ? ', plus an unknown number not listed'
        : `, plus ${h.truncation.omitted} not listed`;
  box.append(el('p', `${h.requests.length} request(s) of this session, newest first${more}.`));
  const table = el('table');
  const head = el('tr');
  for (const t of ['Request', 'Alias', 'Outcome', 'Latency', 'First token', 'Interpretation']) head.append(el('th', t));
  table.append(el('thead'), el('tbody'));
  table.tHead.append(head);
  for (const { request: r, interpretation } of h.requests) {
    const tr = el('tr');
    tr.append(
      requestCell(r.request_id),
      el('td', r.model),
      el('td', r.outcome),
      el('td', ms(r.latency_ms)),
      el('td', ms(r.time_to_first_content_ms)),
      el('td', interpretation.join(', ') || '—'),
    );
    table.tBodies[0].append(tr);
  }
  const scroll = el('div', undefined, 'scroll');
  // A box that may scroll sideways is reachable from the keyboard.
  scroll.tabIndex = 0;
  scroll.append(table);
  box.append(scroll);
  return box;
}

function showDetail(title, children, focus = true) {
  $('rq-detail-title').textContent = title;
  $('rq-detail-body').replaceChildren(...children);
  $('rq-detail').hidden = false;
  if (focus) $('rq-detail-title').focus();
}

/**
 * The answer to search `n`: one the operator asked for takes the focus at once; one the page
 * asked for itself (a request opened in flight that finished) takes none, and waits while a
 * pointer is pressed in the panel (the panel's height changes with it).
 */
function detail(n, title, body) {
  if (n !== quietN) return showDetail(title, body);
  later('detail', () => showDetail(title, body, false));
}

/** Looks up a request id, else a session id. `quiet`: started by the page, its answer takes no focus. */
function search(value, quiet = false) {
  const v = value.trim();
  if (v === '') return;
  if (!quiet) openedActive = null;
  $('rq-search').value = v;
  searchN += 1;
  quietN = quiet ? searchN : null;
  say('rq-search-status', `looking up ${v}…`);
  send({ type: 'requests-lookup', n: searchN, id: v });
}

export function onFrame(frame) {
  if (frame.type === 'requests') {
    lastState = frame;
    active = frame.active;
    // Newest finish first, as the server keeps them.
    finished = (frame.reset ? frame.added : [...frame.added, ...finished])
      .sort((a, b) => Date.parse(b.request.finished_at) - Date.parse(a.request.finished_at))
      .slice(0, MAX_FINISHED);
    if (frame.status === 'ok')
      say(
        'requests-status',
        `Router read ${new Date(frame.read_at).toLocaleTimeString()}: ${active.length} in flight, ${finished.length} finished seen.`,
        'complete',
      );
    else {
      active = [];
      say(
        'requests-status',
        `The router could not be read (${new Date(frame.read_at).toLocaleTimeString()}): nothing in flight is shown; this is not an idle router.`,
        'unavailable',
      );
    }
    renderActive();
    renderFinished();
    later('opened', followOpened);
    return;
  }
  if (typeof frame.n === 'number' && frame.n !== 0 && frame.n !== searchN) return;
  if (frame.type === 'requests-denied') {
    const words = {
      'not-configured': 'No router is configured for this dashboard (dashboard serve --router-url/--router-auth-env).',
      'not-connected': 'Connect (Workloads tab) to see the router requests.',
      forbidden: 'This credential lacks requests:read and workloads:read: router requests are not shown.',
      'invalid-id': 'Not a request id or session id: 1-128 letters, digits or ._:@/+=- characters.',
      'invalid-session': 'Not a session id: 1-128 letters, digits or ._:@/+=- characters.',
    };
    const text = words[frame.code] ?? 'refused';
    if (frame.n) say('rq-search-status', text);
    else say('requests-status', text, 'unavailable');
    watching = false;
    return;
  }
  if (frame.type === 'requests-diagnosis') {
    const f = frame.found;
    if (f.kind === 'found') {
      say('rq-search-status', '');
      const codes = el('p');
      codes.append(el('strong', 'Interpretation: '), document.createTextNode(f.interpretation.join(', ') || 'none'));
      const body = [
        codes,
        evidenceList(f.request),
        el('p', `The same as: svc-serving router diagnose ${frame.id}`, 'note mono'),
        ...(frame.history ? [el('h4', `Session ${f.request.session_id}`), historyTable(frame.history)] : []),
      ];
      detail(frame.n, `Diagnosis of ${frame.id}`, body);
    } else if (f.kind === 'not-found') {
      // Not a request the router holds: perhaps a session id.
      send({ type: 'requests-session', n: searchN, session: frame.id });
    } else
      say(
        'rq-search-status',
        f.kind === 'malformed'
          ? 'The router answered with something malformed: not shown.'
          : 'The router could not be read.',
      );
    return;
  }
  if (frame.type === 'requests-history') {
    const h = frame.history;
    if (h.kind === 'found' && h.requests.length === 0) {
      say(
        'rq-search-status',
        `Not found: no finished request or session ${frame.session} (it may be in flight, evicted or outside the router's history).`,
      );
      return;
    }
    say('rq-search-status', '');
    detail(frame.n, `Session ${frame.session}`, [historyTable(h)]);
  }
}

export function onBadFrame() {
  active = [];
  finished = [];
  renderActive();
  renderFinished();
  say(
    'requests-status',
    'The dashboard server sent a requests frame this page cannot read: nothing is shown.',
    'unavailable',
  );
}

export function onSession(connected) {
  session = connected;
  if (!connected) {
    watching = false;
    active = [];
    finished = [];
    lastState = null;
    openedActive = null;
    renderActive();
    renderFinished();
    $('rq-detail').hidden = true;
    say(
      'requests-status',
      'Connect (Workloads tab) with a credential granted requests:read or workloads:read to see the router\u2019s requests.',
      'idle',
    );
  }
  syncWatch();
}

export function onLinkLost() {
  watching = false;
  session = false;
  if (lastState !== null)
    say('requests-status', 'The dashboard server is unreachable: the requests shown are not current.', 'unavailable');
}

export function onVisibilityChange() {
  syncWatch();
}

export function init() {
  later = heldWhilePressed($('panel-requests'));
  for (const o of OUTCOMES) $('rq-outcome').append(new Option(o, o));
  $('rq-filters').addEventListener('submit', (ev) => ev.preventDefault());
  $('rq-filters').addEventListener('input', () => renderFinished());
  $('rq-filters').addEventListener('change', () => renderFinished());
  $('requests-search').addEventListener('submit', (ev) => {
    ev.preventDefault();
    search($('rq-search').value);
  });
}
