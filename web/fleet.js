// The Fleet tab (decision 0078): the declared nodes of one fleet controller, each with its
// condition, status, counts by state and age; opening a node shows its sources and records.
// The dashboard server reads the fleet with the credential given at Connect (checked there
// against its local policy) and holds the answer to `fleet workloads --expected-node`'s
// checks. The first answer is the whole fleet, later ones what changed, applied with the
// server's own module and checked against the digest of its fresh read.
import { fleetVisible, pollInterval, send } from './link.js';
import {
  ACTIVE_STATES,
  REASON_WORDS,
  STATUS_WORDS,
  ageSpan,
  badge,
  el,
  nodeOmitted,
  recordRow,
  sourceWhy,
  syncRows,
  withoutAges,
} from './render.js';
import { applyFleetDelta, fleetDigest } from '/shared/view-delta.js';

const $ = (id) => document.getElementById(id);

const FAILURE_WORDS = {
  unreachable: 'the fleet controller could not be reached',
  timeout: 'the fleet controller did not answer in time (it waits up to its node_timeout_ms for each node)',
  redirect: 'the fleet controller answered with a redirect (never followed)',
  failed: 'the fleet controller failed to answer (HTTP 5xx)',
  'not-served': 'the server does not serve fleet_workloads: is it the fleet controller?',
  malformed: 'the fleet controller answered with something that is not a valid fleet result',
  oversized: 'the fleet answer was too large and was discarded',
  'wrong-identity': 'a node entry holds records of another host',
  'not-declared': "this dashboard's expected node is not among the fleet's declared nodes: not the fleet meant",
  'controller-unauthenticated': 'the fleet controller did not accept the credential (HTTP 401)',
  'controller-forbidden': 'the fleet controller refused the credential (HTTP 403)',
  refused: 'the fleet controller refused the read',
};
const CONDITION_WORDS = {
  unreachable: 'no answer within node_timeout_ms',
  sleeping: 'declared asleep: not asked',
  'wrong-identity': 'answered for another node',
  malformed: 'sent an answer that could not be believed',
  incompatible: 'speaks another schema',
};
/** Silent for longer than this: nothing shown is current. */
const OVERDUE_MS = 20_000;

let session = false;
/** The fleet as the page holds it: the last whole read with every delta since applied. */
let view = null;
let needFull = false;
let awaitingSince = null;
/** The node opened (host id), kept across reads. */
let opened = null;

function say(content, kind) {
  const line = $('fleet-status');
  const next = document.createElement('div');
  if (typeof content === 'string') next.textContent = content;
  else next.append(...content);
  // The same words again (a poll that found nothing new) are not news for the live region.
  const shown = line.querySelector('span.age');
  const nextAge = next.querySelector('span.age');
  if (shown !== null && nextAge !== null && withoutAges(line) === withoutAges(next)) {
    shown.dataset.ts = nextAge.dataset.ts;
    shown.title = nextAge.title;
  } else line.replaceChildren(...next.childNodes);
  line.className = `status-line status-${kind}`;
}

function clear() {
  $('fleet-nodes').hidden = true;
  $('fleet-nodes').tBodies[0].replaceChildren();
  $('fleet-node').hidden = true;
  const panel = $('panel-fleet');
  delete panel.dataset.viewSeq;
  delete panel.dataset.viewDigest;
}

function markView() {
  const panel = $('panel-fleet');
  if (view === null) {
    delete panel.dataset.viewSeq;
    delete panel.dataset.viewDigest;
  } else {
    panel.dataset.viewSeq = String(view.seq);
    panel.dataset.viewDigest = fleetDigest(view.result);
  }
}

function counts(n) {
  const byState = new Map();
  let active = 0;
  for (const s of n.sources)
    for (const r of s.records) {
      byState.set(r.state, (byState.get(r.state) ?? 0) + 1);
      if (ACTIVE_STATES.has(r.state)) active += 1;
    }
  return { active, byState: [...byState].map(([st, c]) => `${c} ${st}`).join(' · ') };
}

function nodeRow(n) {
  const tr = el('tr', undefined, `src-${n.status}${n.expected_host === opened ? ' opened' : ''}`);
  tr.dataset.host = n.expected_host;
  tr.dataset.key = n.expected_host;
  const name = el('td');
  const open = el('button', n.expected_host, 'link');
  open.type = 'button';
  open.setAttribute('aria-expanded', String(n.expected_host === opened));
  open.title = `open ${n.expected_host}: its sources and records`;
  open.addEventListener('click', () => openNode(n.expected_host));
  name.append(open);
  const status = el('td');
  status.append(badge(n.status, `st-${n.status}`));
  const c = counts(n);
  const collected = el('td');
  // A node the fleet could not read is dated by the fleet's attempt: "tried", not "collected".
  collected.append(ageSpan(n.condition ? 'tried ' : '', n.collected_at));
  tr.append(
    name,
    status,
    el(
      'td',
      n.condition ? `${n.condition} (${CONDITION_WORDS[n.condition] ?? n.condition})` : '—',
      n.condition ? 'bad' : '',
    ),
    el('td', n.condition ? '?' : String(c.active), c.active > 0 ? 'count-active' : ''),
    el('td', n.condition ? 'not read' : c.byState || 'no records'),
    el('td', String(n.truncation.returned)),
    el('td', nodeOmitted(n), n.truncation.omitted === null ? 'unknown' : ''),
    collected,
  );
  return tr;
}

function render(readAt) {
  const f = view.result;
  const unhealthy = f.nodes.filter((n) => n.status !== 'complete').length;
  const meta = el('div', '', 'meta');
  meta.append(
    document.createTextNode(
      `${f.nodes.length} declared node(s) · ${unhealthy} not complete · ${f.truncation.returned} records shown · left out: ${f.truncation.omitted === null ? 'count unknown' : f.truncation.omitted} · `,
    ),
    ageSpan('collected ', f.collected_at),
  );
  say(
    [
      el('strong', 'Fleet: '),
      badge(f.status, `st-${f.status}`),
      document.createTextNode(` ${STATUS_WORDS[f.status] ?? ''}`),
      meta,
    ],
    f.status,
  );
  // In place: a node's button is never replaced under a click by the next poll's answer.
  syncRows($('fleet-nodes').tBodies[0], f.nodes.map(nodeRow));
  $('fleet-nodes').hidden = false;
  $('panel-fleet').dataset.readAt = readAt;
  renderOpened();
}

function openNode(host) {
  opened = opened === host ? null : host;
  if (view !== null) render($('panel-fleet').dataset.readAt ?? '');
  if (opened !== null) $('fleet-node-title').focus();
}

function renderOpened() {
  const n = opened === null || view === null ? undefined : view.result.nodes.find((x) => x.expected_host === opened);
  if (n === undefined) {
    $('fleet-node').hidden = true;
    return;
  }
  $('fleet-node-title').textContent = `Node ${n.expected_host}`;
  const line = $('fleet-node-status');
  line.className = `status-line status-${n.status}`;
  line.replaceChildren(badge(n.status, `st-${n.status}`), document.createTextNode(` ${STATUS_WORDS[n.status] ?? ''}`));
  if (n.condition)
    line.append(
      el(
        'div',
        `Condition: ${n.condition} — ${CONDITION_WORDS[n.condition] ?? ''}. This is not an empty or idle node.`,
        'why',
      ),
    );
  const rows = n.sources.map((s) => {
    const tr = el('tr', undefined, `src-${s.status}`);
    tr.dataset.owner = s.owner;
    tr.dataset.key = s.owner;
    const st = el('td');
    st.append(badge(s.status, `st-${s.status}`));
    tr.append(
      el('td', s.owner),
      st,
      el('td', String(s.truncation.returned)),
      el(
        'td',
        s.truncation.omitted === null ? 'count unknown' : String(s.truncation.omitted),
        s.truncation.omitted === null ? 'unknown' : '',
      ),
      el('td', sourceWhy(s), 'why'),
    );
    return tr;
  });
  syncRows($('fleet-sources').tBodies[0], rows);
  const records = n.sources.flatMap((s) => s.records);
  const rank = (r) => (ACTIVE_STATES.has(r.state) ? 0 : 1);
  records.sort((a, b) => rank(a) - rank(b) || (a.updated_at < b.updated_at ? 1 : a.updated_at > b.updated_at ? -1 : 0));
  syncRows($('fleet-records').tBodies[0], records.map(recordRow));
  $('fleet-records').hidden = records.length === 0;
  const empty = $('fleet-records-empty');
  const silent = n.sources.filter((s) => s.status === 'unavailable');
  empty.textContent = n.condition
    ? 'No records: the fleet could not read this node. This is not an empty inventory.'
    : n.status === 'unavailable'
      ? `No records: ${silent.map((s) => `${s.owner} (${REASON_WORDS[s.reason] ?? 'unavailable'})`).join(', ')} did not answer. This is not an empty inventory.`
      : n.status === 'partial'
        ? 'No records survived, but the answer is partial: this is not proof that nothing is running.'
        : 'No records on this node (complete answer).';
  empty.hidden = records.length > 0;
  $('fleet-node').hidden = false;
}

function read() {
  if (!session || !fleetVisible()) return;
  if (send({ type: 'fleet-read', ...(needFull ? { full: true } : {}) })) {
    needFull = false;
    awaitingSince ??= Date.now();
  }
}

function resync() {
  view = null;
  needFull = true;
  markView();
  read();
}

export function onFrame(frame) {
  if (frame.type === 'fleet-denied') {
    awaitingSince = null;
    view = null;
    clear();
    say(
      frame.code === 'not-configured'
        ? 'No fleet is configured on this dashboard (dashboard serve --workload-fleet-url).'
        : 'Connect (Workloads tab) with a credential granted workloads:read to read the fleet.',
      'idle',
    );
    return;
  }
  if (!session) return;
  awaitingSince = null;
  if (frame.type === 'fleet') {
    if (frame.failure) {
      view = null;
      clear();
      say(
        `The fleet could not be read: ${FAILURE_WORDS[frame.failure] ?? 'unknown failure'}. Nothing is shown; this is not an empty fleet.`,
        'unavailable',
      );
      return;
    }
    view = { seq: frame.seq, result: frame.result };
  } else {
    if (view === null || view.seq !== frame.base) return resync();
    let next;
    try {
      next = applyFleetDelta(view.result, frame.delta);
    } catch {
      return resync();
    }
    if (fleetDigest(next) !== frame.digest) return resync();
    view = { seq: frame.seq, result: next };
  }
  markView();
  render(frame.read_at);
}

export function onBadFrame() {
  view = null;
  clear();
  say(
    'The dashboard server sent a fleet answer this page cannot read: nothing is shown. This is not an empty fleet.',
    'unavailable',
  );
}

export function onSession(connected) {
  session = connected;
  view = null;
  awaitingSince = null;
  clear();
  if (connected) {
    say('Reading the fleet…', 'pending');
    read();
  } else say('Connect (Workloads tab) with a credential granted workloads:read to read the fleet.', 'idle');
}

export function onLinkLost() {
  session = false;
  awaitingSince = null;
  if (view !== null) {
    view = null;
    clear();
    say('The dashboard server is unreachable: nothing can be read now. This is not an empty fleet.', 'unavailable');
  }
}

export function onVisibilityChange() {
  read();
}

export function init() {
  const tick = () => {
    read();
    setTimeout(tick, pollInterval());
  };
  setTimeout(tick, pollInterval());
  setInterval(() => {
    if (awaitingSince !== null && Date.now() - awaitingSince > OVERDUE_MS && view !== null) {
      view = null;
      clear();
      say(
        `No answer from the dashboard server since ${new Date(awaitingSince).toLocaleTimeString()}: nothing shown is current. This is not an empty fleet.`,
        'unavailable',
      );
    }
  }, 1000);
}
