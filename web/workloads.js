// The Workloads tab: Connect / Disconnect, the seven filters, polling and generations.
//
// Generations: every Connect, filter change and Disconnect moves `gen` forward and tells the
// server; the server aborts the older read and both sides drop frames of an older
// generation, so a late answer for old filters (or for a credential already forgotten) can
// never be drawn. The credential is kept only in `credential` below, for polls and for
// re-connecting after the dashboard server restarts; Disconnect sets it to null.
import { pollInterval, send, workloadsVisible } from './link.js';
import { clearInventory, forgetLastKnown, renderNode, showLastKnown, showMessage, tickAges } from './render.js';
// The server's own compiled module (decision 0075): the same code diffs and applies.
import { applyNodeDelta, viewDigest } from '/shared/view-delta.js';

const $ = (id) => document.getElementById(id);
const OWNERS = ['router', 'controller', 'benchmark', 'media', 'recipe', 'manifest'];
const KINDS = ['router-request', 'controller-operation', 'benchmark-job', 'media-job', 'recipe-serve'];
const STATES = [
  'checking',
  'admitted',
  'dispatched',
  'streaming',
  'queued',
  'running',
  'terminal',
  'configured',
  'absent',
  'unavailable',
  'unsupported',
];
const HOST_RE = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;
const INT_RE = /^(?:0|[1-9][0-9]{0,8})$/;

let credential = null;
/** What a credential is (docs/api.md): 1-4096 printable ASCII characters without spaces. */
const CREDENTIAL_RE = /^[\x21-\x7e]{1,4096}$/;
let gen = 0;
let connected = false;
/**
 * The view the page holds for the current generation: the last whole read, with every delta
 * since applied (`seq`: the number of the frame it stands for). A delta for another base, or
 * one whose result does not match the digest of the server's fresh read, is not drawn: the
 * next read asks for the whole view (`needFull`).
 */
let view = null;
let needFull = false;
/** The pill's text while the controller accepts the credential. */
let signedIn = null;

function setSession(text, kind) {
  const el = $('session-status');
  // The same words again are not news (a live region would announce them on every poll).
  if (el.textContent !== text) el.textContent = text;
  el.className = `pill pill-${kind}`;
  $('disconnect').disabled = credential === null;
}

/**
 * When the first read of the current generation still unanswered was sent (null: none
 * waits). The dashboard server answers each generation's read within its whole-read deadline
 * (10 s), with the records or a failure; a read of an older generation is aborted and never
 * answered, and a poll while one runs is dropped, so only the current generation's clock
 * counts. Silent for longer than OVERDUE_MS: the server is hung, and nothing shown is current.
 */
let awaitingSince = null;
let awaitingGen = null;
let overdue = false;
const OVERDUE_MS = 20_000;

function sendRead(message) {
  if (!send(message)) return false;
  if (awaitingSince === null || awaitingGen !== message.gen) {
    awaitingSince = Date.now();
    awaitingGen = message.gen;
  }
  return true;
}

function checkOverdue() {
  if (awaitingSince === null || overdue || credential === null) return;
  if (Date.now() - awaitingSince <= OVERDUE_MS) return;
  overdue = true;
  clearInventory();
  showMessage(
    `No answer from the dashboard server since ${new Date(awaitingSince).toLocaleTimeString()}: nothing shown is current. This is not an empty inventory.`,
    'unavailable',
  );
  showLastKnown();
  setSession('waiting for the dashboard server…', 'pending');
}

/** A workloads frame this page cannot read: nothing is left on screen as current. */
export function onBadFrame() {
  clearInventory();
  showMessage(
    'The dashboard server sent an answer this page cannot read: nothing is shown. This is not an empty inventory.',
    'unavailable',
  );
}

/** The present filters only, as the shared `arguments` object; null when one is invalid. */
/** What the last readFilters() found wrong, in words (null: nothing). */
let invalidWhy = null;

/** Marks one filter input valid or not (aria-invalid), remembering why for the message. */
function check(id, ok, why) {
  $(id).setAttribute('aria-invalid', String(!ok));
  if (!ok && invalidWhy === null) invalidWhy = why;
  return ok;
}

function readFilters() {
  const f = {};
  invalidWhy = null;
  for (const name of ['owner', 'kind', 'state']) {
    const v = $(`f-${name}`).value;
    if (v !== '') f[name] = v;
  }
  const host = $('f-host').value.trim();
  if (
    check('f-host', host === '' || HOST_RE.test(host), 'host: a letter, then up to 63 letters, digits, _ or -') &&
    host !== ''
  )
    f.host = host;
  if ($('f-active-only').checked) f.active_only = true;
  for (const [id, key, max, label] of [
    ['f-recent-seconds', 'recent_seconds', 86400, 'recent seconds'],
    ['f-limit', 'limit', 1000, 'limit'],
  ]) {
    const input = $(id);
    const v = input.value.trim();
    // A number input holding text it cannot parse (`5e`, `-`) reports its value as '': that is
    // not "no filter", it is a filter that cannot be read.
    const unreadable = input.validity?.badInput === true;
    if (
      check(
        id,
        !unreadable && (v === '' || (INT_RE.test(v) && Number(v) >= 1 && Number(v) <= max)),
        `${label}: a whole number from 1 to ${max}`,
      ) &&
      v !== ''
    )
      f[key] = Number(v);
  }
  return invalidWhy === null ? f : null;
}

function connect(ev) {
  ev.preventDefault();
  const input = $('credential');
  const value = input.value.trim();
  // The input is emptied at once: the value lives only in the module variable from here on.
  input.value = '';
  if (value === '') return setSession('type a credential first', 'idle');
  // Never sent when no server could take it (its message would be over the socket's bound,
  // and the page would reconnect in a loop saying the server is unreachable).
  if (!CREDENTIAL_RE.test(value))
    return setSession('not a credential: 1-4096 printable ASCII characters without spaces', 'idle');
  credential = value;
  gen += 1;
  clearInventory();
  forgetLastKnown();
  startConnect();
}

function startConnect() {
  const filters = readFilters();
  if (filters === null) {
    // Never a read with other filters than those shown: the connection waits for valid ones.
    showInvalidFilter('a filter value is invalid: not read');
    return setSession('waiting for valid filters to connect', 'pending');
  }
  if (!sendRead({ type: 'connect', gen, credential, filters })) {
    return setSession('waiting for the dashboard server…', 'pending');
  }
  setSession('connecting…', 'pending');
}

function disconnect() {
  gen += 1;
  send({ type: 'disconnect', gen });
  forget();
  clearInventory();
  showMessage('Disconnected. The credential was forgotten; connect again to read.', 'idle');
  setSession('not connected', 'idle');
  // The focused Disconnect button is now disabled: focus goes where the next step is.
  $('connect').focus();
}

/** Drops the credential from memory and from the input. */
function forget() {
  credential = null;
  awaitingSince = null;
  overdue = false;
  refusedAt = null;
  connected = false;
  signedIn = null;
  view = null;
  markView();
  forgetLastKnown();
  $('credential').value = '';
}

/**
 * Records read with other filters are not left on screen under filters that cannot be read:
 * a new generation (late answers for the old filters are dropped), nothing drawn, and why.
 */
function showInvalidFilter(why) {
  gen += 1;
  // Which field, and what it takes, when the page found it (the server's refusal names none).
  if (invalidWhy !== null) why = `${why} (${invalidWhy})`;
  $('filter-status').textContent = why;
  clearInventory();
  forgetLastKnown();
  showMessage(`Nothing is shown: ${why}. Fix the filter to read again.`, 'unavailable');
}

/** Pending read after typing in a filter (reads start when typing pauses, or on change). */
let typing = null;
const TYPING_PAUSE_MS = 500;
// After the controller refused the credential, polls slow down to one per REFUSED_POLL_MS
// (a 401 every two seconds helps nobody); one it accepts restores the normal pace, and
// Connect or a filter change reads at once.
const REFUSED_POLL_MS = 10_000;
let refusedAt = null;

/**
 * Typing in a filter: what is drawn is no longer the answer for the filters shown, so it goes
 * at once, a read in flight is dropped (new generation), polls wait, and the new filters are
 * read when typing pauses.
 */
function filtersTyped() {
  clearTimeout(typing);
  typing = setTimeout(filtersChanged, TYPING_PAUSE_MS);
  if (credential === null) return;
  gen += 1;
  clearInventory();
  forgetLastKnown();
  showMessage('Filters changed: reading when you stop typing…', 'pending');
}

/** Any filter change starts a new generation: a new bounded read with the new filters. */
function filtersChanged() {
  clearTimeout(typing);
  typing = null;
  const filters = readFilters();
  $('filter-status').textContent = '';
  if (filters === null) {
    if (credential !== null) showInvalidFilter('a filter value is invalid: not read');
    else $('filter-status').textContent = 'a filter value is invalid: not read';
    return;
  }
  if (credential === null) return;
  gen += 1;
  clearInventory();
  forgetLastKnown();
  if (!connected) return startConnect();
  showMessage('Reading with the new filters…', 'pending');
  sendRead({ type: 'read', gen, filters });
}

function poll() {
  if (credential === null || !connected || !workloadsVisible() || typing !== null) return;
  if (refusedAt !== null && Date.now() - refusedAt < REFUSED_POLL_MS) return;
  const filters = readFilters();
  if (filters !== null) readNow(filters);
}

function readNow(filters) {
  if (sendRead({ type: 'read', gen, filters, ...(needFull ? { full: true } : {}) })) needFull = false;
}

/** Marks the view as lost and asks for the whole one at once (no poll wait). */
function resync() {
  view = null;
  needFull = true;
  const filters = readFilters();
  if (filters !== null && credential !== null && connected) readNow(filters);
}

/** The page's view as a test or a reader can check it against the server's fresh read. */
function markView() {
  const panel = $('panel-workloads');
  if (view === null) {
    delete panel.dataset.viewSeq;
    delete panel.dataset.viewDigest;
  } else {
    panel.dataset.viewSeq = String(view.seq);
    panel.dataset.viewDigest = viewDigest(view.result);
  }
}

function applyDelta(frame) {
  if (view === null || view.gen !== gen || view.seq !== frame.base) return resync();
  let next;
  try {
    next = applyNodeDelta(view.result, frame.delta);
  } catch {
    return resync();
  }
  if (viewDigest(next) !== frame.digest) return resync();
  view = { gen, seq: frame.seq, result: next };
  markView();
  renderNode({ result: next, read_at: frame.read_at }, readFilters() ?? {});
  refusedAt = null;
  if (signedIn !== null) setSession(signedIn, 'ok');
}

export function onFrame(frame) {
  // An answer to the read awaited (or a denial without a generation) ends the wait.
  if (
    (frame.type === 'workloads' || frame.type === 'workloads-delta' || frame.type === 'workloads-denied') &&
    (typeof frame.gen !== 'number' || frame.gen === awaitingGen)
  ) {
    awaitingSince = null;
    overdue = false;
  }
  // Frames without a generation are the fixed denial of a disabled service.
  if (typeof frame.gen === 'number' && frame.gen !== gen) return;
  switch (frame.type) {
    case 'connected':
      connected = true;
      // The local policy took the credential; "connected" waits for the controller's answer.
      signedIn = `connected as ${frame.client} · node ${frame.expected_node}`;
      setSession(
        `signed in as ${frame.client} · waiting for the controller of node ${frame.expected_node}…`,
        'pending',
      );
      break;
    case 'workloads-delta':
      if (credential === null) break;
      applyDelta(frame);
      break;
    case 'workloads':
      if (credential === null) break;
      view = frame.failure ? null : { gen, seq: frame.seq, result: frame.result };
      markView();
      renderNode(frame, readFilters() ?? {});
      // The local policy took the credential, but the controller is the one that decides: a
      // refusal there is not "connected". A later read it accepts restores the pill.
      if (frame.failure === 'controller-unauthenticated' || frame.failure === 'controller-forbidden') {
        refusedAt = Date.now();
        setSession(
          `the controller refused the credential (HTTP ${frame.failure === 'controller-forbidden' ? 403 : 401})`,
          'bad',
        );
      } else if (frame.failure) {
        // Not read at all (unreachable, wrong identity, not a controller…): not "connected".
        refusedAt = null;
        setSession('the controller could not be read: not connected to it', 'bad');
      } else {
        refusedAt = null;
        if (signedIn !== null) setSession(signedIn, 'ok');
      }
      break;
    case 'workloads-denied':
      if (frame.code === 'invalid-filter') {
        showInvalidFilter('the server refused a filter value: not read');
        break;
      }
      forget();
      clearInventory();
      if (frame.code === 'disabled') {
        showMessage(
          'Workload reads are disabled on this dashboard (fixed denial, HTTP 503). Telemetry keeps working.',
          'unavailable',
        );
        setSession('workload reads disabled', 'bad');
      } else {
        showMessage(`Not read: ${frame.title} (HTTP ${frame.status}). The credential was forgotten.`, 'unavailable');
        setSession('credential refused', 'bad');
      }
      break;
    default:
      break;
  }
}

export function onHello() {
  // A new socket (first open, or after the server restarted): sign in again if we still can.
  if (credential !== null) {
    gen += 1;
    startConnect();
  }
}

export function onLinkLost() {
  connected = false;
  signedIn = null;
  // The link's own message says why nothing is read; no read waits on a closed socket.
  awaitingSince = null;
  overdue = false;
  if (credential !== null) {
    clearInventory();
    showMessage(
      'The dashboard server is unreachable: nothing can be read now. This is not an empty inventory.',
      'unavailable',
    );
    showLastKnown();
    setSession('waiting for the dashboard server…', 'pending');
  }
}

export function onVisibilityChange() {
  if (workloadsVisible()) poll();
}

export function init() {
  const fill = (id, values) => {
    for (const v of values) {
      const o = document.createElement('option');
      o.value = v;
      o.textContent = v;
      $(id).append(o);
    }
  };
  fill('f-owner', OWNERS);
  fill('f-kind', KINDS);
  fill('f-state', STATES);
  $('connect-form').addEventListener('submit', connect);
  $('disconnect').addEventListener('click', disconnect);
  $('filters').addEventListener('submit', (ev) => ev.preventDefault());
  $('filters').addEventListener('change', filtersChanged);
  $('filters').addEventListener('input', filtersTyped);
  const tick = () => {
    poll();
    setTimeout(tick, pollInterval());
  };
  setTimeout(tick, pollInterval());
  setInterval(() => {
    tickAges();
    checkOverdue();
  }, 1000);
}
