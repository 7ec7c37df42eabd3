// The landing view: every pipeline with its status, uptime, rates, last checkpoint, restarts
// and last error, and the lifecycle buttons. Refreshed every second.

import * as api from './api.js';
import { actionButtons } from './actions.js';
import { h, replace, table } from './dom.js';
import * as format from './format.js';

const REFRESH_MS = 1000;

export function statusBadge(status) {
  return h('span', { class: `status status-${status}` }, status);
}

export function mountList(main) {
  const body = h('div', { class: 'list-body', 'aria-live': 'off' }, h('p', { class: 'muted' }, 'Loading pipelines…'));
  replace(main,
    h('div', { class: 'heading' },
      h('h1', {}, 'Pipelines'),
      h('a', { class: 'button primary', href: '#/editor' }, 'New pipeline')),
    body);
  let timer = null;
  let stopped = false;
  let latest = 0;

  // One refresh loop however often an action asks for a refresh: only the latest call goes on.
  async function refresh() {
    clearTimeout(timer);
    const mine = ++latest;
    try {
      const pipelines = await api.get('/pipelines');
      if (stopped || mine !== latest) return;
      document.getElementById('server-state').textContent = '';
      replace(body, pipelines.length === 0 ? empty() : pipelineTable(pipelines, refresh));
    } catch (error) {
      if (stopped || mine !== latest) return;
      document.getElementById('server-state').textContent = `server: ${error.message}`;
    }
    if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
  }

  refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

function empty() {
  return h('p', { class: 'empty' }, 'No pipelines yet. ', h('a', { href: '#/editor' }, 'Run a query in the SQL editor'),
    ' to start one.');
}

function pipelineTable(pipelines, refresh) {
  const columns = [
    ['ID', 'num'], ['Name'], ['Status'], ['Uptime', 'num'], ['Rows/s in', 'num'], ['Rows/s out', 'num'],
    ['Last checkpoint'], ['Restarts', 'num'], ['Last error', 'error-cell'], ['Actions'],
  ];
  const rows = [...pipelines].reverse().map((p) => h('tr', { 'data-pipeline': p.id },
    h('td', { class: 'num' }, h('a', { href: `#/pipelines/${p.id}` }, String(p.id))),
    h('td', {}, h('a', { href: `#/pipelines/${p.id}` }, p.name), p.preview ? h('span', { class: 'tag' }, 'preview') : null),
    h('td', {}, statusBadge(p.status)),
    h('td', { class: 'num' }, format.duration(p.uptime_ms)),
    h('td', { class: 'num' }, format.rate(p.records_in_per_second)),
    h('td', { class: 'num' }, format.rate(p.records_out_per_second)),
    h('td', {}, p.last_checkpoint ? `#${p.last_checkpoint}, ${format.ago(p.last_checkpoint_at_ms)}` : ''),
    h('td', { class: 'num' }, p.restarts ?? ''),
    h('td', { class: 'error-cell', title: p.last_error || '' }, p.last_error || ''),
    h('td', {}, actionButtons(p.id, p.status, refresh, 'list')),
  ));
  return h('div', { class: 'scroll' }, table(columns, rows, { class: 'pipelines', 'aria-label': 'Pipelines' }));
}
