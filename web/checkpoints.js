// The checkpoints tab: a summary (count, failures, min/median/max duration, the last
// completed), a chart over the checkpoints of duration (bars, coloured by kind; failures
// marked) and state size (line), and the table, where the checkpoint the run restored from is
// marked and a row opens its per-subtask breakdown.

import * as api from './api.js';
import { h, s, table } from './dom.js';
import * as format from './format.js';

const KINDS = [
  ['kind-aligned', 'aligned'],
  ['kind-unaligned', 'unaligned'],
  ['kind-timed_out', 'aligned, timed out into unaligned'],
  ['kind-at_least_once', 'at-least-once'],
  ['failed', 'failed'],
];

const completed = (c) => c.status.status === 'completed';
const failed = (c) => c.status.status === 'aborted';

export function checkpointSummary(list, restoredFrom) {
  const done = list.filter(completed);
  const durations = done.map((c) => c.duration_ms).sort((a, b) => a - b);
  const median = durations.length ? durations[Math.floor((durations.length - 1) / 2)] : null;
  const last = done[done.length - 1];
  const item = (label, value) => h('div', { class: 'stat' }, h('dt', {}, label), h('dd', {}, value));
  return h('dl', { class: 'stats', 'aria-label': 'Checkpoint summary' },
    item('Completed', String(done.length)),
    item('Failed', String(list.filter(failed).length)),
    item('In progress', String(list.filter((c) => c.status.status === 'in_progress').length)),
    item('Duration min / median / max', durations.length
      ? `${format.duration(durations[0])} / ${format.duration(median)} / ${format.duration(durations[durations.length - 1])}` : '—'),
    item('Last completed', last ? `#${last.id}, ${format.ago(last.started_at_ms + last.duration_ms)}` : '—'),
    item('Restored from', restoredFrom === null || restoredFrom === undefined ? '—' : `#${restoredFrom}`));
}

export function checkpointChart(list) {
  const shown = list.filter((c) => c.status.status !== 'in_progress').slice(-60);
  const width = 760;
  const height = 220;
  const [left, right, top, bottom] = [56, 64, 14, 30];
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  const maxDuration = Math.max(10, ...shown.filter((c) => !failed(c)).map((c) => c.duration_ms));
  const maxBytes = Math.max(1, ...shown.map((c) => c.state_bytes));
  const step = plotW / Math.max(shown.length, 1);
  const barW = Math.max(2, Math.min(24, step * 0.7));
  const x = (i) => left + i * step + step / 2;
  const yDuration = (ms) => top + plotH - (ms / maxDuration) * plotH;
  const yBytes = (b) => top + plotH - (b / maxBytes) * plotH;
  const bars = shown.map((c, i) => {
    const title = `checkpoint ${c.id}: ${format.checkpointKind(c.kind)}, ${failed(c) ? `failed (${c.status.reason})` : 'completed'}, ${format.duration(c.duration_ms)}, ${format.bytes(c.state_bytes)} of state, ${format.bytes(c.written_bytes)} written`;
    if (failed(c)) {
      const cx = x(i);
      const cy = top + plotH - 8;
      return s('g', { class: 'failed-mark', 'data-checkpoint': c.id },
        s('title', {}, title),
        s('path', { d: `M${cx - 5},${cy - 5} L${cx + 5},${cy + 5} M${cx - 5},${cy + 5} L${cx + 5},${cy - 5}` }));
    }
    const y = yDuration(c.duration_ms);
    return s('rect', {
      class: `bar ${format.checkpointKindClass(c.kind)}`, 'data-checkpoint': c.id,
      x: x(i) - barW / 2, y, width: barW, height: Math.max(1, top + plotH - y),
    }, s('title', {}, title));
  });
  const sized = shown.map((c, i) => [c, i]).filter(([c]) => completed(c));
  const line = sized.map(([c, i], k) => `${k ? 'L' : 'M'}${x(i)},${yBytes(c.state_bytes)}`).join(' ');
  const ticks = [0, 0.5, 1].map((f) => [
    s('line', { class: 'grid', x1: left, x2: left + plotW, y1: top + plotH * (1 - f), y2: top + plotH * (1 - f) }),
    s('text', { class: 'axis', x: left - 6, y: top + plotH * (1 - f) + 4, 'text-anchor': 'end' }, format.duration(maxDuration * f)),
    s('text', { class: 'axis size-axis', x: left + plotW + 6, y: top + plotH * (1 - f) + 4 }, format.bytes(Math.round(maxBytes * f))),
  ]);
  const labels = shown.map((c, i) => (shown.length <= 20 || i % Math.ceil(shown.length / 20) === 0
    ? s('text', { class: 'axis', x: x(i), y: height - 10, 'text-anchor': 'middle' }, String(c.id)) : null));
  return h('figure', { class: 'chart' },
    s('svg', { viewBox: `0 0 ${width} ${height}`, class: 'checkpoint-chart', role: 'img',
      'aria-label': `Checkpoint durations and state sizes of the last ${shown.length} checkpoints` },
    ticks, bars,
    line ? s('path', { class: 'size-line', d: line }) : null,
    sized.map(([c, i]) => s('circle', { class: 'size-dot', cx: x(i), cy: yBytes(c.state_bytes), r: 2.5 }, s('title', {}, `checkpoint ${c.id}: ${format.bytes(c.state_bytes)}`))),
    labels),
    h('figcaption', { class: 'legend' },
      KINDS.map(([cls, label]) => h('span', { class: 'legend-item' }, h('span', { class: `swatch ${cls}` }), label)),
      h('span', { class: 'legend-item' }, h('span', { class: 'swatch size' }), 'state size (right axis)')));
}

export function checkpointTable(list, restoredFrom, pipelineId, detail) {
  const columns = [['ID', 'num'], ['Kind'], ['Status'], ['Started'], ['Duration', 'num'], ['State size', 'num'],
    ['Written', 'num'], ['Alignment', 'num'], ['In-flight', 'num']];
  const rows = [...list].reverse().map((c) => {
    const status = failed(c) ? `failed: ${c.status.reason}` : c.status.status.replace('_', ' ');
    const open = async () => {
      detail.replaceChildren(h('p', { class: 'muted' }, `Loading checkpoint ${c.id}…`));
      try {
        const full = await api.get(`/pipelines/${pipelineId}/checkpoints/${c.id}`);
        detail.replaceChildren(h('h3', {}, `Checkpoint ${c.id} per subtask`), table(
          [['Operators'], ['Subtask', 'num'], ['State size', 'num'], ['Written', 'num'], ['In-flight', 'num'], ['Alignment', 'num'],
            ['Unaligned']],
          full.tasks.map((t) => [t.operators.join(' → '), t.subtask, format.bytes(t.state_bytes), format.bytes(t.written_bytes),
            format.bytes(t.inflight_bytes), format.duration(t.alignment_ms), t.unaligned ? 'yes' : 'no']),
          { class: 'checkpoint-tasks' }));
      } catch (error) {
        detail.replaceChildren(h('p', { class: 'error' }, error.message));
      }
    };
    return h('tr', { class: failed(c) ? 'failed-row' : '', 'data-checkpoint': c.id },
      h('td', { class: 'num' }, h('button', { type: 'button', class: 'link', id: `checkpoint-${c.id}`, onclick: open,
        'aria-label': `Checkpoint ${c.id} per subtask` }, String(c.id)),
      c.id === restoredFrom ? h('span', { class: 'tag restored' }, 'restored from') : null),
      h('td', {}, format.checkpointKind(c.kind)),
      h('td', { class: failed(c) ? 'error' : '' }, status),
      h('td', {}, format.clock(c.started_at_ms)),
      h('td', { class: 'num' }, format.duration(c.duration_ms)),
      h('td', { class: 'num' }, format.bytes(c.state_bytes)),
      h('td', { class: 'num written' }, format.bytes(c.written_bytes)),
      h('td', { class: 'num' }, format.duration(c.alignment_ms)),
      h('td', { class: 'num' }, format.bytes(c.inflight_bytes)));
  });
  return h('div', { class: 'scroll' }, table(columns, rows, { class: 'checkpoints', 'aria-label': 'Checkpoints' }));
}
