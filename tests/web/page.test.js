// The web page of `weir serve`, as people use it: in Debian's headless Chromium against a real
// server (and, for the exactly-once panel, the real Kafka broker the test command starts).
// Every test leaves a screenshot in screenshots/ — look at them.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';

import { KAFKA, api, eventually, launchBrowser, screenshot, startServer, startWorker } from './harness.js';

const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

const NEXMARK = "CREATE TABLE nexmark WITH (connector = 'nexmark', rate = '2000');\nSET checkpoint.interval = '1 s';";
const COUNT_BIDS = 'SELECT bid.auction % 10 AS bucket, count(*) AS bids\n  FROM nexmark WHERE event_type = 2\n  GROUP BY bid.auction % 10;';

let browser;
before(async () => {
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
});

async function open(server, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, ...options });
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    // The browser logs every 4xx answer; the page shows those itself.
    const answered = /Failed to load resource: the server responded with a status of 4\d\d/.test(message.text());
    if (message.type() === 'error' && !answered) problems.push(`console: ${message.text()}`);
  });
  page.on('requestfailed', (request) => {
    if (!request.url().startsWith(server.url)) problems.push(`a request left the server: ${request.url()}`);
  });
  page.on('request', (request) => {
    if (!request.url().startsWith(server.url) && !request.url().startsWith('data:')) {
      problems.push(`a request left the server: ${request.url()}`);
    }
  });
  await page.goto(server.url);
  return { page, context, problems };
}

/** Runs `sql` in the editor and waits for its pipeline's view; returns the pipeline id. */
async function runInEditor(page, sql) {
  await page.getByRole('link', { name: 'SQL editor', exact: true }).click();
  await page.locator('#sql-input').fill(sql);
  await page.locator('#run-sql').click();
  await page.waitForURL(/#\/pipelines\/\d+/);
  return Number(page.url().match(/#\/pipelines\/(\d+)/)[1]);
}

/** axe-core's serious and critical violations on the page as it is now. */
async function accessibilityViolations(page) {
  await page.addScriptTag({ content: AXE });
  const result = await page.evaluate(async () => window.axe.run(document, { resultTypes: ['violations'] }));
  return result.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).slice(0, 3).join('; ')})`);
}

describe('the web page of weir serve', () => {
  let server;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server?.stop();
  });

  test('the list loads, served with everything from the binary', async () => {
    const { page, context, problems } = await open(server);
    await page.getByRole('heading', { name: 'Pipelines' }).waitFor();
    await page.getByText('No pipelines yet').waitFor();
    await screenshot(page, '01-empty-list');
    assert.deepEqual(problems, []);
    await context.close();
  });

  test('a pipeline created in the editor runs, and its graph has one node per operator with rates that grow', async () => {
    const { page, context, problems } = await open(server);
    const id = await runInEditor(page, `${NEXMARK}\n${COUNT_BIDS}`);
    await page.getByRole('tab', { name: 'Overview' }).click();
    await page.locator('.pipeline-header .status-running').waitFor();
    const view = await api(server, 'GET', `/pipelines/${id}`);
    assert.ok(view.dataflow.nodes.length >= 3, `a source, an aggregate and the preview: ${JSON.stringify(view.dataflow)}`);
    await page.locator('svg.dataflow g.node').first().waitFor();
    assert.equal(await page.locator('svg.dataflow g.node').count(), view.dataflow.nodes.length);
    assert.equal(await page.locator('svg.dataflow g.edge').count(), view.dataflow.edges.length);
    const partitionings = await page.locator('svg.dataflow g.edge').evaluateAll((edges) => edges.map((e) => e.dataset.partitioning));
    assert.ok(partitionings.some((p) => p.startsWith('hash(')), `a keyed edge: ${partitionings}`);
    const source = page.locator('svg.dataflow g.node[data-role="source"]');
    await eventually('the source to show a non-zero rate', async () => {
      const rates = await source.locator('.node-rates').textContent();
      return /out [1-9]/.test(rates) && rates;
    });
    // Chosen with the keyboard: the operator's subtasks.
    await source.focus();
    await page.keyboard.press('Enter');
    const subtasks = page.locator('table.subtasks tbody tr');
    await subtasks.first().waitFor();
    assert.equal(await subtasks.count(), view.dataflow.nodes.find((n) => n.role === 'source').parallelism);
    await page.locator('.sql-block .sql-keyword', { hasText: 'SELECT' }).first().waitFor();
    await screenshot(page, '02-pipeline-graph');
    // In the list: running, with rates.
    await page.getByRole('link', { name: '← Pipelines' }).click();
    const row = page.locator(`tr[data-pipeline="${id}"]`);
    await row.locator('.status-running').waitFor();
    await eventually('a rate in the list', async () => /[1-9]/.test(await row.locator('td').nth(4).textContent()));
    await screenshot(page, '03-list-running');
    assert.deepEqual(problems, []);
    await context.close();
  });

  test('checkpoints appear in the chart and the table, with a per-subtask breakdown', async () => {
    const { page, context, problems } = await open(server);
    const [pipeline] = await api(server, 'GET', '/pipelines');
    await page.goto(`${server.url}/#/pipelines/${pipeline.id}/checkpoints`);
    await eventually('three completed checkpoints in the chart', async () =>
      (await page.locator('svg.checkpoint-chart rect.bar').count()) >= 3);
    const rows = page.locator('table.checkpoints tbody tr');
    assert.ok((await rows.count()) >= 3);
    assert.match(await rows.first().locator('td').nth(1).textContent(), /aligned/);
    assert.match(await page.locator('.stats').textContent(), /Completed\s*[3-9]|Completed\s*\d\d/);
    assert.match(await rows.first().locator('td.written').textContent(), /^\d+(\.\d)? (B|KiB|MiB)$/);
    await rows.first().locator('button').click();
    await page.locator('table.checkpoint-tasks tbody tr').first().waitFor();
    assert.match(await page.locator('table.checkpoint-tasks thead').textContent(), /Written/);
    await screenshot(page, '04-checkpoints');
    assert.deepEqual(problems, []);
    await context.close();
  });

  test('live output rows arrive, and pause freezes them', async () => {
    const { page, context, problems } = await open(server);
    const [pipeline] = await api(server, 'GET', '/pipelines');
    await page.goto(`${server.url}/#/pipelines/${pipeline.id}/output`);
    const rows = page.locator('table.output tbody tr');
    await eventually('output rows', async () => (await rows.count()) > 0);
    const header = await page.locator('table.output thead').textContent();
    assert.match(header, /^op.*bucket.*bids/, 'an updating query shows its change column first');
    assert.match(await rows.first().locator('td.op').textContent(), /^[+-][IUD]$/);
    await page.locator('#output-pause').click();
    const frozen = await page.locator('table.output tbody').textContent();
    await eventually('rows to arrive while paused', async () =>
      /paused, [1-9]\d* new/.test(await page.locator('#output-state').textContent()));
    assert.equal(await page.locator('table.output tbody').textContent(), frozen, 'paused, the table stays');
    await screenshot(page, '05-output-paused');
    await page.locator('#output-pause').click();
    await eventually('the table to move on', async () => (await page.locator('table.output tbody').textContent()) !== frozen);
    assert.deepEqual(problems, []);
    await context.close();
  });

  test('stop, then resume, change the status, each after a confirmation', async () => {
    const { page, context, problems } = await open(server);
    const [pipeline] = await api(server, 'GET', '/pipelines');
    const row = page.locator(`tr[data-pipeline="${pipeline.id}"]`);
    await row.locator('.status-running').waitFor();
    await row.getByRole('button', { name: `Stop pipeline ${pipeline.id}` }).click();
    await page.locator('#confirm-dialog').getByText('with a savepoint').waitFor();
    await page.locator('#confirm-ok').click();
    await page.locator('#toast').getByText('stopping with a savepoint').waitFor();
    await row.locator('.status-stopped').waitFor({ timeout: 30000 });
    await screenshot(page, '06-stopped');
    await row.getByRole('button', { name: `Resume pipeline ${pipeline.id}` }).click();
    await page.locator('#confirm-ok').click();
    await row.locator('.status-running').waitFor({ timeout: 30000 });
    const view = await api(server, 'GET', `/pipelines/${pipeline.id}`);
    assert.notEqual(view.restored_from, null, 'resumed from its savepoint');
    await page.goto(`${server.url}/#/pipelines/${pipeline.id}/errors`);
    const timeline = page.locator('ol.timeline');
    await timeline.getByText('stopped with a savepoint').waitFor();
    await page.goto(`${server.url}/#/pipelines/${pipeline.id}/checkpoints`);
    await page.locator('table.checkpoints .tag.restored').waitFor();
    await screenshot(page, '07-resumed-checkpoints');
    assert.deepEqual(problems, []);
    await context.close();
  });

  test('a bad statement shows its error at its line and column', async () => {
    const { page, context, problems } = await open(server);
    await page.getByRole('link', { name: 'SQL editor', exact: true }).click();
    await page.locator('#sql-input').fill('SHOW TABLES;\nSELECT bid.auction\n  FROMM nexmark;');
    await page.locator('#run-sql').click();
    const error = page.locator('#sql-error');
    await error.waitFor();
    assert.match(await error.textContent(), /line 3, column \d+/);
    assert.match(await page.locator('.error-line').textContent(), /^\s*3\s+FROMM nexmark;/);
    const caret = await page.locator('.error-location .caret').textContent();
    const column = Number((await error.textContent()).match(/column (\d+)/)[1]);
    assert.equal(caret.indexOf('^'), 5 + column - 1, 'the caret stands under the column');
    const selected = await page.locator('#sql-input').evaluate((t) => t.value.slice(0, t.selectionStart).split('\n').length);
    assert.equal(selected, 3, 'the cursor is put on the line');
    await screenshot(page, '08-sql-error');
    assert.deepEqual(problems, []);
    await context.close();
  });

  test('the exactly-once panel shows a Kafka sink committing transactions', { skip: KAFKA ? false : 'WEIR_KAFKA_BOOTSTRAP is not set' }, async () => {
    const { page, context, problems } = await open(server);
    const topic = `web-${Date.now()}`;
    const id = await runInEditor(page, `SET checkpoint.interval = '1 s';
CREATE TABLE bids_out (auction BIGINT, price BIGINT) WITH (connector = 'kafka', "bootstrap.servers" = '${KAFKA}',
  topic = '${topic}', format = 'json', delivery = 'exactly_once', "sink.create-topic" = 'true');
INSERT INTO bids_out SELECT bid.auction, bid.price FROM nexmark WHERE event_type = 2;`);
    await page.getByRole('tab', { name: 'Exactly-once' }).click();
    const row = page.locator('table.transactions tbody tr').first();
    await eventually('a committed transaction', async () =>
      Number((await row.locator('[data-field="committed"]').textContent()).replaceAll(',', '')) > 0);
    assert.match(await row.locator('td').first().textContent(), /sink|bids_out/);
    await screenshot(page, '09-exactly-once');
    // Stop now, then delete, from the pipeline's own buttons.
    await page.locator(`#view-stop-now-${id}`).click();
    await page.locator('#confirm-dialog').getByText('without a savepoint').waitFor();
    await page.locator('#confirm-ok').click();
    await page.locator('.pipeline-header .status-stopped').waitFor();
    await page.locator(`#view-delete-${id}`).click();
    await page.locator('#confirm-dialog').getByText('cannot be undone').waitFor();
    await page.locator('#confirm-ok').click();
    await page.waitForURL(/#\/$/);
    await page.locator('#toast').getByText(`Deleted pipeline ${id}.`).waitFor();
    assert.equal(await page.locator(`tr[data-pipeline="${id}"]`).count(), 0);
    assert.deepEqual(problems, []);
    await context.close();
  });

  test('what live pipelines rarely show is drawn right: back-pressure colours, checkpoint kinds and failures, a transaction near its timeout', async () => {
    const { page, context, problems } = await open(server);
    await page.getByRole('heading', { name: 'Pipelines' }).waitFor();
    const drawn = await page.evaluate(async () => {
      const graph = await import('/ui/graph.js');
      const checkpoints = await import('/ui/checkpoints.js');
      const transactions = await import('/ui/transactions.js');
      const now = Date.now();
      const operator = (name, subtask, ratio) => ({
        operator: name, subtask, records_in: 10, records_out: 10, records_in_per_second: 5, records_out_per_second: 5,
        backpressure_ratio: ratio, watermark: null, watermark_lag_ms: null, bad_records: 0, late_records_dropped: 0,
      });
      const dataflow = {
        nodes: [['source', 'source'], ['slow', 'operator'], ['busy', 'operator'], ['sink', 'sink']]
          .map(([name, role], id) => ({ id, name, role, parallelism: 2, task: id, state: null })),
        edges: [[0, 1, 'hash(k)'], [0, 2, 'forward'], [1, 3, 'forward'], [2, 3, 'forward']]
          .map(([from, to, partitioning]) => ({ from, to, input: 0, partitioning })),
      };
      const operators = [operator('source', 0, 0.7), operator('source', 1, 0.2), operator('slow', 0, 0.2),
        operator('slow', 1, 0.05), operator('busy', 0, 0), operator('sink', 0, 0)];
      const report = (id, kind, status, duration) => ({ id, kind, status, started_at_ms: now - 1000 * (10 - id),
        duration_ms: duration, alignment_ms: 0, state_bytes: 1000 * id, written_bytes: 100 * id, inflight_bytes: 0,
        inflight_rows: 0 });
      const list = [report(1, 'aligned', { status: 'completed' }, 40), report(2, 'unaligned', { status: 'completed' }, 60),
        report(3, { aligned_timeout: { timed_out: true } }, { status: 'completed' }, 90),
        report(4, 'at_least_once', { status: 'completed' }, 20),
        report(5, 'aligned', { status: 'aborted', reason: 'disk full' }, 500)];
      const writer = (subtask, open, pending, age) => ({ ...operator('kafka_sink', subtask, 0), transactions: {
        open, pending, committed: 12, aborted: 1, oldest_began_ms: age === null ? null : now - age, timeout_ms: 60000 } });
      const main = document.getElementById('main');
      main.replaceChildren(graph.dataflowSvg(dataflow, operators, null, () => {}),
        checkpoints.checkpointChart(list), checkpoints.checkpointTable(list, 4, 1, document.createElement('div')),
        transactions.transactionsPanel([writer(0, 1, 1, 50000), writer(1, 0, 0, null)], now));
      const pressure = Object.fromEntries([...document.querySelectorAll('g.node')]
        .map((n) => [n.dataset.operator, n.getAttribute('class')]));
      return {
        pressure,
        bars: [...document.querySelectorAll('rect.bar')].map((b) => b.getAttribute('class')),
        failed: [...document.querySelectorAll('.failed-mark')].map((m) => m.dataset.checkpoint),
        failedRow: document.querySelector('tr.failed-row')?.textContent,
        written: [...document.querySelectorAll('table.checkpoints td.written')].map((td) => td.textContent),
        restored: document.querySelector('.tag.restored')?.closest('tr').dataset.checkpoint,
        warnings: [...document.querySelectorAll('.warning')].map((w) => w.textContent),
        warnRows: [...document.querySelectorAll('tr.warn-row')].map((r) => r.dataset.subtask),
      };
    });
    // Flink's levels, from the worst subtask: over 50% high, over 10% low.
    assert.match(drawn.pressure.source, /pressure-high/);
    assert.match(drawn.pressure.slow, /pressure-low/);
    assert.match(drawn.pressure.busy, /pressure-ok/);
    assert.deepEqual(drawn.bars, ['bar kind-aligned', 'bar kind-unaligned', 'bar kind-timed_out', 'bar kind-at_least_once']);
    assert.deepEqual(drawn.failed, ['5']);
    assert.match(drawn.failedRow, /failed: disk full/);
    // What each checkpoint wrote itself (incremental: less than its state), newest first.
    assert.deepEqual(drawn.written, ['500 B', '400 B', '300 B', '200 B', '100 B']);
    assert.equal(drawn.restored, '4');
    assert.equal(drawn.warnings.length, 1);
    assert.match(drawn.warnings[0], /kafka_sink subtask 0: a transaction has been open 50 s, near transaction.timeout.ms \(1 min 0 s\)/);
    assert.deepEqual(drawn.warnRows, ['0']);
    await screenshot(page, '10-drawn-from-made-up-data');
    assert.deepEqual(problems, []);
    await context.close();
  });

  test('the page is accessible, and usable narrow and in dark mode', async () => {
    const [pipeline] = await api(server, 'GET', '/pipelines');
    // The page's policy allows no inline script, so axe is injected with the policy bypassed.
    const { page, context } = await open(server, { colorScheme: 'dark', bypassCSP: true });
    const violations = [];
    for (const path of ['#/', `#/pipelines/${pipeline.id}/overview`, `#/pipelines/${pipeline.id}/checkpoints`,
      `#/pipelines/${pipeline.id}/exactly-once`, `#/pipelines/${pipeline.id}/errors`, '#/editor']) {
      await page.goto(`${server.url}/${path}`);
      await page.waitForTimeout(1500);
      violations.push(...(await accessibilityViolations(page)).map((v) => `${path}: ${v}`));
    }
    await page.goto(`${server.url}/#/pipelines/${pipeline.id}/overview`);
    await page.locator('svg.dataflow').waitFor();
    await screenshot(page, '11-dark-graph');
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${server.url}/#/`);
    await page.locator('table.pipelines').waitFor();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the page scrolls sideways by ${overflow} px at 390 px (tables scroll in their own box)`);
    await screenshot(page, '12-narrow-list');
    // Every control reachable by keyboard: Tab reaches the first action button.
    let reached = false;
    for (let i = 0; i < 40 && !reached; i += 1) {
      await page.keyboard.press('Tab');
      reached = await page.evaluate(() => document.activeElement?.dataset?.action !== undefined);
    }
    assert.ok(reached, 'Tab reaches the pipelines\' action buttons');
    assert.deepEqual(violations, []);
    await context.close();
  });
});

describe('a pipeline on workers', () => {
  const SECRET = 'web-cluster-secret';
  let server;
  const workers = [];
  before(async () => {
    server = await startServer(['--cluster-secret', SECRET, '--worker-timeout-ms', '1500']);
    for (const id of ['worker-a', 'worker-b']) workers.push(await startWorker(server, id, SECRET));
    await eventually('both workers alive', async () =>
      (await api(server, 'GET', '/workers')).filter((w) => w.status === 'alive').length === 2);
  });
  after(async () => {
    for (const worker of workers) await worker.kill();
    await server?.stop();
  });

  test('shows the worker of each subtask, and a pipeline short of slots as such until they return', async () => {
    const { page, context, problems } = await open(server);
    const sql = `${NEXMARK}\nSET parallelism = '2';\nCREATE TABLE counts (bucket BIGINT, bids BIGINT) WITH (connector = 'blackhole');\nINSERT INTO counts ${COUNT_BIDS}`;
    const id = await runInEditor(page, sql);
    await page.getByRole('tab', { name: 'Overview' }).click();
    const fact = (name) => page.locator('.pipeline-header .facts div', { has: page.locator('dt', { hasText: name }) }).locator('dd');
    await eventually('placed on both workers', async () => (await fact('Runs on').textContent()) === '2 workers');
    assert.equal(await fact('Parallelism').textContent(), '2');
    await page.locator('svg.dataflow g.node[data-role="source"]').click();
    const cells = page.locator('table.subtasks td.worker');
    await eventually('a worker per subtask', async () => (await cells.count()) === 2);
    assert.deepEqual((await cells.allTextContents()).sort(), workers.map((w) => w.address).sort());
    await screenshot(page, '14-on-workers');

    // One worker gone and not replaced: it goes on at 1, and says why.
    await workers.pop().kill();
    await eventually('running at 1 of 2', async () => /^1 of 2 short of slots$/.test(await fact('Parallelism').textContent()), 60000);
    await page.locator('.pipeline-header .status-running').waitFor();
    assert.equal(await fact('Runs on').textContent(), '1 worker');
    assert.deepEqual(await page.locator('svg.dataflow .node-parallelism').allTextContents(), ['×1', '×1', '×1', '×1', '×1']);
    await page.locator('svg.dataflow g.node[data-role="source"]').click();
    await eventually('one subtask, on the worker left', async () =>
      JSON.stringify(await cells.allTextContents()) === JSON.stringify([workers[0].address]));
    await screenshot(page, '15-short-of-slots');

    // A worker joins: after a few seconds it is back at 2.
    workers.push(await startWorker(server, 'worker-c', SECRET));
    await eventually('back at 2', async () => (await fact('Parallelism').textContent()) === '2', 60000);
    const view = await api(server, 'GET', `/pipelines/${id}`);
    assert.equal(view.placement.scaled_to, undefined, JSON.stringify(view.placement));
    assert.deepEqual(problems, []);
    await context.close();
  });
});

describe('with a token', () => {
  let server;
  before(async () => {
    server = await startServer(['--token', 'web-secret']);
  });
  after(async () => {
    await server?.stop();
  });

  test('the page asks for the token once and keeps it for the tab', async () => {
    const { page, context } = await open(server);
    const dialog = page.locator('#token-dialog');
    await dialog.getByText('needs its API token').waitFor();
    await page.locator('#token-input').fill('wrong');
    await page.keyboard.press('Enter');
    await dialog.getByText('refused that token').waitFor();
    await screenshot(page, '13-token-refused');
    await page.locator('#token-input').fill('web-secret');
    await page.keyboard.press('Enter');
    await page.getByText('No pipelines yet').waitFor();
    assert.equal(await dialog.isVisible(), false);
    // Kept for the tab: a reload does not ask again.
    await page.reload();
    await page.getByText('No pipelines yet').waitFor();
    assert.equal(await dialog.isVisible(), false);
    await page.getByRole('link', { name: 'SQL editor', exact: true }).click();
    await page.locator('#sql-input').fill('SHOW TABLES;');
    await page.locator('#run-sql').click();
    await page.locator('#results table').waitFor();
    await context.close();
  });
});
