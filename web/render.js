// Drawing a svc-workloads/v1 NodeResult so that it tells the truth at a glance: the node's
// and every source's status in words and colour, "count unknown" for omitted: null, stale
// records with their age, quality badges, and never an empty list where the answer is
// partial or unavailable.
const $ = (id) => document.getElementById(id);

export const STATUS_WORDS = {
  complete: '— the bounded query finished with no known omissions',
  partial: '— trust the records shown, but this is not the whole inventory',
  unavailable: '— the owner could not be read; this is not an empty or idle inventory',
};
export const REASON_WORDS = {
  'no-observation': 'never heard from its owner',
  timeout: 'its observations are too old',
  'inspection-error': 'its owner could not inspect its store',
  'not-served': 'not served by this node',
  overloaded: 'its owner is overloaded',
  malformed: 'its owner sent malformed data',
};
const KIND_OF_OWNER = {
  router: 'router-request',
  controller: 'controller-operation',
  benchmark: 'benchmark-job',
  media: 'media-job',
  recipe: 'recipe-serve',
  manifest: 'recipe-serve',
};
const FAILURE_WORDS = {
  unreachable: 'the controller could not be reached',
  timeout: 'the controller did not answer in time',
  redirect: 'the controller answered with a redirect (never followed)',
  failed: 'the controller failed to answer (HTTP 5xx)',
  'not-served': 'the controller does not serve node_workloads',
  malformed: 'the controller answered with something that is not a valid NodeResult',
  oversized: 'the controller answer was too large and was discarded',
  'wrong-identity': 'wrong identity: the controller answered for a different node than expected',
  'controller-unauthenticated': 'the controller did not accept the credential (HTTP 401)',
  'controller-forbidden': 'the controller refused the credential (HTTP 403)',
  refused: 'the controller refused the read',
};

export function el(tag, text, className) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (className) e.className = className;
  return e;
}

/** "12 s ago", "3 min ago" from an RFC 3339 timestamp. */
function age(ts) {
  const ms = Date.now() - Date.parse(ts);
  if (!Number.isFinite(ms)) return 'unknown';
  // A timestamp ahead of this browser's clock is not "0 s ago": the clocks disagree, and the
  // age cannot be known. Two seconds of slack for a read that just arrived.
  if (ms < -2000) return `${Math.round(-ms / 1000)} s in the future (the clocks disagree; age unknown)`;
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

/** An element whose text is re-computed every second from its timestamp. */
export function ageSpan(prefix, ts) {
  const span = el('span', `${prefix}${age(ts)}`, 'age');
  span.dataset.ts = ts;
  span.dataset.prefix = prefix;
  span.title = ts;
  // The age is rewritten every second (tickAges): inside a live region (#node-status) that
  // would be announced every second. Its own ticking is not news; the answer around it is.
  span.setAttribute('aria-live', 'off');
  return span;
}

/**
 * Brings a table body to `fresh` (new rows, each with a `data-key`) in place: a row whose key
 * is already drawn stays the same element, and only its cells whose markup differs are
 * swapped, so that a button in an unchanged cell is never replaced under the pointer (a click
 * needs its mousedown and mouseup on the same element: a table redrawn on every update
 * swallows clicks). Rows are moved only where the order changed; rows no longer listed go.
 */
export function syncRows(tbody, fresh) {
  const wanted = new Set(fresh.map((tr) => tr.dataset.key));
  const drawn = new Map();
  // Rows no longer listed go first, so that the rows kept need not move (moving a focused
  // element out and back in takes its focus away). A key drawn twice keeps its first row.
  for (const tr of [...tbody.rows]) {
    if (!wanted.has(tr.dataset.key) || drawn.has(tr.dataset.key)) tr.remove();
    else drawn.set(tr.dataset.key, tr);
  }
  let at = tbody.firstElementChild;
  for (const next of fresh) {
    const old = drawn.get(next.dataset.key);
    if (old !== undefined) drawn.delete(next.dataset.key);
    const row = old === undefined ? next : patchRow(old, next);
    if (row === at) at = at.nextElementSibling;
    else tbody.insertBefore(row, at);
  }
}

/**
 * A live part of the page held still while a pointer is pressed in it: rows that move between
 * mousedown and mouseup (a request that finished above, a new one on top, a table above that
 * grew by a row) would put another row under the pointer and the click would land on
 * neither, and a drag that selects an id to copy would lose its text. Returns
 * `later(key, fn)`: runs `fn` now, or, while pressed, keeps the newest `fn` of each key and
 * runs them just after the release (after its click was delivered). A press on a form
 * control does not hold (a select's list may never send its release to the page), and no
 * hold outlasts HOLD_MS.
 */
export function heldWhilePressed(root) {
  let pressed = null;
  const pending = new Map();
  const release = () => {
    if (pressed === null) return;
    clearTimeout(pressed);
    pressed = null;
    if (pending.size === 0) return;
    const run = [...pending.values()];
    pending.clear();
    // A later task: the click of this release reaches the rows as they were pressed.
    setTimeout(() => {
      for (const fn of run) fn();
    }, 0);
  };
  root.addEventListener('pointerdown', (ev) => {
    if (ev.target instanceof Element && ev.target.closest('select, input, textarea, label')) return;
    clearTimeout(pressed);
    pressed = setTimeout(release, HOLD_MS);
  });
  for (const type of ['pointerup', 'pointercancel', 'blur']) window.addEventListener(type, release);
  return (key, fn) => {
    if (pressed === null) fn();
    else pending.set(key, fn);
  };
}
/** Longest a press holds a live view still: a click is far shorter, a slow drag-select may be. */
const HOLD_MS = 10_000;

/** Makes row `old` show what `next` shows, keeping `old` and every cell that did not change. */
function patchRow(old, next) {
  for (const a of [...old.attributes]) if (!next.hasAttribute(a.name)) old.removeAttribute(a.name);
  for (const a of next.attributes) if (old.getAttribute(a.name) !== a.value) old.setAttribute(a.name, a.value);
  const before = [...old.children];
  const after = [...next.children];
  if (before.length !== after.length) {
    old.replaceChildren(...after);
    return old;
  }
  for (let i = 0; i < after.length; i++)
    if (before[i].outerHTML !== after[i].outerHTML) before[i].replaceWith(after[i]);
  return old;
}

/** An element's words without its ticking ages (what a reader would be told is new). */
export function withoutAges(root) {
  const copy = root.cloneNode(true);
  for (const a of copy.querySelectorAll('span.age')) a.remove();
  return copy.textContent;
}

export function tickAges() {
  for (const span of document.querySelectorAll('span.age[data-ts]')) {
    const text = `${span.dataset.prefix}${age(span.dataset.ts)}`;
    if (span.textContent !== text) span.textContent = text;
  }
}

function omitted(t) {
  return t.omitted === null ? 'count unknown' : String(t.omitted);
}

export function badge(text, className) {
  return el('span', text, `badge ${className}`);
}

export function clearInventory() {
  $('counts').hidden = true;
  $('last-known').hidden = true;
  $('sources').hidden = true;
  $('sources').tBodies[0].replaceChildren();
  $('records').hidden = true;
  $('records').tBodies[0].replaceChildren();
  $('records-empty').hidden = true;
  $('node-status').replaceChildren(document.createTextNode("Connect to read this node's workloads."));
  $('node-status').className = 'status-line';
}

export function showMessage(text, kind) {
  const line = $('node-status');
  line.replaceChildren(document.createTextNode(text));
  line.className = `status-line status-${kind}`;
}

/** Renders one `workloads` frame (a NodeResult, possibly synthesized as unavailable). */
export function renderNode(frame, filters) {
  const n = frame.result;
  const line = $('node-status');
  line.className = `status-line status-${n.status}`;
  const parts = [
    el('strong', `Node ${n.expected_host}: `),
    badge(n.status, `st-${n.status}`),
    document.createTextNode(` ${STATUS_WORDS[n.status] ?? ''}`),
  ];
  if (frame.failure)
    parts.push(
      el(
        'div',
        `Why: ${FAILURE_WORDS[frame.failure] ?? 'the controller could not be read'}${n.condition ? ` (condition ${n.condition})` : ''}.`,
        'why',
      ),
    );
  else if (n.condition) parts.push(el('div', `Condition: ${n.condition}.`, 'why'));
  const meta = el('div', '', 'meta');
  meta.append(
    document.createTextNode(`${n.truncation.returned} records shown · left out: ${nodeOmitted(n)} · `),
    ageSpan(frame.failure ? 'tried ' : 'collected ', n.collected_at),
  );
  parts.push(meta);
  // The same answer again (a poll that found nothing new) is not news for the live region:
  // only the age it ticks from moves.
  const next = document.createElement('div');
  next.append(...parts);
  const shown = line.querySelector('span.age');
  if (shown !== null && withoutAges(line) === withoutAges(next)) {
    shown.dataset.ts = n.collected_at;
    shown.title = n.collected_at;
  } else line.replaceChildren(...next.childNodes);
  renderSources(n.sources, filters);
  renderRecords(n, frame.failure);
  if (frame.failure) {
    $('counts').hidden = true;
    renderLastKnown();
  } else {
    renderCounts(n);
    lastGood = { result: n, at: Date.now() };
    $('last-known').hidden = true;
  }
}

/** Why a source answered as it did, with the exact count left out when it is known. */
export function sourceWhy(s) {
  if (s.reason) return REASON_WORDS[s.reason] ?? s.reason;
  if (s.status !== 'partial') return '';
  const o = s.truncation.omitted;
  if (o === null) return 'records may be missing (a bound or a lost message): how many is unknown';
  if (o > 0) return `${o} record(s) left out by the bound (limit): the newest are shown`;
  return 'partial without a known omission';
}

/** "left out" for the node: exact when every source knows its count, else a lower bound. */
export function nodeOmitted(n) {
  if (n.truncation.omitted !== null) return String(n.truncation.omitted);
  const known = n.sources.reduce((sum, s) => sum + (s.truncation.omitted ?? 0), 0);
  return known > 0 ? `at least ${known}, plus an unknown number` : 'count unknown';
}

export const ACTIVE_STATES = new Set(['checking', 'admitted', 'dispatched', 'streaming', 'queued', 'running']);

/** Counts by owner and state on top: what is running, at a glance. */
function renderCounts(n) {
  const box = $('counts');
  const rows = [];
  for (const s of n.sources) {
    if (s.records.length === 0) continue;
    const byState = new Map();
    let stale = 0;
    for (const r of s.records) {
      byState.set(r.state, (byState.get(r.state) ?? 0) + 1);
      if (r.observation_quality === 'stale') stale += 1;
    }
    const active = [...byState].filter(([st]) => ACTIVE_STATES.has(st)).reduce((a, [, c]) => a + c, 0);
    const tr = el('tr', undefined, active > 0 ? 'has-active' : '');
    tr.dataset.owner = s.owner;
    tr.dataset.key = s.owner;
    tr.append(
      el('th', s.owner),
      el('td', String(active), active > 0 ? 'count-active' : ''),
      el('td', [...byState].map(([st, c]) => `${c} ${st}`).join(' · ')),
      el('td', stale > 0 ? `${stale} stale` : '—', stale > 0 ? 'count-stale' : ''),
    );
    rows.push(tr);
  }
  syncRows(box.tBodies[0], rows);
  box.hidden = rows.length === 0;
}

function renderSources(sources, filters) {
  const table = $('sources');
  const rows = sources.map((s) => {
    // A source the owner/kind filter leaves out still reports its status, but cannot change
    // the answer to the question asked: say so, or "complete" next to red rows looks wrong.
    const outside =
      (filters.owner && filters.owner !== s.owner) || (filters.kind && filters.kind !== KIND_OF_OWNER[s.owner]);
    const tr = el('tr', undefined, `src-${s.status}${outside ? ' outside' : ''}`);
    tr.dataset.owner = s.owner;
    tr.dataset.key = s.owner;
    const status = el('td');
    status.append(badge(s.status, `st-${s.status}`));
    const why = sourceWhy(s);
    // The figures before the words: on a phone they stay on screen while the words wrap.
    tr.append(
      el('td', s.owner),
      status,
      el('td', String(s.truncation.returned)),
      el('td', omitted(s.truncation), s.truncation.omitted === null ? 'unknown' : ''),
      el('td', outside ? `${why}${why ? ' · ' : ''}outside the filter: does not affect this answer` : why, 'why'),
    );
    return tr;
  });
  syncRows(table.tBodies[0], rows);
  table.hidden = rows.length === 0;
}

function renderRecords(n, failure) {
  const records = n.sources.flatMap((s) => s.records);
  // Active work first, then newest first.
  const rank = (r) => (ACTIVE_STATES.has(r.state) ? 0 : 1);
  records.sort((a, b) =>
    rank(a) !== rank(b)
      ? rank(a) - rank(b)
      : a.updated_at < b.updated_at
        ? 1
        : a.updated_at > b.updated_at
          ? -1
          : a.id < b.id
            ? -1
            : 1,
  );
  const empty = $('records-empty');
  if (records.length === 0) {
    const silent = n.sources.filter((s) => s.status === 'unavailable');
    empty.textContent = failure
      ? 'No records: the node could not be read. This is not an empty inventory.'
      : n.status === 'unavailable' && silent.length > 0
        ? `No records: ${silent.map((s) => `${s.owner} (${s.reason ? (REASON_WORDS[s.reason] ?? s.reason) : 'unavailable'})`).join(', ')} did not answer; the node itself was read. This is not an empty inventory.`
        : n.status === 'unavailable'
          ? 'No records: the node could not be read. This is not an empty inventory.'
          : n.status === 'partial'
            ? 'No records survived, but the answer is partial: this is not proof that nothing is running.'
            : 'No records match these filters (complete answer).';
    empty.className = `empty status-${failure ? 'unavailable' : n.status}`;
    empty.hidden = false;
  } else {
    empty.hidden = true;
  }
  // In place, row by row: an id selected to copy, or a row under the pointer, survives the next poll.
  syncRows($('records').tBodies[0], records.map(recordRow));
  $('records').hidden = records.length === 0;
}

export function recordRow(r) {
  {
    const tr = el(
      'tr',
      undefined,
      `${ACTIVE_STATES.has(r.state) ? 'active' : ''}${r.observation_quality === 'stale' ? ' stale' : ''}`,
    );
    tr.dataset.id = r.id;
    tr.dataset.key = r.id;
    tr.dataset.state = r.state;
    const quality = el('td');
    quality.append(badge(r.observation_quality, `q-${r.observation_quality}`));
    // A stale record keeps its state; the label says how old its evidence is.
    if (r.observation_quality === 'stale') quality.append(ageSpan(' observed ', r.source_timestamp));
    const p = r.progress;
    const progress = p ? `${p.completed} / ${p.total === null ? '?' : p.total} ${p.unit}` : '—';
    const updated = el('td');
    updated.append(ageSpan('', r.updated_at));
    const id = el('td', r.id, 'mono id');
    id.title = r.id;
    tr.append(
      el('td', r.owner),
      el('td', r.kind),
      el('td', r.state, `state-${r.state}`),
      el('td', r.phase),
      el('td', r.outcome ?? '—'),
      el('td', progress),
      quality,
      updated,
      id,
    );
    return tr;
  }
}

/** The last view read with the current filters, drawn greyed while the node cannot be read. */
let lastGood = null;

function renderLastKnown() {
  const box = $('last-known');
  if (lastGood === null) {
    box.hidden = true;
    return;
  }
  const records = lastGood.result.sources.flatMap((s) => s.records);
  $('last-known-title').textContent =
    `Last view read, as of ${new Date(lastGood.at).toLocaleTimeString([], { hour12: false })}: not current`;
  $('last-known-table').tBodies[0].replaceChildren(...records.map(recordRow));
  box.hidden = false;
}

/** Forgets the last-known view (Disconnect, other filters, another credential). */
export function forgetLastKnown() {
  lastGood = null;
  $('last-known').hidden = true;
  $('last-known-table').tBodies[0].replaceChildren();
}

/** The node cannot be read now: what was last read stays, greyed, with its time. */
export function showLastKnown() {
  renderLastKnown();
}
