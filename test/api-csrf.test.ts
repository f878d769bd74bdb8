// The login cookie's CSRF defence (issue 13, finding 5): SameSite=Strict lets a sibling
// subdomain's form send the cookie, so a state change authenticated by the cookie must carry
// the API's own Origin (or, without Origin, a Referer from its pages). A real API server, a
// real login, and the registry checked after each refusal: nothing may have changed.
// GENFILL_API_TRUST_PROXY decides whether X-Forwarded-Proto/-Host count for the own origin
// and for the cookie's Secure flag.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApi, type ApiServer } from '@genfill/api';
import { loadConfig } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, firstGenerationRelease, workspace, writeRelease } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';

const db = await createTestDatabase('api-csrf');
const q = createTestQueues('api-csrf');
const OLGA = 'operator-token-0123456789';
const env = {
  DATABASE_URL: db.url,
  REDIS_URL,
  GENFILL_QUEUE_PREFIX: q.prefix,
  GENFILL_LOG_LEVEL: 'silent',
  GENFILL_API_TOKENS: `olga:operator:${OLGA}`,
};
const RELEASE = 'orders-csrf@1';
const DRAFT = 'orders-csrf-draft@1';
const BOARD_QUEUE = `release.${RELEASE}`;
const queue = q.queue(RELEASE);
const EVIL = 'https://evil.example';
const servers: ApiServer[] = [];
let api: ApiServer;

async function start(overrides: Record<string, string> = {}): Promise<ApiServer> {
  const server = await startApi({ config: loadConfig({ ...env, ...overrides }), log: createLogger('api', 'silent'), port: 0 });
  servers.push(server);
  return server;
}

/** A browser's token login; the Set-Cookie line as sent, and the Cookie header to send back. */
async function login(server: ApiServer, headers: Record<string, string> = {}): Promise<{ setCookie: string; cookie: string }> {
  const res = await fetch(`${server.url}/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams({ token: OLGA }).toString(),
    redirect: 'manual',
  });
  expect(res.status).toBe(303);
  const setCookie = res.headers.getSetCookie().find((c) => c.startsWith('genfill_session='));
  expect(setCookie).toBeDefined();
  return { setCookie: setCookie!, cookie: setCookie!.split(';')[0]! };
}

/** A request as a browser (or a script) sends it: only the headers given, an empty body by default. */
async function send(method: string, path: string, headers: Record<string, string>, server = api): Promise<{ status: number; body: any }> {
  const res = await fetch(`${server.url}${path}`, { method, headers: { accept: 'application/json', ...headers }, redirect: 'manual' });
  const text = await res.text();
  return { status: res.status, body: (res.headers.get('content-type') ?? '').includes('json') ? JSON.parse(text) : text };
}

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
const flag = async () => (await one('SELECT operator_paused FROM genfill.releases WHERE id = $1', [RELEASE])).operator_paused as boolean;
const stateOf = async (release: string) => (await one('SELECT state FROM genfill.releases WHERE id = $1', [release])).state as string;
const logCount = async () => (await one('SELECT count(*)::int AS n FROM genfill.release_log')).n as number;
const lastLog = () => one('SELECT action, principal, detail FROM genfill.release_log WHERE release = $1 ORDER BY id DESC LIMIT 1', [RELEASE]);

/** Nothing a refused request could have touched has moved. */
async function unchanged(before: number): Promise<void> {
  expect(await flag()).toBe(false);
  expect(await queue.isPaused()).toBe(false);
  expect(await stateOf(DRAFT)).toBe('DRAFT');
  expect(await logCount()).toBe(before);
}

async function submit(id: string, from: string, to: string): Promise<void> {
  const r = firstGenerationRelease();
  r.release = id;
  r.range = { from, to };
  expect((await runCli(['release', 'submit', writeRelease(workspace(), r)], env)).code).toBe(0);
}

let cookie: string;
let own: string;

beforeAll(async () => {
  expect((await runCli(['migrate'], env)).code).toBe(0);
  await createExampleSchema(db.pool);
  await submit(RELEASE, '2025-07-01T00:00:00Z', '2025-07-05T00:00:00Z');
  await submit(DRAFT, '2026-01-01T00:00:00Z', '2026-01-03T00:00:00Z');
  expect((await runCli(['plan', RELEASE], env)).code).toBe(0);
  api = await start();
  own = new URL(api.url).origin;
  ({ cookie } = await login(api));
});
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(q);
});
afterAll(async () => {
  for (const s of servers) await s.close();
});

describe('a state change made with the login cookie needs the API’s own origin', () => {
  it('refuses a cookie POST from another origin with 403 and changes nothing', async () => {
    const before = await logCount();
    // The attack: an empty form POST that would cancel a release, and a pause.
    const form = { cookie, origin: EVIL, 'content-type': 'application/x-www-form-urlencoded' };
    for (const path of [`/releases/${DRAFT}/cancel`, `/releases/${RELEASE}/pause`]) {
      const res = await send('POST', path, form);
      expect(res.status).toBe(403);
      expect(res.body).toEqual({
        error: 'ForbiddenError',
        message: expect.stringMatching(/^refused: Origin "https:\/\/evil\.example" is not this API's origin http:\/\/127\.0\.0\.1:\d+\. .*Authorization: Bearer .*GENFILL_API_TRUST_PROXY/),
      });
    }
    // Same site, other origin (what a sibling subdomain is), and the opaque origin of a sandbox.
    const otherPort = `http://127.0.0.1:${api.port === 1 ? 2 : api.port - 1}`;
    for (const origin of [otherPort, `https://127.0.0.1:${api.port}`, 'null']) {
      expect((await send('POST', `/releases/${RELEASE}/pause`, { cookie, origin })).status).toBe(403);
    }
    await unchanged(before);
  });

  it('refuses a cookie POST without Origin whose Referer is another site, and one with neither', async () => {
    const before = await logCount();
    const viaReferer = await send('POST', `/releases/${RELEASE}/pause`, { cookie, referer: `${EVIL}/admin/queues/` });
    expect(viaReferer.status).toBe(403);
    expect(viaReferer.body.message).toMatch(/^refused: Referer "https:\/\/evil\.example\/admin\/queues\/" is not this API's origin/);
    const bare = await send('POST', `/releases/${RELEASE}/pause`, { cookie });
    expect(bare.status).toBe(403);
    expect(bare.body).toMatchObject({ error: 'ForbiddenError', message: expect.stringMatching(/^refused: the request carries neither Origin nor Referer/) });
    // Origin decides when it is there, even if the Referer would have matched.
    expect((await send('POST', `/releases/${RELEASE}/pause`, { cookie, origin: EVIL, referer: `${own}/admin/queues/` })).status).toBe(403);
    await unchanged(before);
  });

  it('accepts a cookie POST from the API’s own origin, or without Origin from its own pages’ Referer', async () => {
    const paused = await send('POST', `/releases/${RELEASE}/pause`, { cookie, origin: own });
    expect(paused.status).toBe(200);
    expect(paused.body).toMatchObject({ release: RELEASE, paused: true, changed: true, principal: 'olga' });
    expect(await flag()).toBe(true);
    expect(await lastLog()).toMatchObject({ action: 'pause', principal: 'olga', detail: { via: 'api' } });

    const resumed = await send('POST', `/releases/${RELEASE}/resume`, { cookie, referer: `${own}/admin/queues/` });
    expect(resumed.status).toBe(200);
    expect(await flag()).toBe(false);
    expect(await lastLog()).toMatchObject({ action: 'resume', principal: 'olga' });
  });

  it('lets reads through from anywhere: a GET changes nothing', async () => {
    const res = await send('GET', `/releases/${RELEASE}`, { cookie, origin: EVIL });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ release: RELEASE, paused: { operator: false } });
  });

  it('leaves bearer requests alone: a script sends no Origin', async () => {
    const paused = await send('POST', `/releases/${RELEASE}/pause`, { authorization: `Bearer ${OLGA}` });
    expect(paused.status).toBe(200);
    expect(await flag()).toBe(true);
    const resumed = await send('POST', `/releases/${RELEASE}/resume`, { authorization: `Bearer ${OLGA}` });
    expect(resumed.status).toBe(200);
    expect(await flag()).toBe(false);
  });

  it('refuses Bull Board’s pause and pause-all from another origin, and serves them from its own', async () => {
    const before = await logCount();
    const one = `/admin/queues/api/queues/${encodeURIComponent(BOARD_QUEUE)}/pause`;
    for (const path of [one, '/admin/queues/api/queues/pause']) {
      const res = await send('PUT', path, { cookie, origin: EVIL });
      expect(res.status).toBe(403);
      expect(res.body).toMatchObject({ error: 'ForbiddenError', message: expect.stringMatching(/Origin "https:\/\/evil\.example" is not this API's origin/) });
      expect((await send('PUT', path, { cookie })).status).toBe(403);
    }
    // Bull Board's other writes (empty, clean, retry …) pass the same gate.
    expect((await send('PUT', `/admin/queues/api/queues/${encodeURIComponent(BOARD_QUEUE)}/empty`, { cookie, origin: EVIL })).status).toBe(403);
    expect(await queue.getJobCounts('waiting')).toEqual({ waiting: 4 });
    await unchanged(before);

    expect((await send('PUT', one, { cookie, origin: own })).status).toBe(200);
    expect(await flag()).toBe(true);
    expect(await queue.isPaused()).toBe(true);
    expect(await lastLog()).toMatchObject({ action: 'pause', principal: 'olga', detail: { via: 'bull-board' } });
    expect((await send('PUT', `/admin/queues/api/queues/${encodeURIComponent(BOARD_QUEUE)}/resume`, { cookie, origin: own })).status).toBe(200);
    expect(await flag()).toBe(false);
    expect(await queue.isPaused()).toBe(false);
  });
});

describe('GENFILL_API_TRUST_PROXY', () => {
  it('unset, X-Forwarded-Proto counts for nothing: no Secure cookie, and the forwarded origin is not the own one', async () => {
    const { setCookie } = await login(api, { 'x-forwarded-proto': 'https' });
    expect(setCookie).toMatch(/; HttpOnly/);
    expect(setCookie).not.toMatch(/; Secure/i);
    const before = await logCount();
    const res = await send('POST', `/releases/${RELEASE}/pause`, { cookie, origin: `https://127.0.0.1:${api.port}`, 'x-forwarded-proto': 'https' });
    expect(res.status).toBe(403);
    await unchanged(before);
  });

  it('set, a login through a TLS proxy gets a Secure cookie and the forwarded origin is the own one', async () => {
    // Express accepts every form the variable allows; the test's own "proxy" is loopback.
    const proxied = await start({ GENFILL_API_TRUST_PROXY: 'loopback, 10.0.0.0/255.0.0.0, fc00::/7' });
    const tls = { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'genfill.example.com' };
    const { setCookie, cookie: session } = await login(proxied, tls);
    expect(setCookie).toMatch(/; Secure/);
    expect((await login(proxied)).setCookie).not.toMatch(/; Secure/i);

    const before = await logCount();
    // The socket's origin is not the one the browser saw.
    expect((await send('POST', `/releases/${RELEASE}/pause`, { cookie: session, origin: proxied.url, ...tls }, proxied)).status).toBe(403);
    await unchanged(before);
    const res = await send('POST', `/releases/${RELEASE}/pause`, { cookie: session, origin: 'https://genfill.example.com', ...tls }, proxied);
    expect(res.status).toBe(200);
    expect(await flag()).toBe(true);
    expect((await send('POST', `/releases/${RELEASE}/resume`, { cookie: session, referer: 'https://genfill.example.com/admin/queues/', ...tls }, proxied)).status).toBe(200);
    expect(await flag()).toBe(false);
  });

  it('refuses to start with a value express would not understand, naming the variable', async () => {
    expect(() => loadConfig({ ...env, GENFILL_API_TRUST_PROXY: 'yes' })).toThrow(/GENFILL_API_TRUST_PROXY: must be true, false, a number of proxy hops/);
  });
});
