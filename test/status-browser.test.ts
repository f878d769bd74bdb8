// The status page and Bull Board as a person uses them, in a real browser (issue 21):
// playwright-core drives Debian's Chromium (/usr/bin/chromium, installed by .ci/run) against
// the API over the real Redis and PostgreSQL. A token login, the release's queue in Bull Board,
// a pause pressed there and on the status page — each an operator pause in the registry under
// the token's subject — a viewer without buttons, a forged form on another origin refused, the
// heatmap's failed cell opening its evidence, and a screenshot of the page in reports/.
// test/status-page.test.ts checks the same page over plain HTTP.
import { mkdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { buildPartition } from '@genfill/builder';
import { startApi, type ApiServer } from '@genfill/api';
import { loadConfig } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, seedOrders } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';
import {
  API_TOKENS,
  claim,
  datasetWithFrontier,
  fail,
  partitionIds,
  recordReconciliation,
  recordThrottleDecision,
  submitAndPlan,
  TOKENS,
} from './support/status.ts';
import { waitFor } from './support/wait.ts';

/** Debian's Chromium, with the flags of the project's notes (no sandbox as root, nothing fetched). */
const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const REPORTS = fileURLToPath(new URL('../reports/', import.meta.url));
const SCREENSHOT = `${REPORTS}status-page.png`;

const db = await createTestDatabase('status_browser');
const q = createTestQueues('status-browser');
const env = { DATABASE_URL: db.url, REDIS_URL, GENFILL_QUEUE_PREFIX: q.prefix, GENFILL_LOG_LEVEL: 'silent', GENFILL_API_TOKENS: API_TOKENS };
const RELEASE = 'orders-tax-fix@4';
const BOARD_QUEUE = `release.${RELEASE}`;
const queue = q.queue(RELEASE);
let api: ApiServer | undefined;
let browser: Browser | undefined;
/** Another origin on this machine (same site: 127.0.0.1, another port), serving a forged form. */
let evil: Server | undefined;
let evilUrl: string;
let failed: string[];

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
const flag = async () => (await one('SELECT operator_paused FROM genfill.releases WHERE id = $1', [RELEASE])).operator_paused as boolean;
const lastLog = () => one('SELECT action, principal, reason, detail FROM genfill.release_log WHERE release = $1 ORDER BY id DESC LIMIT 1', [RELEASE]);
const logCount = async () => (await one('SELECT count(*)::int AS n FROM genfill.release_log')).n as number;

/** A fresh browser context logged in with `token` through the login form; lands on `next`. */
async function loggedIn(token: string, next: '/' | '/admin/queues'): Promise<Page> {
  const context = await browser!.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  await page.goto(`${api!.url}${next}`);
  // Not logged in: both pages send the browser to the form.
  expect(new URL(page.url()).pathname).toBe('/login');
  await page.getByLabel('Token').fill(token);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.waitForURL((u) => u.pathname === next);
  return page;
}

/** Open Bull Board's queue menu, choose `item` and confirm; resolves with the board API's answer. */
async function boardQueueAction(page: Page, item: 'Pause' | 'Resume'): Promise<number> {
  await page.locator('button[aria-haspopup="menu"]:has(svg.lucide-ellipsis-vertical)').click();
  await page.getByRole('menuitem', { name: item, exact: true }).click();
  const answer = page.waitForResponse((r) => r.request().method() === 'PUT' && r.url().endsWith(`/${item.toLowerCase()}`));
  await page.getByRole('button', { name: 'Confirm' }).click();
  return (await answer).status();
}

function releaseSection(page: Page) {
  return page.locator(`section.release[data-release="${RELEASE}"]`);
}

beforeAll(async () => {
  expect((await runCli(['migrate'], env)).code).toBe(0);
  await createExampleSchema(db.pool);
  await seedOrders(db.pool, { perDay: 200, days: 31 });
  await submitAndPlan(env, RELEASE, '2025-07-01T00:00:00Z', '2025-08-01T00:00:00Z');
  // Seventeen days built by the builder itself, two failed, one running, the rest pending.
  for (const partition of await partitionIds(db.pool, RELEASE, [...Array(18).keys()].filter((i) => i !== 11))) {
    await buildPartition(db.pool, { release: RELEASE, partition, attempt: await claim(db.pool, RELEASE, partition) });
  }
  failed = await partitionIds(db.pool, RELEASE, [11, 21]);
  await fail(db.pool, RELEASE, failed[0]!, 'JOIN_FANOUT', { keys: [{ order_id: 1234 }], message: 'transform returned 2 rows for order_id 1234' });
  await fail(db.pool, RELEASE, failed[1]!, 'DEPENDENCY_CHANGED', { relation: 'public.tax_rates', message: 'tax_rates changed after it was pinned' });
  await claim(db.pool, RELEASE, (await partitionIds(db.pool, RELEASE, [18]))[0]!);
  await recordThrottleDecision(db.pool, RELEASE);
  await recordReconciliation(db.pool, RELEASE, failed[0]!, [1234]);
  await datasetWithFrontier(db.pool, 'payments', new Date(Date.now() - 4_000).toISOString());

  api = await startApi({ config: loadConfig(env), log: createLogger('api', 'silent'), port: 0 });
  const target = `${api.url}/status/releases/${encodeURIComponent(RELEASE)}/pause`;
  evil = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end(`<!doctype html><form id="f" method="post" action="${target}"><input name="reason" value="forged"></form><script>document.getElementById('f').submit()</script>`);
  });
  await new Promise<void>((resolve) => evil!.listen(0, '127.0.0.1', resolve));
  evilUrl = `http://127.0.0.1:${(evil.address() as AddressInfo).port}/`;
  browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
}, 120_000);
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(q);
});
afterAll(async () => {
  // Each one closed whatever happened to the others (or to beforeAll).
  const closing = await Promise.allSettled([
    browser?.close(),
    evil ? new Promise<void>((resolve) => evil!.close(() => resolve())) : undefined,
    api?.close(),
  ]);
  for (const c of closing) if (c.status === 'rejected') throw c.reason;
});

describe('Bull Board in a browser', () => {
  it('logs in with a token and lists the release’s queue', async () => {
    const page = await loggedIn(TOKENS.olga, '/admin/queues');
    await expect.poll(() => page.getByRole('link', { name: BOARD_QUEUE }).count()).toBeGreaterThan(0);
    await page.getByRole('link', { name: BOARD_QUEUE }).first().click();
    await page.waitForURL((u) => decodeURIComponent(u.pathname) === `/admin/queues/queue/${BOARD_QUEUE}`);
    await page.context().close();
  });

  it('pauses and resumes there as an operator pause in the registry, by the token’s subject', async () => {
    const page = await loggedIn(TOKENS.olga, '/admin/queues');
    await page.goto(`${api!.url}/admin/queues/queue/${encodeURIComponent(BOARD_QUEUE)}`);
    expect(await boardQueueAction(page, 'Pause')).toBe(200);
    expect(await flag()).toBe(true);
    expect(await queue.isPaused()).toBe(true);
    expect(await lastLog()).toMatchObject({ action: 'pause', principal: 'olga', detail: { operatorPaused: true, via: 'bull-board' } });

    expect(await boardQueueAction(page, 'Resume')).toBe(200);
    expect(await flag()).toBe(false);
    expect(await queue.isPaused()).toBe(false);
    expect(await lastLog()).toMatchObject({ action: 'resume', principal: 'olga', detail: { via: 'bull-board' } });
    await page.context().close();
  });
});

describe('the status page in a browser', () => {
  it('pauses and resumes from the page, each an operator pause by the token’s subject', async () => {
    const page = await loggedIn(TOKENS.olga, '/');
    const section = releaseSection(page);
    await section.getByLabel('reason to pause').fill('replica lag during the month-end close');
    await section.getByRole('button', { name: 'Pause' }).click();
    await page.waitForURL((u) => u.pathname === '/' && u.hash === '#release-orders-tax-fix_4');
    expect(await flag()).toBe(true);
    expect(await queue.isPaused()).toBe(true);
    expect(await lastLog()).toEqual({ action: 'pause', principal: 'olga', reason: 'replica lag during the month-end close', detail: { operatorPaused: true, via: 'status-page' } });
    // The page now says who paused it, and offers Resume, which needs a reason.
    await expect.poll(() => section.textContent()).toMatch(/paused \(operator\)paused by olga via status-page .* ago: replica lag during the month-end close/);
    await expect.poll(() => section.getByRole('button', { name: 'Pause' }).count()).toBe(0);

    await section.getByLabel('reason to resume').fill('close is done');
    await section.getByRole('button', { name: 'Resume' }).click();
    await waitFor('the release resumed', async () => !(await flag()));
    expect(await queue.isPaused()).toBe(false);
    expect(await lastLog()).toMatchObject({ action: 'resume', principal: 'olga', reason: 'close is done', detail: { via: 'status-page' } });
    await page.context().close();
  });

  it('shows a viewer the page without a pause or resume button', async () => {
    const page = await loggedIn(TOKENS.vera, '/');
    await expect.poll(() => releaseSection(page).count()).toBe(1);
    expect(await page.locator('header .who').textContent()).toMatch(/vera \(viewer\)/);
    expect(await page.getByRole('button').count()).toBe(0);
    expect(await page.locator('form').count()).toBe(0);
    await page.context().close();
  });

  it('refuses a form another origin makes the logged-in operator’s browser post, and changes nothing', async () => {
    const page = await loggedIn(TOKENS.olga, '/');
    const before = await logCount();
    const answer = page.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith('/pause'));
    await page.goto(evilUrl);
    const res = await answer;
    // 403 from the origin check: the cookie went along (same site), the Origin gave it away.
    expect(res.status()).toBe(403);
    expect((await res.request().allHeaders()).origin).toBe(new URL(evilUrl).origin);
    expect(JSON.parse(await res.text()).message).toMatch(/^refused: Origin "http:\/\/127\.0\.0\.1:\d+" is not this API's origin/);
    expect(await flag()).toBe(false);
    expect(await logCount()).toBe(before);
    await page.context().close();
  });

  it('draws the heatmap with the failed partitions in red, and a failed cell opens its evidence', async () => {
    const page = await loggedIn(TOKENS.vera, '/');
    const heatmap = releaseSection(page).locator('svg.heatmap');
    expect(await heatmap.locator('rect').count()).toBe(31);
    expect(await heatmap.locator('rect.b').count()).toBe(17);
    expect(await heatmap.locator('rect.r').count()).toBe(1);
    const red = heatmap.locator('a rect.f');
    expect(await red.count()).toBe(2);
    // Evaluated in the page, where getComputedStyle exists (this file is typed without the DOM).
    const fill = await red.first().evaluate((el) => (globalThis as any).getComputedStyle(el).fill as string);
    expect(fill).toBe('rgb(207, 34, 46)');
    await red.first().click();
    await page.waitForURL((u) => u.pathname === `/status/releases/${encodeURIComponent(RELEASE)}/partitions/${failed[0]}`);
    expect(await page.locator('.reason').textContent()).toBe('JOIN_FANOUT');
    expect(await page.locator('.evidence').textContent()).toMatch(/"message": "transform returned 2 rows for order_id 1234"/);
    await page.context().close();
  });

  it('saves a screenshot of the page as an operator sees it in reports/status-page.png', async () => {
    const page = await loggedIn(TOKENS.olga, '/');
    await expect.poll(() => releaseSection(page).locator('svg.heatmap rect').count()).toBe(31);
    mkdirSync(REPORTS, { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    const png = readFileSync(SCREENSHOT);
    expect(png.subarray(1, 4).toString('latin1')).toBe('PNG');
    // IHDR: the page's width in CSS pixels.
    expect(png.readUInt32BE(16)).toBe(1280);
    await page.context().close();
  });
});
