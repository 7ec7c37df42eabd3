// What the page tests share: a real `weir serve` on a free loopback port with its own data
// directory, Debian's headless Chromium driven by playwright-core (no browser download), and
// screenshots kept as artifacts.

import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir, homedir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const targetDir = process.env.CARGO_TARGET_DIR || join(homedir(), '.cache/weir/target');
export const WEIR = process.env.WEIR_BIN || join(targetDir, 'debug/weir');
export const SCREENSHOTS = process.env.WEIR_WEB_SCREENSHOTS || new URL('./screenshots/', import.meta.url).pathname;
export const KAFKA = process.env.WEIR_KAFKA_BOOTSTRAP || '';

/** `weir serve` on 127.0.0.1:0; resolves once it prints the address it listens on. */
export async function startServer(extra = []) {
  const data = mkdtempSync(join(tmpdir(), 'weir-web-'));
  const env = { ...process.env, RUST_LOG: 'warn' };
  delete env.WEIR_TOKEN;
  const child = spawn(WEIR, ['serve', '--listen', '127.0.0.1:0', '--data-dir', data, ...extra], {
    env,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const line = await new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    lines.once('line', resolve);
    child.once('exit', (code) => reject(new Error(`weir serve exited with ${code} before listening`)));
  });
  const url = line.trim().replace(/^weir listening on /, '');
  if (!url.startsWith('http://')) throw new Error(`weir serve printed ${line}`);
  return {
    url,
    async stop() {
      child.kill('SIGTERM');
      await new Promise((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', resolve)));
      rmSync(data, { recursive: true, force: true });
    },
  };
}

/** `weir worker` joining `server` (started with the same cluster secret); resolves once it
 * prints its Flight address. */
export async function startWorker(server, id, secret) {
  const env = { ...process.env, RUST_LOG: 'warn' };
  const child = spawn(WEIR, ['worker', '--controller', server.url, '--listen', '127.0.0.1:0', '--id', id,
    '--slots', '1', '--cluster-secret', secret], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`weir worker exited with ${code} before listening`)));
  });
  return {
    address: line.trim().replace(/^weir worker listening on /, ''),
    async kill() {
      child.kill('SIGKILL');
      await new Promise((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', resolve)));
    },
  };
}

/** Debian's Chromium, headless, with nothing that reaches for the (closed) network. */
export function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.WEIR_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
}

/** Saves a screenshot of `page` as screenshots/NAME.png (kept as a test artifact). */
export async function screenshot(page, name) {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

/** Calls the REST API directly (setting up what a test is not about). */
export async function api(server, method, path, body, token) {
  const headers = { 'Content-Type': 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(`${server.url}/api/v1${path}`, { method, headers, body: body && JSON.stringify(body) });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/** Polls `check` until it returns something truthy, or fails after `ms`. */
export async function eventually(what, check, ms = 30000) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      last = await check();
      if (last) return last;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${last})`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}
