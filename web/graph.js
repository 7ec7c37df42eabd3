// The dataflow graph as SVG, laid out left to right in layers: a node's layer is the longest
// path to it from a source, and within a layer nodes are ordered by the mean position of their
// inputs (one barycentre pass, enough for the graphs SQL plans: chains, joins, unions). Each
// node shows its parallelism, records in and out per second and is coloured by back-pressure as
// Flink's are (OK under 10%, low under 50%, high above); edges carry their partitioning.

import { h, s, table } from './dom.js';
import * as format from './format.js';

const NODE_W = 175;
const NODE_H = 74;
const GAP_X = 82;
const GAP_Y = 34;
const PAD = 16;

/** Per operator name: summed rates and the worst subtask's back-pressure. */
export function operatorTotals(operators) {
  const totals = new Map();
  for (const o of operators) {
    const t = totals.get(o.operator) || { in: 0, out: 0, backpressure: 0, subtasks: 0 };
    t.in += o.records_in_per_second;
    t.out += o.records_out_per_second;
    t.backpressure = Math.max(t.backpressure, o.backpressure_ratio);
    t.subtasks += 1;
    totals.set(o.operator, t);
  }
  return totals;
}

export function pressureLevel(ratio) {
  if (ratio >= 0.5) return 'high';
  if (ratio >= 0.1) return 'low';
  return 'ok';
}

/** Layer and row of every node. */
export function layout(dataflow) {
  const layer = new Map();
  const inputs = new Map(dataflow.nodes.map((n) => [n.id, []]));
  for (const e of dataflow.edges) inputs.get(e.to)?.push(e.from);
  // Nodes come sources first, each after the nodes feeding it: one pass in id order suffices.
  const byId = [...dataflow.nodes].sort((a, b) => a.id - b.id);
  for (const n of byId) {
    const from = inputs.get(n.id) || [];
    layer.set(n.id, from.length ? Math.max(...from.map((f) => (layer.get(f) ?? 0) + 1)) : 0);
  }
  const layers = [];
  for (const n of byId) (layers[layer.get(n.id)] ||= []).push(n.id);
  const row = new Map();
  layers.forEach((ids, index) => {
    if (index > 0) {
      const centre = (id) => {
        const from = inputs.get(id) || [];
        return from.length ? from.reduce((sum, f) => sum + row.get(f), 0) / from.length : 0;
      };
      ids.sort((a, b) => centre(a) - centre(b));
    }
    ids.forEach((id, i) => row.set(id, i));
  });
  return { layer, row, layers };
}

/** The graph; `onSelect(node)` when a node is clicked or chosen with Enter or Space. */
export function dataflowSvg(dataflow, operators, selected, onSelect) {
  const { layer, row, layers } = layout(dataflow);
  const tallest = Math.max(1, ...layers.map((l) => l.length));
  const width = PAD * 2 + layers.length * NODE_W + (layers.length - 1) * GAP_X;
  const height = PAD * 2 + tallest * NODE_H + (tallest - 1) * GAP_Y;
  const position = (id) => {
    const inLayer = layers[layer.get(id)].length;
    const offset = ((tallest - inLayer) * (NODE_H + GAP_Y)) / 2;
    return { x: PAD + layer.get(id) * (NODE_W + GAP_X), y: PAD + offset + row.get(id) * (NODE_H + GAP_Y) };
  };
  const totals = operatorTotals(operators);
  const edges = dataflow.edges.map((e) => {
    const a = position(e.from);
    const b = position(e.to);
    const [x1, y1, x2, y2] = [a.x + NODE_W, a.y + NODE_H / 2, b.x, b.y + NODE_H / 2];
    const mid = (x1 + x2) / 2;
    // The label fits the gap; the hash keys in full are the edge's tooltip.
    return s('g', { class: 'edge', 'data-from': e.from, 'data-to': e.to, 'data-partitioning': e.partitioning },
      s('title', {}, `${e.partitioning} (into input ${e.input})`),
      s('path', { d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2 - 6},${y2}`, 'marker-end': 'url(#arrow)' }),
      s('text', { x: mid, y: (y1 + y2) / 2 - 6, 'text-anchor': 'middle', class: 'edge-label' }, shorten(e.partitioning, 12)));
  });
  const nodes = dataflow.nodes.map((n) => {
    const { x, y } = position(n.id);
    const t = totals.get(n.name) || { in: 0, out: 0, backpressure: 0 };
    const level = pressureLevel(t.backpressure);
    const choose = () => onSelect(n);
    return s('g', {
      class: `node pressure-${level}${selected === n.name ? ' selected' : ''}`,
      id: `node-${n.id}`,
      'data-operator': n.name,
      'data-role': n.role,
      transform: `translate(${x},${y})`,
      tabindex: 0,
      role: 'button',
      'aria-pressed': selected === n.name ? 'true' : 'false',
      onclick: choose,
      onkeydown: (event) => {
        if (event.key === 'Enter' || event.key === ' ') {
          event.preventDefault();
          choose();
        }
      },
    },
    s('rect', { width: NODE_W, height: NODE_H, rx: 6 }),
    // Its accessible name is its visible text; a long name shows in full once chosen.
    s('text', { x: 10, y: 20, class: 'node-name' }, shorten(n.name, 20)),
    s('text', { x: NODE_W - 10, y: 20, class: 'node-parallelism', 'text-anchor': 'end' }, `×${n.parallelism}`),
    s('text', { x: 10, y: 42, class: 'node-rates' }, `in ${format.rate(t.in)} · out ${format.rate(t.out)}`),
    s('text', { x: 10, y: 62, class: 'node-pressure' },
      `back-pressure ${format.percent(t.backpressure)}${n.state ? ' · stateful' : ''}`));
  });
  return s('svg', {
    class: 'dataflow', viewBox: `0 0 ${width} ${height}`, width, height, role: 'group',
    'aria-label': `Dataflow graph: ${dataflow.nodes.length} operators`,
  },
  s('defs', {}, s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
    s('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrow' }))),
  edges, nodes);
}

function shorten(text, max) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** The per-subtask table of the operator `name`. */
/**
 * The subtasks of operator `name`; `workerOf(subtask)`, when the pipeline runs on workers,
 * gives the Flight address of the worker each runs on (a column of its own).
 */
export function subtaskTable(name, operators, workerOf = null) {
  const rows = operators.filter((o) => o.operator === name).sort((a, b) => a.subtask - b.subtask);
  const columns = [['Subtask', 'num'], ...(workerOf ? [['Worker']] : []), ['Records in', 'num'], ['Records out', 'num'],
    ['In/s', 'num'], ['Out/s', 'num'], ['Back-pressure', 'num'], ['Watermark'], ['Watermark lag', 'num'],
    ['Bad records', 'num'], ['Late dropped', 'num']];
  return table(columns, rows.map((o) => h('tr', {},
    h('td', { class: 'num' }, o.subtask),
    workerOf ? h('td', { class: 'worker' }, workerOf(o.subtask) ?? '—') : null,
    h('td', { class: 'num' }, format.count(o.records_in)),
    h('td', { class: 'num' }, format.count(o.records_out)),
    h('td', { class: 'num' }, format.rate(o.records_in_per_second)),
    h('td', { class: 'num' }, format.rate(o.records_out_per_second)),
    h('td', { class: `num pressure-text-${pressureLevel(o.backpressure_ratio)}` }, format.percent(o.backpressure_ratio)),
    h('td', {}, o.watermark === null ? '—' : format.clock(o.watermark)),
    h('td', { class: 'num' }, o.watermark_lag_ms === null ? '—' : format.duration(o.watermark_lag_ms)),
    h('td', { class: 'num' }, format.count(o.bad_records)),
    h('td', { class: 'num' }, format.count(o.late_records_dropped)))),
  { class: 'subtasks', 'aria-label': `Subtasks of ${name}` });
}
