// The page's one WebSocket and the state the panels read (tab, poll interval): in its own
// module so that telemetry.js and workloads.js need not import app.js, which imports them.
let socket = null;
let activeTab = 'telemetry';
let pollMs = 2000;

/** Sends one message if the socket is open; false otherwise (the caller shows that). */
export function send(message) {
  if (!socket || socket.readyState !== WebSocket.OPEN) return false;
  socket.send(JSON.stringify(message));
  return true;
}

/** True while the Workloads tab is selected and the document is visible (polling gate). */
export function workloadsVisible() {
  return activeTab === 'workloads' && document.visibilityState === 'visible';
}

/** True while the Requests tab is selected and the document is visible. */
export function requestsVisible() {
  return activeTab === 'requests' && document.visibilityState === 'visible';
}

/** True while the Fleet tab is selected and the document is visible. */
export function fleetVisible() {
  return activeTab === 'fleet' && document.visibilityState === 'visible';
}

export function pollInterval() {
  return pollMs;
}

export function currentSocket() {
  return socket;
}

export function setSocket(ws) {
  socket = ws;
}

export function setActiveTab(name) {
  activeTab = name;
}

export function setPollInterval(ms) {
  pollMs = ms;
}
