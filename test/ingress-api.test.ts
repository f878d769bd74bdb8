// Ingress over HTTP: POST /datasets/:ds/events (operator) applies an NDJSON body exactly as
// `genfill ingest` applies a file, with the token's subject as principal — seed 003's drill in
// both orders and twice, "" kept, a conflict refused (409) and recorded, a malformed body (400)
// and a busy dataset (429 with Retry-After) writing nothing.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApi, type ApiServer } from '@genfill/api';
import { installIngressMirror } from '@genfill/capture';
import { loadConfig } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { DATASET_ACTIONS } from '@genfill/registry';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, dailyRelease, workspace, writeRelease } from './support/fixtures.ts';
import { del, ingressCounts, keyState, loggedEvents, mirrorDdl, mirrorRow, ndjson, upsert, type IngressEventLine } from './support/ingress.ts';
import { REDIS_URL } from './support/redis.ts';

const db = await createTestDatabase('ingress_api');
const MIRROR = 'public.feed_orders';
const DATASET = 'feed_enriched';
const RELEASE = 'feed-enriched@1';
const TOKENS = { olga: 'olga-operator-token-0123456789', vera: 'vera-viewer-token-0123456789' };
const env = {
  DATABASE_URL: db.url,
  REDIS_URL,
  GENFILL_LOG_LEVEL: 'silent',
  GENFILL_API_TOKENS: `olga:operator:${TOKENS.olga},vera:viewer:${TOKENS.vera}`,
};
const servers: ApiServer[] = [];
let api: ApiServer;

async function start(overrides: Record<string, string> = {}): Promise<ApiServer> {
  const server = await startApi({ config: loadConfig({ ...env, ...overrides }), log: createLogger('api', 'silent'), port: 0 });
  servers.push(server);
  return server;
}

async function post(lines: (IngressEventLine | string)[] | string, o: { token?: string; server?: ApiServer; dataset?: string } = {}) {
  const headers: Record<string, string> = { 'content-type': 'application/x-ndjson', accept: 'application/json' };
  if (o.token !== null) headers.authorization = `Bearer ${o.token ?? TOKENS.olga}`;
  const res = await fetch(`${(o.server ?? api).url}/datasets/${o.dataset ?? DATASET}/events`, {
    method: 'POST',
    headers,
    body: typeof lines === 'string' ? lines : ndjson(lines),
  });
  return { status: res.status, body: (await res.json()) as any, headers: res.headers };
}
const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];

beforeAll(async () => {
  expect((await runCli(['migrate'], env)).code).toBe(0);
  await createExampleSchema(db.pool);
  await db.pool.query(mirrorDdl(MIRROR));
  expect((await installIngressMirror(db.pool, MIRROR)).status).toBe('installed');
  const spec = dailyRelease(RELEASE, DATASET, 3);
  spec.source.table = MIRROR;
  expect((await runCli(['release', 'submit', writeRelease(workspace(), spec)], env)).code).toBe(0);
  api = await start();
});
beforeEach(() => keepOnFailure(db));
afterAll(async () => {
  for (const s of servers) await s.close();
});

describe('POST /datasets/:ds/events', () => {
  it('needs an operator token: 401 without one, 403 for a viewer, and writes nothing', async () => {
    const before = await ingressCounts(db.pool, MIRROR);
    const anonymous = await fetch(`${api.url}/datasets/${DATASET}/events`, { method: 'POST', body: ndjson([upsert(1, 1, 'a')]) });
    expect(anonymous.status).toBe(401);
    expect((await post([upsert(1, 1, 'a')], { token: TOKENS.vera })).status).toBe(403);
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);
  });

  it("runs seed 003's drill: v3 delete, v2 \"\", v1 \"a\" in reverse order and twice end deleted, with only the delete logged", async () => {
    const applied: number[] = [];
    for (const e of [del(1, 3), upsert(1, 2, ''), upsert(1, 1, 'a')]) {
      for (let i = 0; i < 2; i++) {
        const r = await post([e]);
        expect(r.status, JSON.stringify(r.body)).toBe(200);
        applied.push(r.body.applied);
      }
    }
    expect(applied).toEqual([1, 0, 0, 0, 0, 0]);
    expect(await mirrorRow(db.pool, MIRROR, 1)).toBeNull();
    expect(await keyState(db.pool, MIRROR, 1)).toEqual({ revision: 3, deleted: true });
    expect(await loggedEvents(db.pool, MIRROR, 1)).toEqual([['delete', 3, undefined]]);
  });

  it('in order and twice each newer revision wins once; a late v1 does not resurrect; "" stays a value; the subject is the principal', async () => {
    const applied: number[] = [];
    for (const e of [upsert(2, 1, 'a'), upsert(2, 2, ''), del(2, 3), upsert(2, 1, 'a')]) {
      for (let i = 0; i < 2; i++) applied.push((await post([e])).body.applied);
    }
    expect(applied).toEqual([1, 0, 1, 0, 1, 0, 0, 0]);
    expect(await mirrorRow(db.pool, MIRROR, 2)).toBeNull();
    expect(await loggedEvents(db.pool, MIRROR, 2)).toEqual([
      ['upsert', 1, 'a'],
      ['upsert', 2, ''],
      ['delete', 3, ''],
    ]);
    const r = await post([upsert(3, 2, ''), upsert(4, 1, null)]);
    expect(r.body).toMatchObject({ dataset: DATASET, sourceTable: MIRROR, events: 2, applied: 2, principal: 'olga' });
    expect(await mirrorRow(db.pool, MIRROR, 3)).toMatchObject({ note: '' });
    expect(await mirrorRow(db.pool, MIRROR, 4)).toMatchObject({ note: null });
    expect(await one(`SELECT action, principal FROM genfill.dataset_log WHERE dataset = $1 ORDER BY id DESC LIMIT 1`, [DATASET])).toEqual({
      action: DATASET_ACTIONS.ingest,
      principal: 'olga',
    });
  });

  it('streams a body of many batches in one transaction', async () => {
    const events = Array.from({ length: 12_345 }, (_, i) => upsert(10_000 + i, 1 + (i % 3), `n${i}`));
    const r = await post(events);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ events: 12_345, applied: 12_345, stale: 0 });
    expect((await one(`SELECT count(*)::int AS n FROM ${MIRROR} WHERE order_id >= 10000`)).n).toBe(12_345);
  });

  it('equal revision with another payload: 409 naming the key, nothing applied, recorded with the subject, the open release moved', async () => {
    await db.pool.query(`UPDATE genfill.releases SET state = 'SNAPSHOT_PINNED' WHERE id = $1`, [RELEASE]);
    const before = await ingressCounts(db.pool, MIRROR);
    const r = await post([upsert(5, 1, 'new key'), upsert(3, 2, 'not ""')]);
    expect(r.status).toBe(409);
    expect(r.body).toMatchObject({ error: 'IngressConflictError', releases: [RELEASE], conflicts: [{ key: { order_id: 3 }, revision: 2 }] });
    expect(r.body.message).toMatch(/equal revision with another payload for key \{"order_id":3\} at revision 2/);
    expect(await mirrorRow(db.pool, MIRROR, 3)).toMatchObject({ note: '' });
    expect(await mirrorRow(db.pool, MIRROR, 5)).toBeNull();
    const after = await ingressCounts(db.pool, MIRROR);
    expect({ mirror: after.mirror, change_log: after.change_log, ingress_keys: after.ingress_keys, conflicts: after.conflicts }).toEqual({
      mirror: before.mirror,
      change_log: before.change_log,
      ingress_keys: before.ingress_keys,
      conflicts: before.conflicts + 1,
    });
    expect(await one(`SELECT principal, releases FROM genfill.ingress_conflicts ORDER BY id DESC LIMIT 1`)).toEqual({ principal: 'olga', releases: [RELEASE] });
    expect(await one(`SELECT state FROM genfill.releases WHERE id = $1`, [RELEASE])).toEqual({ state: 'RECONCILIATION_REQUIRED' });
  });

  it('a malformed body: 400 listing every bad line, nothing written', async () => {
    const before = await ingressCounts(db.pool, MIRROR);
    const r = await post([upsert(6, 1, 'ok'), '{oops', upsert(7, 1, 'ok'), JSON.stringify({ ...upsert(8, 1, 'x'), op: 'replace' })]);
    expect(r.status).toBe(400);
    expect(r.body.error).toBe('InvalidInputError');
    expect(r.body.problems.map((p: { path: string }) => p.path)).toEqual(['line 2', 'line 4']);
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);
  });

  it('busy: 429 with Retry-After and nothing written; a dataset already at its bound is 429 before the body is read', async () => {
    const pending = (await one(`SELECT count(*)::int AS n FROM genfill.change_log WHERE source_table = $1`, [MIRROR])).n;
    // The bound is the owner's: `genfill migrate` writes GENFILL_MAX_PENDING_EVENTS into genfill.settings.
    const bound = async (n: number) => expect((await runCli(['migrate'], { ...env, GENFILL_MAX_PENDING_EVENTS: String(n) })).code).toBe(0);
    await bound(pending + 1);
    const before = await ingressCounts(db.pool, MIRROR);
    const busy = await post([upsert(9, 1, 'a'), upsert(10, 1, 'b')]);
    expect(busy.status).toBe(429);
    expect(Number(busy.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(busy.body).toMatchObject({ error: 'IngressBusyError', pending, events: 2, max: pending + 1 });
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);

    // Issue 28: a dataset already at its bound is answered before its body is read (a file over
    // the bound alone is still 400: test/trust-api.test.ts, on a dataset with nothing pending).
    await bound(2);
    const full = await post([upsert(9, 1, 'a'), upsert(10, 1, 'b'), upsert(11, 1, 'c')]);
    expect(full.status).toBe(429);
    expect(full.body).toMatchObject({ error: 'IngressBusyError', max: 2 });
    expect(full.body.message).toMatch(/the body was not read and nothing was written/);
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);
    await bound(1_000_000);
  });

  it('a dataset that is not an ingress mirror is 409 naming the install command; an unknown one 404', async () => {
    expect((await runCli(['release', 'submit', writeRelease(workspace(), dailyRelease('plain@1', 'plain_orders', 2))], env)).code).toBe(0);
    const plain = await post([upsert(1, 1, 'a')], { dataset: 'plain_orders' });
    expect(plain.status).toBe(409);
    expect(plain.body.message).toMatch(/run `genfill capture install public.orders --ingress` first/);
    expect((await post([upsert(1, 1, 'a')], { dataset: 'nope' })).status).toBe(404);
  });
});
