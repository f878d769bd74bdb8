// Issue 28, the API's findings, each reproduced against an API that logs in as a plain member of
// genfill_api (never a superuser) and shown refused with nothing changed: slow uploads that held
// the whole pool, a refused body read to its end, one subject's logins evicting everyone's
// sessions, /login without a rate, Bull Board writes that bypassed the registry, and pages
// without CSP, frame-ancestors and nosniff. Also: every API statement has a timeout.
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import pg from 'pg';
import { chromium } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SessionStore, startApi, type ApiServer } from '@genfill/api';
import { installIngressMirror } from '@genfill/capture';
import { loadConfig } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { createExampleSchema, dailyRelease, firstGenerationRelease, workspace, writeRelease } from './support/fixtures.ts';
import { ingressCounts, mirrorDdl, mirrorRow, ndjson, upsert } from './support/ingress.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';
import { waitFor } from './support/wait.ts';

const db = await createTestDatabase('trust_api');
const q = createTestQueues('trust-api');
/** The API's database login: a plain member of genfill_api, as a deployment runs it. */
const API_LOGIN = 'genfill_h5_api';
const MIRROR = 'public.feed_orders';
const DATASET = 'feed_enriched';
const INGRESS_RELEASE = 'feed-enriched@1';
/** A second mirror nobody writes to: nothing pending. */
const QUIET_MIRROR = 'public.feed_quiet_src';
const QUIET_DATASET = 'feed_quiet';
const RELEASE = 'orders-trust@1';
const BOARD_QUEUE = `release.${RELEASE}`;
const queue = q.queue(RELEASE);
const TOKENS = { olga: 'olga-operator-token-0123456789', vera: 'vera-viewer-token-0123456789', omar: 'omar-operator-token-0123456789' };
const adminEnv = { DATABASE_URL: db.url, REDIS_URL, GENFILL_QUEUE_PREFIX: q.prefix, GENFILL_LOG_LEVEL: 'silent' };
/** The pending bound is the owner's setting: `genfill migrate` as the owner writes it. */
const ownerBound = async (n: number) =>
  expect((await runCli(['migrate'], { ...adminEnv, GENFILL_MAX_PENDING_EVENTS: String(n) })).code).toBe(0);
const apiEnv = {
  ...adminEnv,
  DATABASE_URL: urlAs(db, API_LOGIN),
  GENFILL_API_TOKENS: `olga:operator:${TOKENS.olga},vera:viewer:${TOKENS.vera},omar:operator:${TOKENS.omar}`,
};
const servers: ApiServer[] = [];

async function start(overrides: Record<string, string> = {}, log = createLogger('api', 'silent')): Promise<ApiServer> {
  const server = await startApi({ config: loadConfig({ ...apiEnv, ...overrides }), log, port: 0 });
  servers.push(server);
  return server;
}

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
const pendingOf = async (dataset: string) => Number((await one('SELECT genfill.ingress_pending($1, 1000000000) AS n', [dataset])).n);
const logCount = async () => (await one('SELECT count(*)::int AS n FROM genfill.release_log')).n as number;
/** The API login's connections streaming a body into COPY: how an upload held a connection before issue 28. */
const copyingConnections = async () =>
  (await one(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND usename = $1 AND query ILIKE 'COPY%' AND state = 'active'`, [API_LOGIN])).n as number;

/** An HTTP request over a raw socket, so a test controls every byte of the body and when it is sent. */
interface RawRequest {
  socket: Socket;
  /** The response's head and whatever of its body arrived, once the head is complete (or the socket closed). */
  answer: Promise<string>;
  answered(): boolean;
  /** Resolves once the socket is closed (by either side, or reset). */
  closed: Promise<void>;
}

function rawRequest(server: ApiServer, method: string, path: string, headers: Record<string, string | number>): RawRequest {
  const socket = connect(server.port, '127.0.0.1');
  let text = '';
  let done = false;
  let resolve!: (v: string) => void;
  const answer = new Promise<string>((r) => (resolve = r));
  const finish = () => {
    if (done) return;
    done = true;
    resolve(text);
  };
  socket.on('data', (d) => {
    text += d.toString('latin1');
    if (text.includes('\r\n\r\n')) finish();
  });
  // A server that answers early and closes resets a socket still writing: the answer stands.
  socket.on('error', () => finish());
  const closed = new Promise<void>((r) => socket.once('close', () => r()));
  socket.on('close', () => finish());
  const head = [`${method} ${path} HTTP/1.1`, `Host: 127.0.0.1:${server.port}`, ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`), '', ''].join('\r\n');
  socket.write(head);
  return { socket, answer, answered: () => done, closed };
}

/**
 * POST a 19 MB NDJSON body (the finding's size) as fast as the socket takes it, and go on
 * writing after the answer, as a plain client does: `written` is how much of the body the
 * server had taken when it closed the connection (all of it, when it reads the body to its end).
 */
async function bigUpload(server: ApiServer, token: string | null): Promise<{ answer: string; written: number; total: number }> {
  const line = `${JSON.stringify(upsert(600, 1, 'x'.repeat(120)))}\n`;
  const total = Math.ceil(19_000_000 / line.length) * line.length;
  const chunk = Buffer.from(line.repeat(Math.floor(65_536 / line.length)));
  const headers: Record<string, string | number> = { 'content-type': 'application/x-ndjson', 'content-length': total };
  if (token) headers.authorization = `Bearer ${token}`;
  const u = rawRequest(server, 'POST', `/datasets/${DATASET}/events`, headers);
  let written = 0;
  let closed = false;
  void u.closed.then(() => (closed = true));
  try {
    while (written < total && !closed) {
      const piece = chunk.subarray(0, Math.min(chunk.length, total - written));
      written += piece.length;
      if (!u.socket.write(piece)) await Promise.race([once(u.socket, 'drain').catch(() => undefined), u.closed]);
    }
    return { answer: await u.answer, written, total };
  } finally {
    u.socket.destroy();
  }
}

const statusOf = (answer: string) => Number(/^HTTP\/1\.1 (\d{3}) /.exec(answer)?.[1]);

async function login(server: ApiServer, token: string, forwardedFor?: string): Promise<{ status: number; cookie?: string; headers: Headers }> {
  const headers: Record<string, string> = { 'content-type': 'application/x-www-form-urlencoded' };
  if (forwardedFor) headers['x-forwarded-for'] = forwardedFor;
  const res = await fetch(`${server.url}/login`, { method: 'POST', headers, body: new URLSearchParams({ token }).toString(), redirect: 'manual' });
  await res.arrayBuffer();
  const cookie = res.headers.getSetCookie().find((c) => c.startsWith('genfill_session='))?.split(';')[0];
  return { status: res.status, cookie, headers: res.headers };
}

const asCookie = async (server: ApiServer, cookie: string) => (await fetch(`${server.url}/releases`, { headers: { cookie, accept: 'application/json' } })).status;

beforeAll(async () => {
  expect((await runCli(['migrate'], adminEnv)).code).toBe(0);
  await db.pool.query(`DO $$ BEGIN CREATE ROLE ${API_LOGIN} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
  await db.pool.query(`GRANT genfill_api TO ${API_LOGIN}`);
  await createExampleSchema(db.pool);
  await db.pool.query(mirrorDdl(MIRROR));
  expect((await installIngressMirror(db.pool, MIRROR)).status).toBe('installed');
  const spec = dailyRelease(INGRESS_RELEASE, DATASET, 3);
  spec.source.table = MIRROR;
  expect((await runCli(['release', 'submit', writeRelease(workspace(), spec)], adminEnv)).code).toBe(0);
  await db.pool.query(mirrorDdl(QUIET_MIRROR));
  expect((await installIngressMirror(db.pool, QUIET_MIRROR)).status).toBe('installed');
  const quiet = dailyRelease('feed-quiet@1', QUIET_DATASET, 3);
  quiet.source.table = QUIET_MIRROR;
  expect((await runCli(['release', 'submit', writeRelease(workspace(), quiet)], adminEnv)).code).toBe(0);
  const r = firstGenerationRelease();
  r.release = RELEASE;
  r.range = { from: '2025-07-01T00:00:00Z', to: '2025-07-04T00:00:00Z' };
  expect((await runCli(['release', 'submit', writeRelease(workspace(), r)], adminEnv)).code).toBe(0);
  expect((await runCli(['plan', RELEASE], adminEnv)).code).toBe(0);
  expect(await queue.getJobCounts('waiting')).toEqual({ waiting: 3 });
}, 120_000);
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(q);
});
afterAll(async () => {
  for (const s of servers) await s.close();
});

describe('ingest over HTTP', () => {
  it('ingests as the plain API login, with the subject as principal', async () => {
    const api = await start();
    const res = await fetch(`${api.url}/datasets/${DATASET}/events`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKENS.olga}`, 'content-type': 'application/x-ndjson' },
      body: ndjson([upsert(1, 1, 'a'), upsert(2, 1, 'b'), upsert(3, 1, 'c')]),
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ applied: 3, principal: 'olga' });
    expect(await pendingOf(DATASET)).toBe(3);
  });

  it("eight slow uploads take no connection: a viewer's GET /releases answers while they are open, then each is cut with 408 and nothing of them is written", async () => {
    const api = await start({ GENFILL_API_INGEST_MIN_BYTES_PER_SECOND: '64', GENFILL_API_INGEST_RATE_WINDOW: '6s' });
    const before = await ingressCounts(db.pool, MIRROR);
    const body = Buffer.from(ndjson([upsert(500, 1, 'slow')]));
    const uploads = Array.from({ length: 8 }, () =>
      rawRequest(api, 'POST', `/datasets/${DATASET}/events`, { authorization: `Bearer ${TOKENS.olga}`, 'content-type': 'application/x-ndjson', 'content-length': body.length }),
    );
    // A byte every 2 s, the finding's rate.
    let sent = 0;
    const trickle = () => {
      for (const u of uploads) if (!u.answered() && sent < body.length) u.socket.write(body.subarray(sent, sent + 1));
      sent++;
    };
    trickle();
    const timer = setInterval(trickle, 2_000);
    try {
      // The API holds all eight: reading their bodies (its gauge), or — as before issue 28 — each
      // streaming into COPY on a connection of the pool.
      await waitFor('the API to hold all eight uploads', async () => {
        const metrics = await (await fetch(`${api.url}/metrics`)).text();
        return Number(/^genfill_api_ingest_uploads(?:\{[^}]*\})? (\d+)/m.exec(metrics)?.[1] ?? 0) === 8 || (await copyingConnections()) >= 8;
      });
      const list = await fetch(`${api.url}/releases`, { headers: { authorization: `Bearer ${TOKENS.vera}`, accept: 'application/json' } });
      const stillOpen = uploads.filter((u) => !u.answered()).length;
      expect(list.status).toBe(200);
      expect((await list.json()) as unknown[]).not.toHaveLength(0);
      expect(stillOpen).toBe(8);
      expect(await copyingConnections()).toBe(0);

      const answers = await Promise.all(uploads.map((u) => u.answer));
      expect(answers.map(statusOf)).toEqual(Array(8).fill(408));
      expect(answers[0]).toMatch(/connection: close/i);
      expect(answers[0]).toMatch(/slower than GENFILL_API_INGEST_MIN_BYTES_PER_SECOND \(64\)/);
    } finally {
      clearInterval(timer);
      for (const u of uploads) u.socket.destroy();
    }
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);
    expect(await mirrorRow(db.pool, MIRROR, 500)).toBeNull();
  }, 60_000);

  it('a dataset at its pending bound answers a 19 MB body with 429 before reading it, and nothing is written', async () => {
    const pending = await pendingOf(DATASET);
    expect(pending).toBeGreaterThan(0);
    // The size bound raised past the body, so that the pending bound is what answers it. The
    // bound is the owner's setting, which `genfill migrate` writes (migration 0026).
    await ownerBound(pending);
    const api = await start({ GENFILL_API_INGEST_MAX_BYTES: String(32 * 1024 * 1024) });
    const before = await ingressCounts(db.pool, MIRROR);
    const { answer, written, total } = await bigUpload(api, TOKENS.olga);
    expect(statusOf(answer)).toBe(429);
    expect(answer).toMatch(/retry-after: \d+/i);
    // The connection was closed while the client still had most of the body to send.
    expect(written).toBeLessThan(total);
    expect(await pendingOf(DATASET)).toBe(pending);
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);
    expect(await mirrorRow(db.pool, MIRROR, 600)).toBeNull();
    await ownerBound(1_000_000);
  }, 60_000);

  it('a dataset under its bound still reads the body: a file over the bound alone is 400, nothing written', async () => {
    await ownerBound(2);
    const api = await start({});
    expect(await pendingOf(QUIET_DATASET)).toBe(0);
    const before = await ingressCounts(db.pool, QUIET_MIRROR);
    const res = await fetch(`${api.url}/datasets/${QUIET_DATASET}/events`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKENS.olga}`, 'content-type': 'application/x-ndjson' },
      body: ndjson([upsert(1, 1, 'a'), upsert(2, 1, 'b'), upsert(3, 1, 'c')]),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { problems: { message: string }[] }).problems.at(-1)!.message).toMatch(
      /3 events in one file, more than GENFILL_MAX_PENDING_EVENTS \(2\): split the file/,
    );
    expect(await ingressCounts(db.pool, QUIET_MIRROR)).toEqual(before);
    await ownerBound(1_000_000);
  });

  it('an upload refused for its credentials (401, 403) is answered without its body being read', async () => {
    const api = await start({ GENFILL_API_INGEST_MAX_BYTES: String(32 * 1024 * 1024) });
    const before = await ingressCounts(db.pool, MIRROR);
    for (const [token, status] of [[null, 401], [TOKENS.vera, 403]] as const) {
      const { answer, written, total } = await bigUpload(api, token);
      expect(statusOf(answer)).toBe(status);
      expect(answer).toMatch(/connection: close/i);
      expect(written).toBeLessThan(total);
    }
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);
  }, 60_000);

  it('a body over GENFILL_API_INGEST_MAX_BYTES is 413 from its Content-Length, before a byte of it is read', async () => {
    const api = await start({ GENFILL_API_INGEST_MAX_BYTES: '4096' });
    const before = await ingressCounts(db.pool, MIRROR);
    const u = rawRequest(api, 'POST', `/datasets/${DATASET}/events`, { authorization: `Bearer ${TOKENS.olga}`, 'content-type': 'application/x-ndjson', 'content-length': 5000 });
    try {
      const answer = await u.answer;
      expect(statusOf(answer)).toBe(413);
      expect(answer).toMatch(/more than GENFILL_API_INGEST_MAX_BYTES \(4096\)/);
    } finally {
      u.socket.destroy();
    }
    // A chunked body is cut once it passes the bound.
    const chunked = await fetch(`${api.url}/datasets/${DATASET}/events`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKENS.olga}`, 'content-type': 'application/x-ndjson' },
      body: new ReadableStream({
        start(c) {
          for (let i = 0; i < 40; i++) c.enqueue(new TextEncoder().encode(ndjson([upsert(700 + i, 1, 'big')])));
          c.close();
        },
      }),
      duplex: 'half',
    } as RequestInit);
    expect(chunked.status).toBe(413);
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);
  });
});

describe('statement timeouts', () => {
  it('ends an API statement stuck behind a lock with GENFILL_API_STATEMENT_TIMEOUT, and the API answers', async () => {
    const api = await start({ GENFILL_API_STATEMENT_TIMEOUT: '300ms' });
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE genfill.releases IN ACCESS EXCLUSIVE MODE');
      const res = await fetch(`${api.url}/releases`, { headers: { authorization: `Bearer ${TOKENS.vera}`, accept: 'application/json' } });
      expect(res.status).toBe(500);
      expect(res.headers.get('content-security-policy')).toMatch(/frame-ancestors 'none'/);
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(await res.json()).toMatchObject({ error: 'InternalError' });
    } finally {
      await locker.query('ROLLBACK');
      await locker.end();
    }
    expect((await fetch(`${api.url}/releases`, { headers: { authorization: `Bearer ${TOKENS.vera}` } })).status).toBe(200);
  });
});

describe('sessions and /login', () => {
  it("10,001 logins of one subject do not evict another subject's session", () => {
    const store = new SessionStore();
    const yara = store.create({ subject: 'yara', role: 'operator' });
    const first = store.create({ subject: 'xavier', role: 'viewer' });
    let last = first;
    for (let i = 0; i < 10_000; i++) last = store.create({ subject: 'xavier', role: 'viewer' });
    expect(store.get(yara)).toEqual({ subject: 'yara', role: 'operator' });
    expect(store.get(last)).toEqual({ subject: 'xavier', role: 'viewer' });
    expect(store.get(first)).toBeNull();
    expect(store.size).toBe(store.maxPerSubject + 1);
  });

  it("over HTTP: a subject's login past GENFILL_API_SESSIONS_PER_SUBJECT ends that subject's oldest session only", async () => {
    const api = await start({ GENFILL_API_SESSIONS_PER_SUBJECT: '2' });
    const omar = await login(api, TOKENS.omar);
    expect(await asCookie(api, omar.cookie!)).toBe(200);
    const olga = [await login(api, TOKENS.olga), await login(api, TOKENS.olga), await login(api, TOKENS.olga)];
    expect(olga.map((l) => l.status)).toEqual([303, 303, 303]);
    expect(await asCookie(api, olga[0]!.cookie!)).toBe(401);
    expect(await asCookie(api, olga[1]!.cookie!)).toBe(200);
    expect(await asCookie(api, olga[2]!.cookie!)).toBe(200);
    expect(await asCookie(api, omar.cookie!)).toBe(200);
  });

  it('rate-limits /login per client address and per subject: 429 with Retry-After, no session made', async () => {
    const api = await start({ GENFILL_API_LOGIN_BURST: '2', GENFILL_API_LOGIN_PER_MINUTE: '1', GENFILL_API_TRUST_PROXY: 'loopback' });
    // One address guessing tokens: its third attempt is refused before the token is looked at.
    expect((await login(api, 'wrong-token-0123456789', '203.0.113.1')).status).toBe(401);
    expect((await login(api, 'wrong-token-0123456789', '203.0.113.1')).status).toBe(401);
    const guessing = await login(api, TOKENS.olga, '203.0.113.1');
    expect(guessing.status).toBe(429);
    expect(Number(guessing.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(guessing.cookie).toBeUndefined();
    // One subject from many addresses.
    expect((await login(api, TOKENS.vera, '203.0.113.2')).status).toBe(303);
    expect((await login(api, TOKENS.vera, '203.0.113.3')).status).toBe(303);
    const again = await login(api, TOKENS.vera, '203.0.113.4');
    expect(again.status).toBe(429);
    expect(again.cookie).toBeUndefined();
    // Another subject is not held back.
    expect((await login(api, TOKENS.omar, '203.0.113.5')).status).toBe(303);
  });
});

describe('Bull Board writes', () => {
  const path = (p: string) => `/admin/queues/api/queues/${encodeURIComponent(BOARD_QUEUE)}${p}`;
  const send = async (api: ApiServer, method: string, p: string, body?: unknown) => {
    const res = await fetch(`${api.url}${path(p)}`, {
      method,
      headers: { authorization: `Bearer ${TOKENS.olga}`, accept: 'application/json', ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: (res.headers.get('content-type') ?? '').includes('json') ? JSON.parse(text) : text };
  };
  const snapshot = async (jobId: string) => ({
    counts: await queue.getJobCounts(),
    rateLimitTtl: await queue.getRateLimitTtl(),
    concurrency: await queue.getGlobalConcurrency(),
    job: (await queue.getJob(jobId))?.asJSON(),
    paused: await queue.isPaused(),
    releaseLog: await logCount(),
  });

  it('denies an operator every write but pause, resume, retry, promote and clean, with 403 and the queue unchanged', async () => {
    const api = await start();
    const [job] = await queue.getJobs(['waiting'], 0, 0);
    const jobId = job!.id!;
    const before = await snapshot(jobId);
    const denied: [string, string, unknown?][] = [
      ['PUT', '/rate-limit', { max: 1, duration: 24 * 86_400_000 }],
      ['POST', '/add', { name: 'forged', data: { partition: 'x' } }],
      ['PATCH', `/${jobId}/update-data`, { jobData: { forged: true } }],
      ['PUT', '/empty'],
      ['PUT', '/obliterate'],
      ['PUT', '/concurrency', { concurrency: 1 }],
      ['PATCH', `/${jobId}/priority`, { priority: 1 }],
      ['PUT', '/rate-limit/release'],
    ];
    for (const [method, p, body] of denied) {
      const res = await send(api, method, p, body);
      expect({ route: `${method} ${p}`, status: res.status }).toEqual({ route: `${method} ${p}`, status: 403 });
      expect(res.body.message).toMatch(/is denied: genfill keeps only pause, resume, retry, promote and clean on the board/);
    }
    expect(await snapshot(jobId)).toEqual(before);
  });

  it('keeps clean for finished jobs only: cleaning waiting jobs is 403 and removes none', async () => {
    const api = await start();
    const [job] = await queue.getJobs(['waiting'], 0, 0);
    const before = await snapshot(job!.id!);
    expect((await send(api, 'PUT', '/clean/wait')).status).toBe(403);
    const single = await send(api, 'PUT', `/${job!.id}/clean`);
    expect(single.status).toBe(403);
    expect(single.body.message).toMatch(/kept for completed and failed jobs only; job .* is waiting/);
    expect(await snapshot(job!.id!)).toEqual(before);
  });

  it('pause and resume still work and are recorded under the subject; retry and clean are recorded in the release log under it too', async () => {
    const lines: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        for (const l of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(l));
        done();
      },
    });
    const api = await start({}, createLogger('api', 'info', sink));
    expect((await send(api, 'PUT', '/pause')).status).toBe(200);
    expect(await queue.isPaused()).toBe(true);
    expect(await one('SELECT action, principal, detail FROM genfill.release_log WHERE release = $1 ORDER BY id DESC LIMIT 1', [RELEASE])).toMatchObject({
      action: 'pause',
      principal: 'olga',
      detail: { via: 'bull-board' },
    });
    expect((await send(api, 'PUT', '/resume')).status).toBe(200);
    expect(await queue.isPaused()).toBe(false);
    expect(await one('SELECT action, principal FROM genfill.release_log WHERE release = $1 ORDER BY id DESC LIMIT 1', [RELEASE])).toEqual({ action: 'resume', principal: 'olga' });

    expect((await send(api, 'PUT', '/retry/failed')).status).toBe(200);
    expect((await send(api, 'PUT', '/clean/completed')).status).toBe(200);
    const recorded = lines.filter((l) => l.via === 'bull-board' && typeof l.action === 'string');
    expect(recorded.map((l) => ({ subject: l.subject, release: l.release, action: l.action, status: l.status }))).toEqual([
      { subject: 'olga', release: RELEASE, action: 'retry', status: 'failed' },
      { subject: 'olga', release: RELEASE, action: 'clean', status: 'completed' },
    ]);
    const board = await db.pool.query(
      `SELECT action, principal, detail->>'status' AS status, detail->>'via' AS via FROM genfill.release_log
        WHERE release = $1 AND action LIKE 'board-%' ORDER BY id`,
      [RELEASE],
    );
    expect(board.rows).toEqual([
      { action: 'board-retry', principal: 'olga', status: 'failed', via: 'bull-board' },
      { action: 'board-clean', principal: 'olga', status: 'completed', via: 'bull-board' },
    ]);
  });
});

describe('security headers', () => {
  const expectHeaders = (h: Headers, what: string) => {
    expect({ what, csp: h.get('content-security-policy') }).toEqual({ what, csp: expect.stringMatching(/frame-ancestors 'none'/) });
    expect({ what, nosniff: h.get('x-content-type-options'), frame: h.get('x-frame-options'), referrer: h.get('referrer-policy') }).toEqual({
      what,
      nosniff: 'nosniff',
      frame: 'DENY',
      referrer: 'same-origin',
    });
  };

  it('are on a JSON route, the status page, Bull Board, the login form, /metrics, a 404 and an error', async () => {
    const api = await start();
    const get = (p: string, accept = 'application/json', token: string | null = TOKENS.vera) =>
      fetch(`${api.url}${p}`, { headers: { accept, ...(token ? { authorization: `Bearer ${token}` } : {}) }, redirect: 'manual' });
    const json = await get('/releases');
    expect(json.status).toBe(200);
    expectHeaders(json.headers, 'GET /releases');
    const status = await get('/', 'text/html');
    expect(status.status).toBe(200);
    expectHeaders(status.headers, 'the status page');
    const board = await get('/admin/queues', 'text/html');
    expect(board.status).toBe(200);
    expect(await board.text()).toMatch(/<base href="\/admin\/queues\/"/);
    expectHeaders(board.headers, 'Bull Board');
    expect(board.headers.get('content-security-policy')).toMatch(/script-src 'self'/);
    const boardApi = await get('/admin/queues/api/queues');
    expect(boardApi.status).toBe(200);
    expectHeaders(boardApi.headers, "Bull Board's API");
    expectHeaders((await get('/login', 'text/html', null)).headers, 'the login form');
    expectHeaders((await get('/metrics', 'text/plain', null)).headers, '/metrics');
    const missing = await get('/no/such/route');
    expect(missing.status).toBe(404);
    expectHeaders(missing.headers, 'a 404');
    const unauthenticated = await get('/releases', 'application/json', null);
    expect(unauthenticated.status).toBe(401);
    expectHeaders(unauthenticated.headers, 'a 401');
    const malformed = await fetch(`${api.url}/releases/${RELEASE}/pause`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKENS.olga}`, 'content-type': 'application/json' },
      body: '{not json',
    });
    expect(malformed.status).toBe(400);
    expectHeaders(malformed.headers, 'an error');
  });
});

describe('Bull Board under its Content-Security-Policy, in Chromium', () => {
  it('loads and lists the queue; the only thing the policy refuses is the third-party font stylesheet', async () => {
    const api = await start();
    // Debian's Chromium (installed by .ci/run), with test/status-browser.test.ts's flags.
    const browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    try {
      const page = await (await browser.newContext()).newPage();
      const refused: string[] = [];
      page.on('console', (m) => {
        if (/Content Security Policy/i.test(m.text())) refused.push(m.text());
      });
      await page.goto(`${api.url}/login`);
      await page.getByLabel('Token').fill(TOKENS.vera);
      await page.getByRole('button', { name: 'Log in' }).click();
      await page.waitForURL((u) => u.pathname === '/admin/queues');
      await expect.poll(() => page.getByRole('link', { name: BOARD_QUEUE }).count(), { timeout: 30_000 }).toBeGreaterThan(0);
      // The font stylesheet is refused (which also shows the console is heard), and nothing else.
      expect(refused.some((t) => t.includes('fonts.googleapis.com'))).toBe(true);
      expect(refused.filter((t) => !t.includes('fonts.googleapis.com'))).toEqual([]);
    } finally {
      await browser.close();
    }
  }, 60_000);
});
