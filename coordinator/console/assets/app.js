// rowlift console: polls the coordinator's console API and renders the list of
// workflows or one workflow. The token lives in sessionStorage and goes in an
// Authorization header: no cookie, so no other site can make this browser act,
// and the token is gone when the tab closes.
'use strict';

const POLL_MS = 2000;
const TOKEN_KEY = 'rowlift-token';
const ACTIONS = [
  ['start', 'Start'], ['stop', 'Stop'], ['resume', 'Resume'], ['verify', 'Verify'],
  ['cancel-verify', 'Cancel verify'], ['switch', 'Switch'], ['reverse', 'Reverse'],
];

let timer = null;
let updates = 0;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else if (k.startsWith('on')) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === '') continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// num reads a protojson number: int64 fields arrive as strings.
const num = (v) => Number(v || 0);
const count = (n) => num(n).toLocaleString('en-US');
const words = (s, prefix) => (s || '').replace(prefix, '').toLowerCase().replaceAll('_', ' ');
const when = (us) => (num(us) ? new Date(num(us) / 1000).toLocaleTimeString() : '');
const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];

// bytes mirrors statustext.Bytes: 87136870 as "83.1 MiB".
function bytes(n) {
  let v = num(n), u = 0;
  if (v < 1024) return Math.round(v) + ' B';
  while (v >= 1023.95 && u < UNITS.length - 1) { v /= 1024; u++; }
  return (Math.round(v * 10) / 10).toFixed(1) + ' ' + UNITS[u];
}

function phase(st) {
  return st.phase ? words(st.phase, 'WORKFLOW_PHASE_') : words(st.state, 'WORKFLOW_STATE_');
}

function duration(seconds) {
  if (seconds === undefined || seconds < 0) return '?';
  const s = Math.round(seconds);
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
  return Math.floor(s / 3600) + 'h' + String(Math.floor(s % 3600 / 60)).padStart(2, '0') + 'm';
}

// eta is the status's ETA, empty when none is known (negative: not started,
// stopped, failed, no rate yet) or due (zero, or absent from the JSON, once running).
const eta = (st) => (num(st.etaSeconds) > 0 ? duration(num(st.etaSeconds)) : '');

function bar(percent) {
  const p = percent === undefined ? 0 : Math.max(0, Math.min(100, percent));
  const fill = el('span');
  fill.style.width = p + '%'; // through CSSOM: the CSP forbids style attributes
  return el('span', { class: 'bar', title: p.toFixed(1) + '%' }, fill);
}

// api calls the console API with the token; it throws {status, error} on a
// refusal and {status: 0} when the coordinator cannot be reached.
async function api(method, path) {
  const headers = { 'X-Rowlift-Console': '1' };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = 'Bearer ' + token;
  let resp;
  try {
    resp = await fetch(path, { method, headers, cache: 'no-store' });
  } catch (e) {
    throw { status: 0, error: 'the coordinator cannot be reached: ' + e.message };
  }
  let body;
  try { body = await resp.json(); } catch (e) { body = { error: resp.status + ' ' + resp.statusText }; }
  if (!resp.ok) throw { status: resp.status, error: body.error || JSON.stringify(body) };
  return body;
}

function setConn(text, down) {
  const c = document.getElementById('conn');
  c.textContent = text;
  c.classList.toggle('down', !!down);
}

function showLogin(show) {
  document.getElementById('login').hidden = !show;
  document.getElementById('signout').hidden = show || !sessionStorage.getItem(TOKEN_KEY);
}

function route() {
  const m = location.hash.match(/^#\/workflow\/(.+)$/);
  return m ? { page: 'workflow', name: decodeURIComponent(m[1]) } : { page: 'list' };
}

async function refresh() {
  clearTimeout(timer);
  const r = route();
  try {
    const body = r.page === 'workflow' ? await api('GET', '/api/workflows/' + encodeURIComponent(r.name)) : await api('GET', '/api/workflows');
    if (JSON.stringify(route()) === JSON.stringify(r)) {
      if (r.page === 'workflow') renderWorkflow(body.workflow, body.history, body.verify_line, body.cutover_steps); else renderList(body.list);
    }
    updates++;
    document.body.dataset.updates = updates;
    setConn('updated ' + new Date().toLocaleTimeString(), false);
    showLogin(false);
  } catch (e) {
    if (e.status === 401) {
      showLogin(true);
      setConn('sign in: ' + e.error, true);
    } else {
      setConn(e.status === 0 ? e.error + ' (retrying)' : e.error, true);
    }
  }
  timer = setTimeout(refresh, POLL_MS);
}

function renderList(list) {
  const rows = (list.workflows || []).map((w) => {
    const st = w.status || {};
    const name = w.spec.name;
    return el('tr', { 'data-workflow': name },
      el('td', {}, el('a', { href: '#/workflow/' + encodeURIComponent(name) }, name)),
      el('td', {}, (w.spec.targets || []).map((t) => t.name).join(', ')),
      el('td', { class: 'phase' }, phase(st)),
      el('td', {}, bar(st.percent), ' ', el('span', { class: 'num percent' }, (st.percent || 0).toFixed(1) + '%')),
      el('td', { class: 'num' }, count(st.rowsCopied) + ' / ' + count(st.rowsEstimate)),
      el('td', { class: 'num bytes' }, bytes(st.bytesCopied) + ' / ' + bytes(st.bytesEstimate)),
      el('td', { class: 'num lag' }, duration(num(st.lagMs) / 1000)),
      el('td', { class: 'num' }, eta(st)),
      el('td', { class: 'msg' }, st.lastError || st.message || st.waiting || ''));
  });
  const errors = (list.targetErrors || []).map((te) => el('li', { class: 'err' },
    'target ' + te.target + ': ' + te.message + (te.workflows ? ' (hides ' + te.workflows.join(', ') + ')' : '')));
  document.getElementById('app').replaceChildren(
    el('h1', {}, 'Workflows'),
    rows.length ? el('table', { id: 'workflows' },
      el('tr', {}, ['Workflow', 'Targets', 'Phase', 'Progress', 'Rows', 'Bytes', 'Lag', 'ETA', 'Message'].map((h) => el('th', {}, h))), rows)
      : el('p', { id: 'workflows' }, 'no workflows'),
    errors.length ? el('ul', {}, errors) : '');
}

// plain is a chart's scale value, short enough for the space left of the
// axis: 267365 as "267k", 1.5e6 as "1.5M".
function plain(v) {
  if (v >= 1e6) return Number((v / 1e6).toPrecision(3)) + 'M';
  if (v >= 1e4) return Math.round(v / 1e3) + 'k';
  return v >= 100 ? Math.round(v).toLocaleString('en-US') : String(Number(v.toPrecision(2)));
}

// chart draws values over time as an SVG line, from the first sample (at most
// an hour ago) to now; its scale reads fmt(top) + unit.
function chart(id, title, samples, value, unit, fmt = plain) {
  const W = 440, H = 140, L = 64, B = 18;
  const s = svg('svg', { width: W, height: H, class: id, viewBox: `0 0 ${W} ${H}` });
  const now = Date.now();
  const t0 = samples.length ? Math.min(num(samples[0].at_ms), now - 60000) : now - 60000;
  const top = Math.max(0, ...samples.map(value));
  const vmax = top > 0 ? top * 1.1 : 1;
  const x = (t) => L + (W - L - 4) * (t - t0) / Math.max(1, now - t0);
  const y = (v) => H - B - (H - B - 6) * v / vmax;
  s.append(svg('line', { x1: L, y1: H - B, x2: W - 4, y2: H - B }), svg('line', { x1: L, y1: 6, x2: L, y2: H - B }));
  const label = (x0, y0, text, anchor) => { const t = svg('text', { x: x0, y: y0, 'text-anchor': anchor || 'start' }); t.textContent = text; s.append(t); };
  label(L - 4, 12, fmt(top) + unit, 'end');
  label(L - 4, H - B, '0', 'end');
  label(L, H - 4, duration((now - t0) / 1000) + ' ago');
  label(W - 4, H - 4, 'now', 'end');
  s.append(svg('polyline', { points: samples.map((p) => x(num(p.at_ms)).toFixed(1) + ',' + y(value(p)).toFixed(1)).join(' ') }));
  return el('div', { class: 'chart' }, el('div', {}, title), s);
}

function position(p) {
  if (!p) return '';
  return [p.gtidSet, p.binlogFile ? p.binlogFile + ':' + (p.binlogOffset || 0) : ''].filter(Boolean).join(' ');
}

function renderWorkflow(w, hist, verifyLine, stepLines) {
  const st = w.status || {};
  const tables = (st.tables || []).map((t) => el('tr', { 'data-table': t.name },
    el('td', {}, t.name),
    el('td', {}, bar(t.done ? 100 : t.percent), ' ', el('span', { class: 'num' }, t.done ? 'done' : (t.percent === undefined ? '?' : t.percent.toFixed(1) + '%'))),
    el('td', { class: 'num' }, el('span', { class: 'rows' }, count(t.rowsCopied) + ' / ' + count(t.done ? t.rowsCopied : t.rowsEstimate) + ' rows'),
      ' · ', el('span', { class: 'bytes' }, bytes(t.bytesCopied) + ' / ' + bytes(t.bytesEstimate))),
    el('td', { class: 'num' }, Math.round(t.rowsPerSecond || 0).toLocaleString('en-US') + ' rows/s'),
    el('td', {}, (t.keysPending || []).join(', '))));
  const streams = (st.streams || []).map((s) => el('tr', {},
    el('td', {}, s.source + ' → ' + s.target + (s.keyRange ? ' [' + s.keyRange + ']' : '')),
    el('td', { class: 'msg' }, position(s.position)),
    el('td', { class: 'num' }, duration(num(s.lagMs) / 1000)),
    el('td', {}, s.sourceServer || ''),
    el('td', { class: 'msg' },
      s.retrying ? el('div', { class: 'err retrying' }, 'retrying since ' + when(s.retryingSinceUs) + ': ' + s.retrying) : '',
      s.lost ? el('div', { class: 'err' }, 'lost: ' + s.lost) : '',
      s.repairing ? el('div', {}, 'repairing: ' + s.repairing) : '',
      s.throttled ? el('div', {}, 'throttled: ' + s.throttled) : '',
      s.waiting ? el('div', {}, 'waiting: ' + s.waiting) : '')));
  const v = st.verify;
  const verify = v ? el('div', {},
    el('p', { id: 'verify-line' }, verifyLine),
    el('table', { id: 'verify' }, el('tr', {}, ['Table', 'Compared', 'Missing', 'Extra', 'Different', 'Result'].map((h) => el('th', {}, h))),
      (v.tables || []).map((t) => el('tr', {}, el('td', {}, t.name), el('td', { class: 'num' }, count(t.rowsCompared)),
        el('td', { class: 'num' }, num(t.missing)), el('td', { class: 'num' }, num(t.extra)), el('td', { class: 'num' }, num(t.different)),
        el('td', { class: 'msg' }, (t.done ? (num(t.missing) + num(t.extra) + num(t.different) ? 'differs' : 'identical') : 'comparing') +
          (t.message ? ': ' + t.message : '') + (t.examples ? '\n' + t.examples.join('\n') : ''))))))
    : el('p', {}, 'never verified');
  // The cutover's journal as a timeline, a step per line in the CLI's words
  // (stepLines); a journal of an older coordinator has no steps: its start and
  // its last step stand in for them.
  const c = st.cutover;
  const cutover = c ? el('div', {},
    el('p', { id: 'cutover-line' }, el('b', {}, c.direction + ' ' + words(c.step, '')), c.message ? ': ' + c.message : '',
      num(c.writePauseMs) >= 0 && c.writePauseMs !== undefined ? ' · write pause ' + num(c.writePauseMs) + ' ms' : '',
      c.freezePositions ? ' · freeze position ' + c.freezePositions.join(', ') : '',
      c.reverseWorkflow ? ' · reverse workflow ' + c.reverseWorkflow : ''),
    el('ul', { class: 'timeline', id: 'cutover' }, (c.steps || []).length
      ? c.steps.map((s, i) => el('li', { 'data-step': s.step }, el('time', {}, when(s.atUs)), stepLines[i]))
      : [el('li', {}, el('time', {}, when(c.startedAtUs)), c.direction + ' started'),
        el('li', {}, el('time', {}, when(c.finishedAtUs)), 'at step ' + words(c.step, ''))]))
    : el('p', {}, 'no cutover yet');
  const samples = hist.samples || [];
  document.getElementById('data').replaceChildren(
    el('p', { id: 'phase' }, el('b', {}, phase(st)), st.message ? ' (' + st.message + ')' : '',
      ' · lag ' + duration(num(st.lagMs) / 1000), eta(st) ? ' · ETA ' + eta(st) : '',
      ' · ' + count(st.rowsCopied) + ' / ' + count(num(st.percent) >= 100 ? st.rowsCopied : st.rowsEstimate) + ' rows · ' + bytes(st.bytesCopied) + ' / ' + bytes(st.bytesEstimate)),
    st.lastError ? el('p', { class: 'err' }, 'last error (' + when(st.lastErrorAtUs) + '): ' + st.lastError) : '',
    st.waiting ? el('p', {}, 'waiting: ' + st.waiting) : '',
    st.throttled ? el('p', {}, 'throttled: ' + st.throttled) : '',
    (w.warnings || []).map((x) => el('p', { class: 'err' }, 'warning: ' + x)),
    el('h2', {}, 'Tables'),
    el('table', { id: 'tables' }, el('tr', {}, ['Table', 'Progress', 'Copied', 'Rate', 'Keys pending'].map((h) => el('th', {}, h))), tables),
    el('h2', {}, 'Over the last hour'),
    el('div', { class: 'charts' },
      chart('chart-lag', 'Lag', samples, (p) => num(p.lag_ms) / 1000, 's'),
      chart('chart-rate', 'Copy throughput in rows', samples, (p) => num(p.rows_per_second), ' rows/s'),
      chart('chart-bytes', 'Copy throughput in bytes', samples, (p) => num(p.bytes_per_second), '/s', bytes),
      chart('chart-replay', 'Replay throughput in source transactions', samples, (p) => num(p.transactions_per_second), ' tx/s')),
    el('h2', {}, 'Streams'),
    el('table', { id: 'streams' }, el('tr', {}, ['Stream', 'Position', 'Lag', 'Source server', 'State'].map((h) => el('th', {}, h))), streams),
    el('h2', {}, 'Last verify'), verify,
    el('h2', {}, 'Cutover'), cutover);
}

async function act(name, action, label) {
  if (!confirm(label + ' workflow ' + name + '?')) return;
  const out = document.getElementById('result');
  out.className = '';
  out.textContent = label + '…';
  try {
    const body = await api('POST', '/api/workflows/' + encodeURIComponent(name) + '/' + action);
    out.className = 'ok';
    out.textContent = body.message;
  } catch (e) {
    out.className = 'refused';
    out.textContent = e.error;
    if (e.status === 401) showLogin(true);
  }
  refresh();
}

function renderPage() {
  const r = route();
  if (r.page === 'workflow') {
    document.getElementById('app').replaceChildren(
      el('h1', {}, 'Workflow ', r.name),
      el('div', { class: 'actions' }, ACTIONS.map(([a, label]) => el('button', { 'data-action': a, onclick: () => act(r.name, a, label) }, label))),
      el('div', { id: 'result' }),
      el('div', { id: 'data' }, el('p', {}, 'Loading…')));
  } else {
    document.getElementById('app').replaceChildren(el('p', {}, 'Loading…'));
  }
  refresh();
}

document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = document.getElementById('token');
    sessionStorage.setItem(TOKEN_KEY, t.value.trim());
    t.value = '';
    refresh();
  });
  document.getElementById('signout').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin(true);
    refresh();
  });
  window.addEventListener('hashchange', renderPage);
  renderPage();
});
