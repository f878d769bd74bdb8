// The HTTP API against the real Redis and PostgreSQL (SPEC "Parts" api row, "Identity and
// roles", invariant 14): tokens and roles, the data of `status --json`, operator verbs
// recorded with the token's subject, the login cookie, and Bull Board's pause as a registry
// operator pause that `status` shows and claims obey.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApi, type ApiServer } from '@genfill/api';
import { claimPartition } from '@genfill/builder';
import { loadConfig } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, firstGenerationRelease, workspace, writeRelease } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';

const db = await createTestDatabase('api');
const q = createTestQueues('api');
const TOKENS = { olga: 'operator-token-0123456789', vera: 'viewer-token-0123456789', abe: 'approver-token-0123456789' };
const env = {
  DATABASE_URL: db.url,
  REDIS_URL,
  GENFILL_QUEUE_PREFIX: q.prefix,
  GENFILL_LOG_LEVEL: 'silent',
  GENFILL_API_TOKENS: `olga:operator:${TOKENS.olga},vera:viewer:${TOKENS.vera},abe:approver:${TOKENS.abe}`,
};
const cli = (...args: string[]) => runCli(args, env);
const RELEASE = 'orders-api@1';
const BOARD_QUEUE = `release.${RELEASE}`;
const queue = q.queue(RELEASE);
const servers: ApiServer[] = [];
let api: ApiServer;

async function start(overrides: Record<string, string> = {}): Promise<ApiServer> {
  const server = await startApi({ config: loadConfig({ ...env, ...overrides }), log: createLogger('api', 'silent'), port: 0 });
  servers.push(server);
  return server;
}

interface Call {
  token?: string;
  cookie?: string;
  body?: unknown;
  accept?: string;
}

/**
 * With a cookie, the request also carries the API's own Origin, as the browser showing the
 * API's pages sends it (test/api-csrf.test.ts covers requests from other origins).
 */
async function call(method: string, path: string, o: Call = {}, server = api): Promise<{ status: number; body: any; headers: Headers }> {
  const headers: Record<string, string> = { accept: o.accept ?? 'application/json' };
  if (o.token) headers.authorization = `Bearer ${o.token}`;
  if (o.cookie) {
    headers.cookie = o.cookie;
    headers.origin = new URL(server.url).origin;
  }
  if (o.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${server.url}${path}`, { method, headers, body: o.body === undefined ? undefined : JSON.stringify(o.body), redirect: 'manual' });
  const text = await res.text();
  let body: any = text;
  if ((res.headers.get('content-type') ?? '').includes('json')) body = JSON.parse(text);
  return { status: res.status, body, headers: res.headers };
}

/** The token login a browser does; returns the Cookie header to send back. */
async function login(token: string): Promise<string> {
  const res = await fetch(`${api.url}/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ token }).toString(),
    redirect: 'manual',
  });
  expect(res.status).toBe(303);
  expect(res.headers.get('location')).toBe('/admin/queues');
  const cookie = res.headers.getSetCookie().find((c) => c.startsWith('genfill_session='));
  expect(cookie).toBeDefined();
  expect(cookie).toMatch(/; HttpOnly/);
  expect(cookie).toMatch(/; SameSite=Strict/);
  return cookie!.split(';')[0]!;
}

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
const flag = async (release = RELEASE) => (await one('SELECT operator_paused FROM genfill.releases WHERE id = $1', [release])).operator_paused as boolean;
const lastLog = (release = RELEASE) =>
  one('SELECT action, principal, reason, detail FROM genfill.release_log WHERE release = $1 ORDER BY id DESC LIMIT 1', [release]);
const logCount = async () => (await one('SELECT count(*)::int AS n FROM genfill.release_log')).n as number;

async function submit(id: string, from: string, to: string): Promise<void> {
  const r = firstGenerationRelease();
  r.release = id;
  r.range = { from, to };
  expect((await cli('release', 'submit', writeRelease(workspace(), r))).code).toBe(0);
}

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
  await submit(RELEASE, '2025-07-01T00:00:00Z', '2025-07-11T00:00:00Z');
  expect((await cli('plan', RELEASE)).code).toBe(0);
  expect(await queue.getJobCounts('waiting')).toEqual({ waiting: 10 });
  api = await start();
});
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(q);
});
afterAll(async () => {
  for (const s of servers) await s.close();
});

describe('tokens and roles', () => {
  it('refuses a request without a token, or with an unknown one, with 401', async () => {
    const none = await call('GET', '/releases');
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toMatch(/^Bearer/);
    expect(none.body).toMatchObject({ error: 'UnauthenticatedError', message: expect.stringMatching(/Bearer/) });
    expect((await call('GET', '/releases', { token: 'not-a-token-0123456789' })).status).toBe(401);
    expect((await call('POST', `/releases/${RELEASE}/pause`)).status).toBe(401);
  });

  it('lets a viewer read what `status --json` shows, the list and one release', async () => {
    const list = await call('GET', '/releases', { token: TOKENS.vera });
    expect(list.status).toBe(200);
    expect(list.body).toEqual(JSON.parse((await cli('status', '--json')).stdout));
    const one = await call('GET', `/releases/${encodeURIComponent(RELEASE)}`, { token: TOKENS.vera });
    expect(one.status).toBe(200);
    expect(one.body).toEqual(JSON.parse((await cli('status', RELEASE, '--json')).stdout));
    expect(one.body).toMatchObject({ release: RELEASE, state: 'BUILDING', paused: { operator: false } });
    expect(one.body.partitions).toBeUndefined();
    // The partitions, one page of them, as `--partitions` lists them.
    const page = await call('GET', `/releases/${encodeURIComponent(RELEASE)}?partitions=PENDING&page=2&pageSize=4`, { token: TOKENS.vera });
    expect(page.status).toBe(200);
    expect(page.body).toEqual(JSON.parse((await cli('status', RELEASE, '--json', '--partitions', 'PENDING', '--page', '2', '--page-size', '4')).stdout));
    expect(page.body.page).toEqual({ number: 2, size: 4, total: 10, pages: 3, status: 'PENDING' });
    expect(page.body.partitions.map((p: { seq: number; status: string }) => [p.seq, p.status])).toEqual([[4, 'PENDING'], [5, 'PENDING'], [6, 'PENDING'], [7, 'PENDING']]);
    const bad = await call('GET', `/releases/${encodeURIComponent(RELEASE)}?partitions=DONE&pageSize=20000`, { token: TOKENS.vera });
    expect(bad.status).toBe(400);
    expect(bad.body.message).toMatch(/query\.partitions: expected one of PENDING, RUNNING, BUILT, FAILED or all, got 'DONE'\nquery\.pageSize: expected a whole number from 1 to 10,000/);
  });

  it('refuses to start when one token is given to two subjects: who did it would be a guess', async () => {
    await expect(start({ GENFILL_API_TOKENS: `olga:operator:${TOKENS.olga},otto:viewer:${TOKENS.olga}` })).rejects.toMatchObject({
      name: 'ConfigError',
      message: expect.stringMatching(/GENFILL_API_TOKENS: the same token is given to olga and otto/),
    });
  });

  it('answers 404 for an unknown release and 400 for an id no release can have', async () => {
    const unknown = await call('GET', '/releases/no-such-release', { token: TOKENS.vera });
    expect(unknown.status).toBe(404);
    expect(unknown.body).toMatchObject({ error: 'NotFoundError', message: expect.stringMatching(/release no-such-release does not exist/) });
    const bad = await call('GET', `/releases/${encodeURIComponent('a:b')}`, { token: TOKENS.vera });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toBe('InvalidInputError');
  });

  it('forbids a viewer and an approver to pause (403) and writes nothing', async () => {
    const before = await logCount();
    for (const token of [TOKENS.vera, TOKENS.abe]) {
      const res = await call('POST', `/releases/${RELEASE}/pause`, { token, body: { reason: 'x' } });
      expect(res.status).toBe(403);
      expect(res.body).toMatchObject({ error: 'ForbiddenError', message: expect.stringMatching(/cannot operate: this needs an operator token/) });
    }
    expect(await flag()).toBe(false);
    expect(await logCount()).toBe(before);
  });

  it('lets an operator pause and resume, recording the token subject as principal, not the database login', async () => {
    const res = await call('POST', `/releases/${RELEASE}/pause`, { token: TOKENS.olga, body: { reason: 'replica lag at month end' } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ release: RELEASE, state: 'BUILDING', paused: true, changed: true, principal: 'olga', queue: { paused: true }, warning: null });
    expect(await flag()).toBe(true);
    expect(await queue.isPaused()).toBe(true);
    expect(await lastLog()).toEqual({ action: 'pause', principal: 'olga', reason: 'replica lag at month end', detail: { operatorPaused: true, via: 'api' } });

    const again = await call('POST', `/releases/${RELEASE}/pause`, { token: TOKENS.olga });
    expect(again.body).toMatchObject({ changed: false, paused: true });

    const resumed = await call('POST', `/releases/${RELEASE}/resume`, { token: TOKENS.olga });
    expect(resumed.status).toBe(200);
    expect(await flag()).toBe(false);
    expect(await queue.isPaused()).toBe(false);
    expect(await lastLog()).toMatchObject({ action: 'resume', principal: 'olga', reason: null });
  });

  it('refuses a malformed body with 400 and writes nothing', async () => {
    const before = await logCount();
    const extra = await call('POST', `/releases/${RELEASE}/pause`, { token: TOKENS.olga, body: { reason: 'x', force: true } });
    expect(extra.status).toBe(400);
    expect(extra.body).toMatchObject({ error: 'InvalidInputError', problems: [{ path: 'body', message: expect.any(String) }] });
    const notJson = await fetch(`${api.url}/releases/${RELEASE}/pause`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKENS.olga}`, 'content-type': 'text/plain' },
      body: 'because',
    });
    expect(notJson.status).toBe(400);
    const broken = await fetch(`${api.url}/releases/${RELEASE}/pause`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKENS.olga}`, 'content-type': 'application/json' },
      body: '{"reason":',
    });
    expect(broken.status).toBe(400);
    expect(await flag()).toBe(false);
    expect(await logCount()).toBe(before);
  });

  it('cancels with the subject as principal, then refuses a second cancel (409) and an unknown release (404)', async () => {
    await submit('orders-api-draft@1', '2026-01-01T00:00:00Z', '2026-01-05T00:00:00Z');
    const res = await call('POST', '/releases/orders-api-draft@1/cancel', { token: TOKENS.olga, body: { reason: 'superseded' } });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ release: 'orders-api-draft@1', from: 'DRAFT', state: 'CANCELLED', principal: 'olga' });
    expect(await lastLog('orders-api-draft@1')).toMatchObject({ action: 'cancel', principal: 'olga', reason: 'superseded', detail: { via: 'api' } });
    const again = await call('POST', '/releases/orders-api-draft@1/cancel', { token: TOKENS.olga });
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ error: 'RefusedError', message: expect.stringMatching(/already CANCELLED/) });
    const unknown = await call('POST', '/releases/no-such-release/cancel', { token: TOKENS.olga });
    expect(unknown.status).toBe(404);
  });
});

describe('the login cookie and Bull Board', () => {
  it('sends a browser without a session to the login form, and 401s the board API', async () => {
    const page = await call('GET', '/admin/queues', { accept: 'text/html' });
    expect(page.status).toBe(303);
    expect(page.headers.get('location')).toBe('/login');
    const form = await call('GET', '/login', { accept: 'text/html' });
    expect(form.status).toBe(200);
    expect(form.body).toMatch(/<form method="post" action="\/login">/);
    expect((await call('GET', '/admin/queues/api/queues')).status).toBe(401);
  });

  it('refuses a login with an unknown token', async () => {
    const res = await fetch(`${api.url}/login`, { method: 'POST', body: new URLSearchParams({ token: 'wrong-token-0123456789' }), redirect: 'manual' });
    expect(res.status).toBe(401);
    expect(res.headers.getSetCookie()).toEqual([]);
  });

  it('serves Bull Board to a logged-in browser, read-only for a viewer and writable for an operator', async () => {
    const viewer = await login(TOKENS.vera);
    const page = await call('GET', '/admin/queues', { cookie: viewer, accept: 'text/html' });
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
    expect(page.body).toMatch(/<base href="\/admin\/queues\/"/);
    const ro = await call('GET', '/admin/queues/api/queues', { cookie: viewer });
    expect(ro.status).toBe(200);
    expect(ro.body.queues.find((x: any) => x.name === BOARD_QUEUE)).toMatchObject({ readOnlyMode: true, counts: { waiting: 10 } });

    const operator = await login(TOKENS.olga);
    const rw = await call('GET', '/admin/queues/api/queues', { cookie: operator });
    expect(rw.body.queues.find((x: any) => x.name === BOARD_QUEUE)).toMatchObject({ readOnlyMode: false });
    // A cancelled release's queue is gone from the board.
    expect(rw.body.queues.map((x: any) => x.name)).not.toContain('release.orders-api-draft@1');
  });

  it("refuses a viewer's Bull Board pause with 403 and leaves flag and queue alone", async () => {
    const viewer = await login(TOKENS.vera);
    const before = await logCount();
    const res = await call('PUT', `/admin/queues/api/queues/${encodeURIComponent(BOARD_QUEUE)}/pause`, { cookie: viewer });
    expect(res.status).toBe(403);
    expect(res.body.message).toMatch(/cannot operate: this needs an operator token/);
    expect((await call('PUT', '/admin/queues/api/queues/pause', { cookie: viewer })).status).toBe(403);
    expect((await call('PUT', `/admin/queues/api/queues/${encodeURIComponent(BOARD_QUEUE)}/empty`, { cookie: viewer })).status).toBe(403);
    expect(await flag()).toBe(false);
    expect(await queue.isPaused()).toBe(false);
    expect(await logCount()).toBe(before);
  });

  it("records an operator's Bull Board pause in the registry: status shows it and claims stop", async () => {
    const operator = await login(TOKENS.olga);
    const res = await call('PUT', `/admin/queues/api/queues/${encodeURIComponent(BOARD_QUEUE)}/pause`, { cookie: operator });
    expect(res.status).toBe(200);
    expect(await queue.isPaused()).toBe(true);

    const status = JSON.parse((await cli('status', RELEASE, '--json')).stdout);
    expect(status.paused).toEqual({ operator: true, throttle: false });
    expect(status.history.at(-1)).toMatchObject({ action: 'pause', principal: 'olga', detail: { operatorPaused: true, via: 'bull-board' } });

    const { id } = await one(`SELECT id FROM genfill.partitions WHERE release = $1 AND status = 'PENDING' ORDER BY seq LIMIT 1`, [RELEASE]);
    const before = await one('SELECT attempt, status FROM genfill.partitions WHERE id = $1', [id]);
    const claim = await claimPartition(db.pool, { release: RELEASE, partition: id, worker: 'test', leaseMs: 10_000 });
    expect(claim).toEqual({ kind: 'refused', reason: 'operator_paused', retryInMs: expect.any(Number) });
    expect(await one('SELECT attempt, status FROM genfill.partitions WHERE id = $1', [id])).toEqual(before);

    const resumed = await call('PUT', `/admin/queues/api/queues/${encodeURIComponent(BOARD_QUEUE)}/resume`, { cookie: operator });
    expect(resumed.status).toBe(200);
    expect(await flag()).toBe(false);
    expect(await queue.isPaused()).toBe(false);
    expect(await lastLog()).toMatchObject({ action: 'resume', principal: 'olga', detail: { via: 'bull-board' } });
  });

  it("records Bull Board's pause-all per open release and mirrors it on each queue", async () => {
    const operator = await login(TOKENS.olga);
    expect((await call('PUT', '/admin/queues/api/queues/pause', { cookie: operator })).status).toBe(200);
    expect(await flag()).toBe(true);
    expect(await queue.isPaused()).toBe(true);
    expect(await lastLog()).toMatchObject({ action: 'pause', principal: 'olga' });
    expect((await call('PUT', '/admin/queues/api/queues/resume', { cookie: operator })).status).toBe(200);
    expect(await flag()).toBe(false);
    expect(await queue.isPaused()).toBe(false);
  });

  it('lets the cookie work like the token on the JSON routes, and ends it on logout', async () => {
    const viewer = await login(TOKENS.vera);
    expect((await call('GET', '/releases', { cookie: viewer })).status).toBe(200);
    const refused = await call('POST', `/releases/${RELEASE}/pause`, { cookie: viewer });
    expect(refused.status).toBe(403);
    expect(refused.body.message).toMatch(/cannot operate: this needs an operator token/);
    const out = await call('GET', '/logout', { cookie: viewer, accept: 'text/html' });
    expect(out.status).toBe(303);
    expect((await call('GET', '/releases', { cookie: viewer })).status).toBe(401);
  });
});

describe('/healthz', () => {
  it('answers 200 with each check when PostgreSQL, the schema and Redis are fine', async () => {
    const res = await call('GET', '/healthz');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      status: 'ok',
      failed: [],
      checks: { postgres: { ok: true }, migrations: { ok: true }, redis: { ok: true } },
    });
  });

  it('answers 503 naming Redis when Redis cannot be reached, and still serves the registry', async () => {
    const down = await start({ REDIS_URL: 'redis://127.0.0.1:1' });
    const res = await call('GET', '/healthz', {}, down);
    expect(res.status).toBe(503);
    expect(res.body).toMatchObject({ status: 'unavailable', failed: ['redis'], checks: { postgres: { ok: true }, redis: { ok: false, error: expect.any(String) } } });
    expect((await call('GET', '/releases', { token: TOKENS.vera }, down)).status).toBe(200);
    // The flag is the truth; the queue mirror waits for Redis and says so.
    const paused = await call('POST', `/releases/${RELEASE}/pause`, { token: TOKENS.olga }, down);
    expect(paused.status).toBe(200);
    expect(paused.body).toMatchObject({ paused: true, changed: true, queue: null, warning: expect.stringMatching(/Redis/) });
    expect((await call('POST', `/releases/${RELEASE}/resume`, { token: TOKENS.olga })).status).toBe(200);
  });
});
