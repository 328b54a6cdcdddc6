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

function setLink(text, kind) {
  const el = $('link-status');
  el.textContent = text;
  el.className = `pill pill-${kind}`;
}

function openSocket() {
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  // The URL carries no query: nothing secret can ever be in it.
  const ws = new WebSocket(`${scheme}://${location.host}/ws`);
  link.setSocket(ws);
  ws.addEventListener('open', () => {
    retryMs = 500;
    setLink('dashboard server connected', 'ok');
  });
  ws.addEventListener('message', (ev) => {
    let frame;
    try {
      frame = JSON.parse(ev.data);
    } catch {
      return;
    }
    dispatch(frame);
  });
  ws.addEventListener('close', () => {
    if (link.currentSocket() !== ws) return;
    link.setSocket(null);
    setLink(`dashboard server unreachable — retrying in ${Math.round(retryMs / 1000)} s`, 'bad');
    telemetry.onLinkLost();
    workloads.onLinkLost();
    requests.onLinkLost();
    fleet.onLinkLost();
    setTimeout(openSocket, retryMs);
    retryMs = Math.min(retryMs * 2, 10000);
  });
}

function dispatch(frame) {
  // Only objects are frames (`null`, a number or an array from a broken server are ignored).
  if (frame === null || typeof frame !== 'object' || Array.isArray(frame)) return;
  switch (frame.type) {
    case 'hello':
      link.setPollInterval(Number.isInteger(frame.poll_ms) && frame.poll_ms >= 500 ? frame.poll_ms : 2000);
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
if (location.hash === '#workloads') selectTab('workloads');
if (location.hash === '#requests') selectTab('requests');
if (location.hash === '#fleet') selectTab('fleet');
openSocket();
