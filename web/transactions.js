// The exactly-once panel: every transactional writer's subtasks (a Kafka sink with
// delivery = 'exactly_once', or a source's dead-letter writer) with their transactions now —
// open (taking records), pre-committed (flushed at a barrier, waiting for that checkpoint to
// complete), committed, aborted — and how old the oldest uncommitted one is. The broker aborts
// a transaction older than transaction.timeout.ms, and with it the records a completed
// checkpoint promised: a warning shows from 70% of it.

import { h, table } from './dom.js';
import * as format from './format.js';

const WARN_AT = 0.7;

export function transactionsPanel(operators, nowMs) {
  const writers = operators.filter((o) => o.transactions).sort((a, b) =>
    a.operator.localeCompare(b.operator) || a.subtask - b.subtask);
  if (writers.length === 0) {
    return h('p', { class: 'empty' }, 'No transactional writer in this pipeline: its sinks are not Kafka sinks with ',
      h('code', {}, "delivery = 'exactly_once'"), '.');
  }
  const warnings = [];
  const rows = writers.map((o) => {
    const t = o.transactions;
    const age = t.oldest_began_ms === null ? null : Math.max(0, nowMs - t.oldest_began_ms);
    const near = age !== null && age >= WARN_AT * t.timeout_ms;
    if (near) {
      warnings.push(`${o.operator} subtask ${o.subtask}: a transaction has been open ${format.duration(age)}, `
        + `near transaction.timeout.ms (${format.duration(t.timeout_ms)}); the broker aborts it then.`);
    }
    return h('tr', { class: near ? 'warn-row' : '', 'data-operator': o.operator, 'data-subtask': o.subtask },
      h('td', {}, o.operator),
      h('td', { class: 'num' }, o.subtask),
      h('td', { class: 'num', 'data-field': 'open' }, t.open),
      h('td', { class: 'num', 'data-field': 'pending' }, t.pending),
      h('td', { class: 'num', 'data-field': 'committed' }, format.count(t.committed)),
      h('td', { class: 'num', 'data-field': 'aborted' }, format.count(t.aborted)),
      h('td', { class: 'num' }, age === null ? '—' : format.duration(age)),
      h('td', { class: 'num' }, format.duration(t.timeout_ms)));
  });
  const columns = [['Operator'], ['Subtask', 'num'], ['Open', 'num'], ['Pre-committed', 'num'], ['Committed', 'num'],
    ['Aborted', 'num'], ['Oldest open', 'num'], ['Timeout', 'num']];
  return h('div', {},
    warnings.map((w) => h('p', { class: 'warning', role: 'alert' }, w)),
    h('p', { class: 'muted' }, 'Records become visible to read_committed consumers when their transaction commits, '
      + 'right after the checkpoint that pre-committed it completes. After a crash, recovery commits what the restored '
      + 'checkpoint pre-committed and aborts every other open transaction.'),
    h('div', { class: 'scroll' }, table(columns, rows, { class: 'transactions', 'aria-label': 'Transactions per sink subtask' })));
}
