// The status page at the API's `/` over HTTP, against the real Redis and PostgreSQL (issue 21):
// what it shows, that it stays small for a 87,672-partition manifest, its links to evidence
// and findings, and its pause/resume forms — the registry verb with the token's subject, an
// operator's only, refused from another origin. test/status-browser.test.ts drives the same
// page and Bull Board in Chromium.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApi, type ApiServer } from '@genfill/api';
import { loadConfig } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema } from './support/fixtures.ts';
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

const db = await createTestDatabase('status_page');
const q = createTestQueues('status-page');
const env = { DATABASE_URL: db.url, REDIS_URL, GENFILL_QUEUE_PREFIX: q.prefix, GENFILL_LOG_LEVEL: 'silent', GENFILL_API_TOKENS: API_TOKENS };
const RELEASE = 'orders-status@1';
const BIG = 'orders-hourly@1';
/** 2016-01-01 to 2026-01-01 hourly: 3,653 days of 24 hours. */
const BIG_PARTITIONS = 87_672;
const EVIL = 'https://evil.example';
/** Three hours ago, in whole seconds as the page shows instants. */
const FRONTIER_AT = new Date(Math.floor(Date.now() / 1000) * 1000 - 3 * 3_600_000).toISOString().replace('.000Z', 'Z');
const queue = q.queue(RELEASE);
let api: ApiServer | undefined;
let failed: string[];
let running: string;
let bigFailed: string;
let reconciliation: string;

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
const flag = async () => (await one('SELECT operator_paused FROM genfill.releases WHERE id = $1', [RELEASE])).operator_paused as boolean;
const lastLog = () => one('SELECT action, principal, reason, detail FROM genfill.release_log WHERE release = $1 ORDER BY id DESC LIMIT 1', [RELEASE]);
const logCount = async () => (await one('SELECT count(*)::int AS n FROM genfill.release_log')).n as number;

async function get(path: string, o: { token?: string; cookie?: string; accept?: string } = {}): Promise<{ status: number; text: string; headers: Headers }> {
  const headers: Record<string, string> = { accept: o.accept ?? 'text/html' };
  if (o.token) headers.authorization = `Bearer ${o.token}`;
  if (o.cookie) headers.cookie = o.cookie;
  const res = await fetch(`${api!.url}${path}`, { headers, redirect: 'manual' });
  return { status: res.status, text: await res.text(), headers: res.headers };
}

/** A form POST as a browser sends it: the cookie, urlencoded fields and the page's Origin. */
async function post(path: string, cookie: string, fields: Record<string, string>, origin = new URL(api!.url).origin) {
  const res = await fetch(`${api!.url}${path}`, {
    method: 'POST',
    headers: { cookie, origin, accept: 'text/html', 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(fields).toString(),
    redirect: 'manual',
  });
  return { status: res.status, text: await res.text(), location: res.headers.get('location') };
}

async function login(token: string, next?: string): Promise<{ cookie: string; location: string | null }> {
  const res = await fetch(`${api!.url}/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams(next ? { token, next } : { token }).toString(),
    redirect: 'manual',
  });
  expect(res.status).toBe(303);
  const cookie = res.headers.getSetCookie().find((c) => c.startsWith('genfill_session='))!;
  return { cookie: cookie.split(';')[0]!, location: res.headers.get('location') };
}

/** The HTML of one release's section of the page. */
function section(html: string, release: string): string {
  const m = new RegExp(`<section class="release"[^>]*data-release="${release.replace(/[.@+]/g, '\\$&')}">([\\s\\S]*?)</section>`).exec(html);
  expect(m, `section of ${release}`).not.toBeNull();
  return m![1]!;
}

const svgOf = (html: string) => /<svg class="heatmap" data-level="(\w+)" data-cells="(\d+)"[^>]*>([\s\S]*?)<\/svg>/.exec(html)!;
const count = (html: string, re: RegExp) => (html.match(re) ?? []).length;

beforeAll(async () => {
  expect((await runCli(['migrate'], env)).code).toBe(0);
  await createExampleSchema(db.pool);
  await submitAndPlan(env, RELEASE, '2026-01-01T00:00:00Z', '2026-01-11T00:00:00Z');
  failed = await partitionIds(db.pool, RELEASE, [2, 6]);
  await fail(db.pool, RELEASE, failed[0]!, 'JOIN_FANOUT', { keys: [{ order_id: 42 }, { order_id: 43 }], message: 'transform returned 2 rows for one key' });
  await fail(db.pool, RELEASE, failed[1]!, 'DEPENDENCY_CHANGED', { relation: 'public.tax_rates', pinned: '123', now: '456' });
  running = (await partitionIds(db.pool, RELEASE, [4]))[0]!;
  await claim(db.pool, RELEASE, running);
  await recordThrottleDecision(db.pool, RELEASE);
  reconciliation = await recordReconciliation(db.pool, RELEASE, failed[0]!, [42, 43, 44]);
  await datasetWithFrontier(db.pool, 'payments', FRONTIER_AT);

  await submitAndPlan(env, BIG, '2016-01-01T00:00:00Z', '2026-01-01T00:00:00Z', 'PT1H', 'orders_big');
  bigFailed = (await partitionIds(db.pool, BIG, [50_000]))[0]!;
  await fail(db.pool, BIG, bigFailed, 'TRANSFORM_ERROR', { message: 'division by zero' });

  api = await startApi({ config: loadConfig(env), log: createLogger('api', 'silent'), port: 0 });
  // Planning 87,672 partitions is most of this; a busy CI machine needs more than the default hook timeout.
}, 240_000);
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(q);
});
afterAll(async () => {
  await api?.close();
});

describe('the status page', () => {
  it('sends a browser without a session to the login form, which leads back to the page; a script gets 401', async () => {
    const page = await get('/');
    expect(page.status).toBe(303);
    expect(page.headers.get('location')).toBe('/login?next=%2F');
    const form = await get('/login?next=%2F');
    expect(form.text).toMatch(/<input type="hidden" name="next" value="\/">/);
    expect((await login(TOKENS.vera, '/')).location).toBe('/');
    // Only the API's own pages: no open redirect.
    expect((await login(TOKENS.vera, 'https://evil.example/')).location).toBe('/admin/queues');
    expect((await get('/', { accept: 'application/json' })).status).toBe(401);
  });

  it('lists releases with state, progress, pause flags and the throttle decision, and the projector lag per dataset', async () => {
    const page = await get('/', { token: TOKENS.vera });
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toMatch(/script-src 'nonce-[^']+'/);
    expect(page.text).toMatch(/http-equiv="refresh" content="15"/);
    const row = new RegExp(`<tr data-release="${RELEASE}">.*?</tr>`).exec(page.text)![0];
    expect(row).toMatch(/<td class="state">BUILDING<\/td>/);
    expect(row).toMatch(/0 \/ 10 built \(0\.0%\), 1 running, <span class="bad">2 failed<\/span>/);
    expect(row).toMatch(/<td>not paused<\/td>/);
    expect(row).toMatch(/hold; binding: <strong>replicaLag<\/strong> at 0\.84× budget/);
    expect(page.text).toMatch(new RegExp(`<tr data-release="${BIG}">.*0 / 87,672 built`));
    // orders_new's first generation is not active yet; payments' projector committed a frontier.
    expect(page.text).toMatch(/<tr data-dataset="orders_new">.*<td class="lag"><span class="muted">no projector yet<\/span><\/td>/);
    expect(page.text).toMatch(new RegExp(`<tr data-dataset="payments">.*<td class="lag">0 events pending, oldest 0.0 s; frontier committed \\d+h\\d\\dm ago <span class="muted">\\(${FRONTIER_AT}\\)</span>`));
  });

  it('draws one cell per partition: failed ones link to their evidence, the running one shows its attempt', async () => {
    const html = section((await get('/', { token: TOKENS.vera })).text, RELEASE);
    const [, level, cells, svg] = svgOf(html);
    expect(level).toBe('partition');
    expect(Number(cells)).toBe(10);
    expect(count(svg!, /<rect /g)).toBe(10);
    expect(count(svg!, /class="f"/g)).toBe(2);
    for (const id of failed) {
      expect(svg).toMatch(new RegExp(`<a href="/status/releases/${encodeURIComponent(RELEASE)}/partitions/${id}"><rect [^>]*class="f"><title>${id} [^<]*: failed \\(`));
    }
    expect(svg).toMatch(new RegExp(`<title>${running} [^<]*: running, attempt 1</title></rect><text class="a"[^>]*>1</text>`));
    expect(html).toMatch(/Latest decision .* ago: <strong>hold<\/strong>, binding signal <strong>replicaLag<\/strong> \(0\.84× its budget\); concurrency 4/);
  });

  it("shows a failed partition's reason, evidence and log, and a page saying so for an unknown one", async () => {
    const page = await get(`/status/releases/${encodeURIComponent(RELEASE)}/partitions/${failed[0]}`, { token: TOKENS.vera });
    expect(page.status).toBe(200);
    expect(page.text).toMatch(/<strong class="reason">JOIN_FANOUT<\/strong>/);
    expect(page.text).toMatch(/&quot;message&quot;: &quot;transform returned 2 rows for one key&quot;/);
    expect(page.text).toMatch(/<td>partition-failed<\/td><td>postgres<\/td><td>JOIN_FANOUT<\/td>/);
    const unknown = await get(`/status/releases/${encodeURIComponent(RELEASE)}/partitions/nope`, { token: TOKENS.vera });
    expect(unknown.status).toBe(404);
    expect(unknown.text).toMatch(/release orders-status@1 has no partition nope/);
  });

  it('stays small for a 87,672-partition manifest: weekly cells, the failed week linking to its partition', async () => {
    expect((await one('SELECT count(*)::int AS n FROM genfill.partitions WHERE release = $1', [BIG])).n).toBe(BIG_PARTITIONS);
    const page = await get('/', { token: TOKENS.vera });
    const html = section(page.text, BIG);
    const [, level, cells, svg] = svgOf(html);
    expect(level).toBe('week');
    // 2016-01-01 is a Friday: its week starts in 2015, and 2026-01-01's week is not in the range.
    expect(Number(cells)).toBe(523);
    expect(count(svg!, /<rect /g)).toBe(523);
    expect(count(svg!, /class="f"/g)).toBe(1);
    expect(svg).toMatch(new RegExp(`<a href="/status/releases/${encodeURIComponent(BIG)}/partitions/${bigFailed}"><rect [^>]*class="f"><title>week of [^<]*: 168 partitions, 0 built, 0 running, 1 failed, 167 pending; first failed ${bigFailed}</title>`));
    expect(html).toMatch(/87,672 partitions, weekly cells \(523\) in UTC/);
    // The whole page, both heatmaps included, stays a small document.
    expect(Buffer.byteLength(page.text)).toBeLessThan(200_000);
  });

  it('summarises the latest reconciliation and links its complete findings as NDJSON', async () => {
    const html = section((await get('/', { token: TOKENS.vera })).text, RELEASE);
    expect(html).toMatch(new RegExp(`Reconciliation #${reconciliation}: <span class="bad">RECONCILIATION_REQUIRED</span>, <a class="findings" href="/status/reconciliations/${reconciliation}/findings">3 finding\\(s\\) \\(NDJSON\\)</a>; rows: 1,000 source, 997 stored`));
    const findings = await get(`/status/reconciliations/${reconciliation}/findings`, { token: TOKENS.vera, accept: '*/*' });
    expect(findings.status).toBe(200);
    const lines = findings.text.trim().split('\n').map((l) => JSON.parse(l));
    expect(lines).toEqual([42, 43, 44].map((k) => expect.objectContaining({ partition: failed[0], key: { order_id: k }, kind: 'missing', check: 'old_generation' })));
    expect((await get('/status/reconciliations/999999/findings', { token: TOKENS.vera, accept: 'application/json' })).status).toBe(404);
  });
});

describe('operator actions on the page', () => {
  it('gives an operator pause and resume forms that go through the registry verb as the token subject', async () => {
    const { cookie } = await login(TOKENS.olga);
    const html = section((await get('/', { cookie })).text, RELEASE);
    expect(html).toMatch(new RegExp(`<form class="act" method="post" action="/status/releases/${encodeURIComponent(RELEASE)}/pause">`));

    const paused = await post(`/status/releases/${encodeURIComponent(RELEASE)}/pause`, cookie, { reason: 'month-end close' });
    expect(paused.status).toBe(303);
    expect(paused.location).toBe('/#release-orders-status_1');
    expect(await flag()).toBe(true);
    expect(await queue.isPaused()).toBe(true);
    expect(await lastLog()).toEqual({ action: 'pause', principal: 'olga', reason: 'month-end close', detail: { operatorPaused: true, via: 'status-page' } });
    const after = section((await get('/', { cookie })).text, RELEASE);
    expect(after).toMatch(/paused \(<span class="paused">operator<\/span>\)<br><span class="muted"[^>]*>paused by olga via status-page .* ago: month-end close/);
    expect(after).toMatch(/action="\/status\/releases\/[^"]*\/resume"><input type="text" name="reason"[^>]* required/);

    // Resuming needs a reason: refused, and nothing written.
    const before = await logCount();
    const bare = await post(`/status/releases/${encodeURIComponent(RELEASE)}/resume`, cookie, { reason: '  ' });
    expect(bare.status).toBe(400);
    expect(bare.text).toMatch(/say why the release may build again/);
    expect(await flag()).toBe(true);
    expect(await logCount()).toBe(before);

    const resumed = await post(`/status/releases/${encodeURIComponent(RELEASE)}/resume`, cookie, { reason: 'close is done' });
    expect(resumed.status).toBe(303);
    expect(await flag()).toBe(false);
    expect(await queue.isPaused()).toBe(false);
    expect(await lastLog()).toMatchObject({ action: 'resume', principal: 'olga', reason: 'close is done', detail: { via: 'status-page' } });
  });

  it('gives a viewer no forms, and refuses a viewer’s POST (403) and a forged cross-origin one (403), writing nothing', async () => {
    const viewer = (await login(TOKENS.vera)).cookie;
    const page = (await get('/', { cookie: viewer })).text;
    expect(page).toMatch(/vera \(viewer\)/);
    expect(page).not.toMatch(/<form/);
    const before = await logCount();
    const refused = await post(`/status/releases/${encodeURIComponent(RELEASE)}/pause`, viewer, {});
    expect(refused.status).toBe(403);
    expect(refused.text).toMatch(/vera has role viewer, which cannot operate/);

    const operator = (await login(TOKENS.olga)).cookie;
    const forged = await post(`/status/releases/${encodeURIComponent(RELEASE)}/pause`, operator, { reason: 'x' }, EVIL);
    expect(forged.status).toBe(403);
    expect(JSON.parse(forged.text).message).toMatch(/^refused: Origin "https:\/\/evil\.example" is not this API's origin/);
    expect(await flag()).toBe(false);
    expect(await logCount()).toBe(before);
  });
});
