// One pipeline: a header (status, uptime, restarts, lifecycle buttons) and tabs — overview
// (SQL, options, the dataflow graph and a chosen operator's subtasks), checkpoints,
// exactly-once, errors and transitions, live output. Refreshed every second.

import * as api from './api.js';
import { actionButtons } from './actions.js';
import { checkpointChart, checkpointSummary, checkpointTable } from './checkpoints.js';
import { h, replace } from './dom.js';
import * as format from './format.js';
import { dataflowSvg, subtaskTable } from './graph.js';
import { statusBadge } from './list.js';
import { mountOutput } from './output.js';
import { highlight } from './sql_highlight.js';
import { timeline } from './timeline.js';
import { transactionsPanel } from './transactions.js';

const REFRESH_MS = 1000;
const TABS = [
  ['overview', 'Overview'],
  ['checkpoints', 'Checkpoints'],
  ['exactly-once', 'Exactly-once'],
  ['errors', 'Errors & transitions'],
  ['output', 'Live output'],
];

/** Its parallelism, and when fewer slots were alive the one it runs at now. */
function parallelism(view) {
  const scaled = view.placement?.scaled_to;
  if (scaled === undefined || scaled === null) return String(view.parallelism);
  return h('span', {}, `${scaled} of ${view.parallelism} `,
    h('span', { class: 'tag warn-tag', title: 'Fewer worker slots are alive than its parallelism: it runs narrower until they return' }, 'short of slots'));
}

/** The dataflow as it runs now: no operator wider than a narrowed attempt's parallelism. */
function runningDataflow(view) {
  const scaled = view.placement?.scaled_to;
  if (scaled === undefined || scaled === null) return view.dataflow;
  return { ...view.dataflow, nodes: view.dataflow.nodes.map((n) => ({ ...n, parallelism: Math.min(n.parallelism, scaled) })) };
}

/** "2 workers", their addresses in the title. */
function workersOf(placement) {
  const used = [...new Set(placement.tasks.flat())].map((index) => placement.workers[index]);
  return h('span', { title: used.join(', ') }, `${used.length} worker${used.length === 1 ? '' : 's'}`);
}

/** For operator `name` of a pipeline on workers: subtask -> the worker's address. */
function workerOf(view, name) {
  const placement = view.placement;
  const node = view.dataflow.nodes.find((n) => n.name === name);
  if (!placement || !node) return null;
  return (subtask) => placement.workers[placement.tasks[node.task]?.[subtask]];
}

export function mountPipeline(main, id, tab) {
  const header = h('div', { class: 'pipeline-header' }, h('h1', {}, `Pipeline ${id}`));
  const panel = h('section', { class: 'tab-panel', id: 'tab-panel', role: 'tabpanel', 'aria-labelledby': `tab-${tab}` });
  const tabs = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Pipeline views' },
    TABS.map(([name, label]) => h('a', {
      href: `#/pipelines/${id}/${name}`, role: 'tab', id: `tab-${name}`,
      'aria-selected': String(name === tab), 'aria-controls': 'tab-panel',
      tabindex: name === tab ? 0 : -1,
      onkeydown: (event) => {
        const at = TABS.findIndex(([n]) => n === name);
        const next = event.key === 'ArrowRight' ? at + 1 : event.key === 'ArrowLeft' ? at - 1 : null;
        if (next === null) return;
        event.preventDefault();
        const [target] = TABS[(next + TABS.length) % TABS.length];
        location.hash = `#/pipelines/${id}/${target}`;
      },
    }, label)));
  replace(main, h('p', { class: 'back' }, h('a', { href: '#/' }, '← Pipelines')), header, tabs, panel);

  let stopped = false;
  let timer = null;
  let latest = 0;
  let selected = null;
  // What the reader opened or closed survives the refreshes.
  const open = { sql: true, explain: false };
  const keepOpen = (name) => (event) => { open[name] = event.target.open; };
  let stopOutput = null;
  const detail = h('div', { class: 'checkpoint-detail' });

  async function refresh() {
    clearTimeout(timer);
    const mine = ++latest;
    try {
      const [view, checkpoints] = await Promise.all([
        api.get(`/pipelines/${id}`),
        tab === 'checkpoints' ? api.get(`/pipelines/${id}/checkpoints`) : Promise.resolve(null),
      ]);
      if (stopped || mine !== latest) return;
      renderHeader(view);
      renderTab(view, checkpoints);
    } catch (error) {
      if (stopped || mine !== latest) return;
      replace(panel, h('p', { class: 'error', role: 'alert' }, error.message));
      if (error.status === 404) return;
    }
    if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
  }

  function renderHeader(view) {
    const facts = [
      ['Status', statusBadge(view.status)],
      ['Uptime', format.duration(view.uptime_ms) || '—'],
      ['Restarts', view.restarts ?? '—'],
      ['Parallelism', parallelism(view)],
      ...(view.placement ? [['Runs on', workersOf(view.placement)]] : []),
      ['Created', format.clock(view.created_at_ms)],
    ];
    replace(header,
      h('h1', {}, `Pipeline ${id}: `, h('span', { class: 'name' }, view.name), view.preview ? h('span', { class: 'tag' }, 'preview') : null),
      h('dl', { class: 'facts' }, facts.map(([k, v]) => h('div', {}, h('dt', {}, k), h('dd', {}, v)))),
      actionButtons(id, view.status, (action) => {
        if (action === 'delete') location.hash = '#/';
        else refresh();
      }, 'view'));
  }

  function renderTab(view, checkpoints) {
    if (tab === 'overview') {
      const chosen = selected && view.operators.some((o) => o.operator === selected) ? selected : null;
      replace(panel,
        h('details', { open: open.sql, class: 'sql-block', ontoggle: keepOpen('sql') }, h('summary', {}, 'SQL and options'),
          h('pre', { class: 'sql', 'aria-label': 'SQL' }, highlight(view.sql)),
          view.options ? h('pre', { class: 'sql options', 'aria-label': 'Options' }, highlight(view.options)) : null,
          h('p', { class: 'muted' }, view.restored_from === null || view.restored_from === undefined
            ? 'This run started fresh (not restored from a checkpoint).'
            : `This run was restored from checkpoint ${view.restored_from}.`)),
        h('h2', {}, 'Dataflow'),
        view.dataflow.nodes.length === 0
          ? h('p', { class: 'empty' }, 'The graph shows while the pipeline runs (resume it to see it).')
          : h('div', { class: 'scroll graph' }, dataflowSvg(runningDataflow(view), view.operators, chosen, (node) => {
            selected = node.name;
            renderTab(view, checkpoints);
            document.getElementById(`node-${node.id}`)?.focus();
          })),
        h('p', { class: 'legend' },
          h('span', { class: 'legend-item' }, h('span', { class: 'swatch pressure-ok' }), 'back-pressure under 10%'),
          h('span', { class: 'legend-item' }, h('span', { class: 'swatch pressure-low' }), '10–50%'),
          h('span', { class: 'legend-item' }, h('span', { class: 'swatch pressure-high' }), 'over 50%')),
        chosen ? h('section', { class: 'operator-detail', 'aria-label': `Operator ${chosen}` },
          h('h2', {}, `Operator ${chosen}`), h('div', { class: 'scroll' }, subtaskTable(chosen, view.operators, workerOf(view, chosen))))
          : h('p', { class: 'muted' }, 'Choose an operator to see its subtasks.'),
        view.graph.length ? h('details', { open: open.explain, ontoggle: keepOpen('explain') }, h('summary', {}, 'As EXPLAIN shows it'), h('pre', { class: 'explain' }, view.graph.join('\n'))) : null);
    } else if (tab === 'checkpoints') {
      replace(panel,
        checkpointSummary(checkpoints, view.restored_from),
        checkpoints.length ? checkpointChart(checkpoints) : h('p', { class: 'empty' }, 'No checkpoint yet.'),
        detail,
        checkpointTable(checkpoints, view.restored_from, id, detail));
    } else if (tab === 'exactly-once') {
      replace(panel, transactionsPanel(view.operators, Date.now()));
    } else if (tab === 'errors') {
      replace(panel, timeline(view));
    } else if (tab === 'output' && !stopOutput) {
      if (!view.preview) {
        replace(panel, h('p', { class: 'empty' }, 'Only a bare SELECT keeps its rows for the page; this pipeline writes to its sink tables.'));
        return;
      }
      stopOutput = mountOutput(panel, id);
    }
  }

  refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
    if (stopOutput) stopOutput();
  };
}
