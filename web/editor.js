// The SQL editor: a text area (Ctrl+Enter runs), the results of each statement (messages,
// tables, pipelines started), and an error marked where the server located it: its line
// highlighted under a caret, and the cursor put there.

import * as api from './api.js';
import { h, replace, table } from './dom.js';

const DRAFT_KEY = 'weir.editor';
const EXAMPLE = `CREATE TABLE nexmark WITH (connector = 'nexmark', rate = '1000');
SELECT bid.auction, count(*) AS bids
  FROM nexmark WHERE event_type = 2
  GROUP BY bid.auction;`;

export function mountEditor(main) {
  const text = h('textarea', {
    id: 'sql-input', class: 'sql-input', spellcheck: 'false', rows: 12, 'aria-describedby': 'editor-help',
    autocapitalize: 'off', autocomplete: 'off',
  });
  text.value = sessionStorage.getItem(DRAFT_KEY) ?? EXAMPLE;
  const results = h('section', { id: 'results', class: 'results', 'aria-live': 'polite', 'aria-label': 'Results' });
  const run = h('button', { type: 'button', id: 'run-sql', class: 'primary', onclick: () => execute() }, 'Run');

  async function execute() {
    const sql = text.value;
    if (!sql.trim()) return;
    sessionStorage.setItem(DRAFT_KEY, sql);
    run.disabled = true;
    replace(results, h('p', { class: 'muted' }, 'Running…'));
    try {
      const outputs = await api.post('/statements', { sql });
      replace(results, outputs.map(outputNode));
      const pipelines = outputs.filter((o) => o.kind === 'pipeline');
      if (pipelines.length === 1) location.hash = `#/pipelines/${pipelines[0].id}/${pipelines[0].preview ? 'output' : 'overview'}`;
    } catch (error) {
      replace(results, errorNode(sql, error));
      if (error.line) placeCursor(text, error.line, error.column || 1);
    } finally {
      run.disabled = false;
    }
  }

  text.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      execute();
    }
  });
  text.addEventListener('input', () => sessionStorage.setItem(DRAFT_KEY, text.value));
  replace(main,
    h('h1', {}, 'SQL editor'),
    h('label', { for: 'sql-input' }, 'Statements, separated by semicolons'),
    text,
    h('div', { class: 'toolbar' }, run, h('span', { id: 'editor-help', class: 'muted' },
      'Ctrl+Enter runs. A SELECT starts a pipeline whose rows you can watch; INSERT INTO writes to a sink table; ',
      'CREATE TABLE, SET, SHOW TABLES and the pipeline statements (SHOW PIPELINES, STOP PIPELINE n…) work too.')),
    results);
  text.focus();
  return () => {};
}

function outputNode(output) {
  if (output.kind === 'done') return h('p', { class: 'done' }, output.message);
  if (output.kind === 'rows') {
    return h('div', { class: 'scroll' }, table(output.columns.map((c) => [c]), output.rows, { class: 'rows' }));
  }
  return h('p', { class: 'done' }, `Started pipeline ${output.id} (${output.name}). `,
    h('a', { href: `#/pipelines/${output.id}` }, 'Open it'));
}

/** The error, and where the server located it: psql's way, the line and a caret under it. */
function errorNode(sql, error) {
  const where = error.line ? `line ${error.line}, column ${error.column ?? 1}: ` : '';
  const nodes = [h('p', { class: 'error', role: 'alert', id: 'sql-error' }, h('strong', {}, 'Error: '), where, error.message)];
  if (error.line) {
    const lines = sql.split('\n');
    const from = Math.max(1, error.line - 2);
    const marked = [];
    for (let n = from; n <= Math.min(lines.length, error.line + 1); n += 1) {
      marked.push(h('span', { class: n === error.line ? 'code-line error-line' : 'code-line', 'data-line': n },
        h('span', { class: 'gutter', 'aria-hidden': 'true' }, String(n).padStart(4)), ` ${lines[n - 1]}`));
      if (n === error.line) {
        marked.push(h('span', { class: 'code-line caret', 'aria-hidden': 'true' }, `${' '.repeat(5 + (error.column ?? 1) - 1)}^`));
      }
    }
    nodes.push(h('pre', { class: 'error-location', 'aria-label': `Error at line ${error.line}, column ${error.column ?? 1}` }, marked));
  }
  return nodes;
}

function placeCursor(text, line, column) {
  const lines = text.value.split('\n');
  let offset = 0;
  for (let n = 1; n < line && n <= lines.length; n += 1) offset += lines[n - 1].length + 1;
  offset += column - 1;
  text.focus();
  text.setSelectionRange(offset, offset + 1);
}
