// Live output of a preview pipeline (a bare SELECT): its rows over SSE, the last ROWS of them,
// with the change kind (+I, -U, +U, -D) of an updating query; pause freezes the table while the
// rows go on arriving.

import * as api from './api.js';
import { h, replace } from './dom.js';

const ROWS = 200;

export function mountOutput(container, pipelineId) {
  const controller = new AbortController();
  let columns = [];
  let updating = false;
  let rows = [];
  let received = 0;
  let skipped = 0;
  let paused = false;
  let sinceResume = 0;
  let ended = null;
  const state = h('p', { class: 'muted', id: 'output-state', role: 'status' }, 'Connecting…');
  const pause = h('button', { type: 'button', id: 'output-pause', 'aria-pressed': 'false', onclick: () => {
    paused = !paused;
    pause.textContent = paused ? 'Resume' : 'Pause';
    pause.setAttribute('aria-pressed', String(paused));
    sinceResume = 0;
    render();
  } }, 'Pause');
  const body = h('div', { class: 'scroll output-table' });
  replace(container, h('div', { class: 'toolbar' }, pause, state), body);

  function render() {
    const status = ended ? `ended (${ended}); ` : '';
    state.textContent = `${status}${received.toLocaleString('en-US')} rows received${skipped ? `, ${skipped} dropped before they were read` : ''}`
      + `${paused ? `; paused, ${sinceResume} new since` : ''}. Showing the last ${Math.min(rows.length, ROWS)}.`;
    if (paused) return;
    const names = updating ? ['op', ...columns.map((c) => c.name)] : columns.map((c) => c.name);
    const shown = rows.slice(-ROWS).reverse();
    replace(body, h('table', { class: 'output', 'aria-label': 'Live output, newest first' },
      h('thead', {}, h('tr', {}, names.map((n) => h('th', { scope: 'col' }, n)))),
      h('tbody', {}, shown.map((row) => h('tr', { class: updating && row._change?.startsWith('-') ? 'retraction' : '' },
        updating ? h('td', { class: 'op' }, row._change || '') : null,
        columns.map((c) => h('td', {}, cell(row[c.name]))))))));
  }

  let scheduled = false;
  const soon = () => {
    if (scheduled) return;
    scheduled = true;
    setTimeout(() => {
      scheduled = false;
      render();
    }, 150);
  };

  api.events(`/pipelines/${pipelineId}/output`, controller.signal, (name, data) => {
    if (name === 'schema') {
      const schema = JSON.parse(data);
      columns = schema.columns;
      updating = schema.updating;
    } else if (name === 'skipped') {
      skipped += Number(data);
    } else if (name === 'end') {
      ended = JSON.parse(data).status;
    } else {
      rows.push(JSON.parse(data));
      if (rows.length > ROWS * 2) rows = rows.slice(-ROWS);
      received += 1;
      if (paused) sinceResume += 1;
    }
    soon();
  }).catch((error) => {
    if (error.name !== 'AbortError') state.textContent = `Output: ${error.message}`;
  });
  return () => controller.abort();
}

function cell(value) {
  if (value === null || value === undefined) return 'NULL';
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}
