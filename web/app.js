// The dashboard page: tabs and the one WebSocket to this server. No framework: two panels,
// a handful of frames. Every value from the server is put into the page with textContent,
// never as HTML. Credentials live only in module variables (workloads.js, telemetry.js) and
// travel only inside WebSocket messages: never in URLs, cookies or web storage.
import * as link from './link.js';
import * as telemetry from './telemetry.js';
import * as fleet from './fleet.js';
import * as requests from './requests.js';
import * as workloads from './workloads.js';

const $ = (id) => document.getElementById(id);
let retryMs = 500;
/** The one reconnect waiting (null: none): never more than one, however the link was lost. */
let retryTimer = null;
/**
 * The server's heartbeat (`hello`'s beat_ms; null before it or from a server without one) and
 * when this page last heard anything on the current socket. A socket silent for BEATS_SILENT
 * heartbeats is taken as lost, even though the browser still calls it open (decision 0037).
 */
let beatMs = null;
let heardAt = 0;
const BEATS_SILENT = 4;
/** A socket not open after this long is given up and tried again. */
const CONNECT_MS = 15_000;

function setLink(text, kind) {
  const el = $('link-status');
  el.textContent = text;
  el.className = `pill pill-${kind}`;
}

function openSocket() {
  retryTimer = null;
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  // The URL carries no query: nothing secret can ever be in it.
  const ws = new WebSocket(`${scheme}://${location.host}/ws`);
  link.setSocket(ws);
  beatMs = null;
  heardAt = Date.now();
  ws.addEventListener('open', () => {
    retryMs = 500;
    heardAt = Date.now();
    setLink('dashboard server connected', 'ok');
  });
  ws.addEventListener('message', (ev) => {
    if (link.currentSocket() !== ws) return;
    heardAt = Date.now();
    let frame;
    try {
      frame = JSON.parse(ev.data);
    } catch {
      return;
    }
    dispatch(frame);
  });
  ws.addEventListener('close', () => lost(ws, ''));
}

/**
 * The link `ws` is gone (closed, or silent past the heartbeat; `why` adds to the words): the panels say so, and one
 * new socket is opened after a backoff (0.5 s doubling to 10 s). A socket already replaced is
 * ignored, so a late close of a socket given up on changes nothing.
 */
function lost(ws, why) {
  if (link.currentSocket() !== ws) return;
  link.setSocket(null);
  beatMs = null;
  setLink(`dashboard server unreachable${why} — retrying in ${Math.round(retryMs / 1000)} s`, 'bad');
  telemetry.onLinkLost();
  workloads.onLinkLost();
  requests.onLinkLost();
  fleet.onLinkLost();
  clearTimeout(retryTimer);
  retryTimer = setTimeout(openSocket, retryMs);
  retryMs = Math.min(retryMs * 2, 10000);
}

/**
 * Every second: a socket the server has said nothing on for BEATS_SILENT heartbeats, or one
 * still not open after CONNECT_MS, is given up (the browser would wait minutes for either).
 */
function checkSilence() {
  const ws = link.currentSocket();
  if (ws === null) return;
  const quiet = Date.now() - heardAt;
  const connecting = ws.readyState === WebSocket.CONNECTING;
  if (connecting ? quiet <= CONNECT_MS : beatMs === null || quiet <= BEATS_SILENT * beatMs) return;
  lost(ws, ` (nothing heard for ${Math.round(quiet / 1000)} s)`);
  // Closing a dead TCP connection can take the browser minutes: nothing waits for it.
  ws.close();
}

function dispatch(frame) {
  // Only objects are frames (`null`, a number or an array from a broken server are ignored).
  if (frame === null || typeof frame !== 'object' || Array.isArray(frame)) return;
  switch (frame.type) {
    case 'hello':
      link.setPollInterval(Number.isInteger(frame.poll_ms) && frame.poll_ms >= 500 ? frame.poll_ms : 2000);
      // Only a server that says it beats is held to it.
      beatMs = Number.isInteger(frame.beat_ms) && frame.beat_ms >= 100 ? frame.beat_ms : null;
      telemetry.onHello(frame);
      workloads.onHello();
      break;
    case 'telemetry':
    case 'telemetry-denied':
      // A frame the page cannot read (from a broken or foreign server) never leaves what was
      // on screen as current: the panel says so instead.
      try {
        telemetry.onFrame(frame);
      } catch {
        telemetry.onBadFrame();
      }
      break;
    case 'connected':
    case 'disconnected':
    case 'workloads':
    case 'workloads-delta':
    case 'workloads-denied':
      try {
        workloads.onFrame(frame);
      } catch {
        workloads.onBadFrame();
      }
      if (frame.type === 'connected') {
        requests.onSession(true);
        fleet.onSession(true);
      }
      if (frame.type === 'disconnected' || (frame.type === 'workloads-denied' && frame.code !== 'invalid-filter')) {
        requests.onSession(false);
        fleet.onSession(false);
      }
      break;
    case 'fleet':
    case 'fleet-delta':
    case 'fleet-denied':
      try {
        fleet.onFrame(frame);
      } catch {
        fleet.onBadFrame();
      }
      break;
    case 'requests':
    case 'requests-denied':
    case 'requests-diagnosis':
    case 'requests-history':
      try {
        requests.onFrame(frame);
      } catch {
        requests.onBadFrame();
      }
      break;
    // `beat`: the server is there; hearing it was the point.
    default:
      break;
  }
}

function selectTab(name) {
  link.setActiveTab(name);
  for (const tab of TABS) {
    const selected = tab === name;
    $(`tab-${tab}`).setAttribute('aria-selected', String(selected));
    // WAI-ARIA tabs: only the selected tab is in the Tab order; arrow keys move between tabs.
    $(`tab-${tab}`).tabIndex = selected ? 0 : -1;
    $(`panel-${tab}`).hidden = !selected;
  }
  workloads.onVisibilityChange();
  requests.onVisibilityChange();
  fleet.onVisibilityChange();
}

const TABS = ['telemetry', 'workloads', 'requests', 'fleet'];
for (const tab of TABS) {
  $(`tab-${tab}`).addEventListener('click', () => selectTab(tab));
  $(`tab-${tab}`).addEventListener('keydown', (ev) => {
    const i = TABS.indexOf(tab);
    const next =
      ev.key === 'ArrowRight'
        ? TABS[(i + 1) % TABS.length]
        : ev.key === 'ArrowLeft'
          ? TABS[(i + TABS.length - 1) % TABS.length]
          : ev.key === 'Home'
            ? TABS[0]
            : ev.key === 'End'
              ? TABS[TABS.length - 1]
              : undefined;
    if (next === undefined) return;
    ev.preventDefault();
    selectTab(next);
    $(`tab-${next}`).focus();
  });
}
// Page Visibility API: a hidden document stops polling; becoming visible reads at once.
document.addEventListener('visibilitychange', () => {
  workloads.onVisibilityChange();
  requests.onVisibilityChange();
  fleet.onVisibilityChange();
});

telemetry.init();
workloads.init();
requests.init();
fleet.init();
setInterval(checkSilence, 1000);
if (location.hash === '#workloads') selectTab('workloads');
if (location.hash === '#requests') selectTab('requests');
if (location.hash === '#fleet') selectTab('fleet');
openSocket();
