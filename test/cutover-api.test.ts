// Cutover and rollback as a person (README "Roles"): an operator's `genfill cutover` and the API's
// POST /releases/:id/{cutover,rollback} are requests the projector service runs, recorded under
// the operator or the token's subject; a dry run answers with every check; bad input is 400 and
// writes nothing; a refusal is 409 naming it.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { httpStatusOf, startApi } from '@genfill/api';
import { exitCodeOf, loadConfig, NotFoundError } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { projectDataset, runProjectorService } from '@genfill/projector';
import { reconcile } from '@genfill/reconcile';
import { createPool, type Db, requestError, type RequestRow, serveRequests } from '@genfill/registry';
import { builtRelease, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { createTestQueues, REDIS_URL } from './support/redis.ts';
import { catchupRound, switchExtension, switchRequestHandlers } from '@genfill/switch';

const tdb = await createTestDatabase('cutover_api');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'cutover-api-test', 8);
const log = createLogger('cutover-api-test', 'silent');
const DS = 'orders_enriched';
const FROM = '2025-07-01T00:00:00Z';
const TOKEN = 'operator-token-cutover-0123456789';
let bob: Db;

const one = async <T = Record<string, unknown>>(q: string, v: unknown[] = []) => (await db.query(q, v)).rows[0] as T;

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 2, perDay: 48 });
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob; GRANT genfill_operator TO genfill_alice');
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
  await builtRelease(db, { id: 'api@1', generation: 'g3', from: FROM, to: '2025-07-02T00:00:00Z' });
  await projectDataset(DS, { db, log, untilIdle: true, id: 'api-test', leaseMs: 60_000 });
  await catchupRound(db, 'api@1');
  const r = await reconcile(db, 'api@1');
  await bob.query('SELECT * FROM genfill.approve($1, $2)', ['api@1', r.id]);
});
beforeEach(() => keepOnFailure(tdb));
afterAll(async () => {
  await bob.end();
  await db.end();
});

describe('cutover and rollback as a person', () => {
  it('over the CLI as an operator and over HTTP as a token: requests the projector service runs', async () => {
    const controller = new AbortController();
    const service = runProjectorService({ config: { DATABASE_URL: tdb.url } as never, db, log, signal: controller.signal, extension: switchExtension(), pollMs: 50, leaseMs: 3000 });
    const api = await startApi({
      config: loadConfig({ DATABASE_URL: tdb.url, REDIS_URL, GENFILL_QUEUE_PREFIX: createTestQueues('cutover-api').prefix, GENFILL_API_TOKENS: `olga:operator:${TOKEN}` }),
      log,
      port: 0,
    });
    const post = (path: string, body: unknown = {}) =>
      fetch(`${api.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    try {
      const bad = await post('/releases/api@1/cutover', { dryRun: 'yes' });
      expect(bad.status).toBe(400);
      const dry = await post('/releases/api@1/cutover', { dryRun: true });
      expect(dry.status).toBe(200);
      const d = (await dry.json()) as { checks: { name: string }[] };
      expect(d).toMatchObject({ dryRun: true, ok: true, principal: 'olga' });
      expect(d.checks.map((c: { name: string }) => c.name)).toEqual(['state', 'expected-generation', 'ingress', 'manifest', 'approvals', 'reconciliation-live', 'dependencies', 'source-rewrite', 'projector']);
      expect(await one(`SELECT count(*)::int AS n FROM genfill.cutovers`)).toEqual({ n: 0 });

      const res = await runCli(['cutover', 'api@1', '--json'], { DATABASE_URL: urlAs(tdb, 'genfill_alice') });
      expect(res.code).toBe(0);
      expect(res.stderr).toMatch(/requested cutover of api@1 \(request #\d+\); waiting for the projector service/);
      expect(JSON.parse(res.stdout)).toMatchObject({ ok: true, from: 'g2', to: 'g3' });
      expect(await one(`SELECT principal, request IS NOT NULL AS via_request, state FROM genfill.cutovers WHERE kind = 'cutover'`)).toEqual({
        principal: 'genfill_alice',
        via_request: true,
        state: 'DONE',
      });
      expect(await one(`SELECT principal FROM genfill.release_log WHERE release = 'api@1' AND action = 'cutover'`)).toEqual({ principal: 'genfill_alice' });

      const back = await post('/releases/api@1/rollback');
      expect(back.status).toBe(200);
      expect(await back.json()).toMatchObject({ ok: true, principal: 'olga', from: 'g3', to: 'g2' });
      expect(await one(`SELECT principal FROM genfill.cutovers WHERE kind = 'rollback'`)).toEqual({ principal: 'olga' });
      expect(await one(`SELECT state FROM genfill.releases WHERE id = 'api@1'`)).toEqual({ state: 'ROLLED_BACK' });

      const again = await post('/releases/api@1/rollback');
      expect(again.status).toBe(409);
      expect(await again.json()).toMatchObject({ message: expect.stringMatching(/release api@1 is ROLLED_BACK: only the ACTIVE release is rolled back/) });
      const late = await post('/releases/api@1/cutover', { dryRun: true });
      expect(late.status).toBe(409);
      expect(((await late.json()) as { checks: { name: string }[] }).checks.find((c) => c.name === 'state')).toMatchObject({ ok: false, detail: expect.stringMatching(/is ROLLED_BACK/) });
    } finally {
      await api.close();
      controller.abort();
      await service;
    }
  });
});

describe('a request fails as the error its handler raised', () => {
  it('a NotFoundError raised by the projector answers as it would in-process: exit 3 in the CLI, 404 over HTTP', async () => {
    const missing = () => new NotFoundError('dataset orders_enriched has no generation g9: it was never planned');
    const controller = new AbortController();
    const service = runProjectorService({
      config: { DATABASE_URL: tdb.url } as never,
      db,
      log,
      signal: controller.signal,
      pollMs: 50,
      leaseMs: 3000,
      extension: (ctx) => ({ handlers: { ...switchRequestHandlers(ctx), catchup: () => Promise.reject(missing()) } }),
    });
    const api = await startApi({
      config: loadConfig({ DATABASE_URL: tdb.url, REDIS_URL, GENFILL_QUEUE_PREFIX: createTestQueues('cutover-api-errors').prefix, GENFILL_API_TOKENS: `olga:operator:${TOKEN}` }),
      log,
      port: 0,
    });
    try {
      const res = await runCli(['catchup', 'api@1'], { DATABASE_URL: urlAs(tdb, 'genfill_alice') });
      expect(res.stderr).toMatch(/requested catchup of api@1 \(request #\d+\)/);
      expect(res.code).toBe(exitCodeOf(missing()));
      expect(res.code).toBe(3);
      expect(res.stderr).toMatch(/refused: dataset orders_enriched has no generation g9: it was never planned/);

      const http = await fetch(`${api.url}/releases/api@1/catchup`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: '{}' });
      expect(http.status).toBe(httpStatusOf(missing()));
      expect(http.status).toBe(404);
      expect(await http.json()).toMatchObject({ error: 'NotFoundError', message: missing().message, request: expect.stringMatching(/^\d+$/) });

      const stored = await one<{ exit_code: number; error: Record<string, unknown> }>(`SELECT exit_code, error FROM genfill.requests WHERE kind = 'catchup' ORDER BY id DESC LIMIT 1`);
      expect(stored).toMatchObject({ exit_code: 3, error: { name: 'NotFoundError', lineage: ['NotFoundError', 'RefusedError', 'GenfillError'], exitCode: 3, message: missing().message } });
    } finally {
      await api.close();
      controller.abort();
      await service;
    }
  });

  it('a request whose arguments do not parse fails with exit 2 before its handler runs: nothing done', async () => {
    const epochs = async () => one<{ n: number; state: string }>(`SELECT (SELECT count(*)::int FROM genfill.epochs WHERE dataset = $1) AS n, ingress_state AS state FROM genfill.datasets WHERE name = $1`, [DS]);
    const before = await epochs();
    // genfill.request refuses such arguments (test/trust-bounded-verbs.test.ts); a row written
    // past it (by the owner, or queued before migration 0026) is parsed again by the service.
    const { id } = await one<{ id: string }>(`INSERT INTO genfill.requests (kind, release, args) VALUES ('seal', 'api@1', '{"waitMs": "soon", "also": 1}') RETURNING id::text AS id`);
    const ran: string[] = [];
    const handlers = switchRequestHandlers();
    await serveRequests(db, {
      worker: 'bad-args-test',
      handlers: { ...handlers, seal: (conn, req) => (ran.push(req.id), handlers.seal(conn, req)) },
    });
    expect(ran).toEqual([]);
    const row = await one<RequestRow>(`SELECT id::text, state, exit_code, error FROM genfill.requests WHERE id = $1`, [id]);
    expect(row).toMatchObject({ state: 'FAILED', exit_code: 2, error: { name: 'InvalidInputError', exitCode: 2 } });
    expect((row.error!.fields as { problems: { path: string }[] }).problems.map((p) => p.path).sort()).toEqual(['args', 'args.waitMs']);
    const err = requestError(row);
    expect(err).toMatchObject({ name: 'InvalidInputError', exitCode: 2 });
    expect(await epochs()).toEqual(before);

    // The CLI parses them before it asks: nothing is written at all.
    const requests = await one<{ n: number }>(`SELECT count(*)::int AS n FROM genfill.requests`);
    const res = await runCli(['seal', 'api@1', '--wait', '86400'], { DATABASE_URL: urlAs(tdb, 'genfill_alice') });
    expect(res.code).toBe(2);
    expect(res.stderr).toMatch(/args\.waitMs/);
    expect(await one(`SELECT count(*)::int AS n FROM genfill.requests`)).toEqual(requests);
  });
});
