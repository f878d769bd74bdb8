// Nobody outside genfill can stall the fleet (issue 28, findings 3 and 4; SPEC invariant 7 and
// "Identity and roles"). A login with no genfill role holding every advisory key genfill used
// to wait on stalls nothing — a projector batch applies, an ingest, a submission, a plan, a
// catch-up round and a cutover (with its seal) complete — and it can neither take nor block the
// locks that replaced them (LOCK TABLEs on genfill_lock's tables). Every wait for those locks
// ends with a named refusal that changes nothing. The projector runs as a plain genfill_service
// login (it used to fail every batch on its lease's FOR SHARE).
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { installIngressMirror } from '@genfill/capture';
import { LockWaitTimeoutError } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { projectDataset, runBatch } from '@genfill/projector';
import { reconcile } from '@genfill/reconcile';
import { createPool, type Db } from '@genfill/registry';
import { catchupRound, cutoverRelease, rollbackRelease, sealRelease } from '@genfill/switch';
import { builtRelease, candidate, seedAdopted, spawnGenfill, type Spawned } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { dailyRelease, workspace, writeRelease } from './support/fixtures.ts';
import { mirrorDdl, mirrorRow, upsert, writeEvents } from './support/ingress.ts';
import { REDIS_URL } from './support/redis.ts';
import { waitFor } from './support/wait.ts';

const tdb = await createTestDatabase('trust-locks');
/** The fleet's side, with a short lock_timeout: a lock an outsider could hold fails fast instead of hanging the file. */
const LOCK_TIMEOUT_MS = 3000;
const db = createPool({ DATABASE_URL: tdb.url, GENFILL_LOCK_TIMEOUT: LOCK_TIMEOUT_MS } as never, 'trust-locks-test', 10);
const env = { DATABASE_URL: tdb.url, REDIS_URL, GENFILL_LOCK_TIMEOUT: String(LOCK_TIMEOUT_MS), GENFILL_LOG_LEVEL: 'warn' };
const log = createLogger('trust-locks-test', 'silent');
const DS = 'orders_enriched';
const FROM = '2025-07-01T00:00:00Z';
const MIRROR = 'public.ext_orders';
const INGRESS_DS = 'ext_enriched';

/** Cluster-wide logins of this file: the fleet as a plain login, and one with no genfill role. */
const SVC = 'genfill_h4_svc';
const OUTSIDER = 'genfill_h4_outsider';
let bob: Db;

const one = async <T = Record<string, unknown>>(q: string, v: unknown[] = []) => (await db.query(q, v)).rows[0] as T;
const dataset = () =>
  one<{ active: string; ingress: string; epoch: number }>(
    `SELECT active_generation AS active, ingress_state AS ingress, ingress_epoch::int AS epoch FROM genfill.datasets WHERE name = $1`,
    [DS],
  );
const state = async (id: string) => (await one<{ state: string }>(`SELECT state FROM genfill.releases WHERE id = $1`, [id])).state;
const frontier = async () => (await one<{ s: string }>(`SELECT snapshot::text AS s FROM genfill.frontiers WHERE dataset = $1`, [DS])).s;
const drain = () => projectDataset(DS, { db, log, untilIdle: true, id: 'trust-locks-test', leaseMs: 60_000 });
const amountIn = async (generation: string, order: number) =>
  (await one<{ a: string | null }>(`SELECT (SELECT amount_cents::text FROM ${candidate(generation)} WHERE order_id = $1) AS a`, [order])).a;

const clients: pg.Client[] = [];
async function connectAs(login: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: urlAs(tdb, login), application_name: `trust-locks-${login}` });
  c.on('error', () => undefined);
  await c.connect();
  clients.push(c);
  return c;
}

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 4, perDay: 24 });
  for (const login of [SVC, OUTSIDER]) {
    await tdb.pool.query(`DO $$ BEGIN CREATE ROLE ${login} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
  }
  await tdb.pool.query(`GRANT genfill_service TO ${SVC}`);
  // What a deployment grants its fleet login on the tables it backfills: the source and the
  // transform's dependencies (the projector applies the transform to each event).
  await tdb.pool.query(`GRANT SELECT ON public.orders, public.tax_rates TO ${SVC}`);
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
  // An ingress source, for the ingress lock.
  await tdb.pool.query(mirrorDdl(MIRROR));
  const spec = dailyRelease('ext-enriched@1', INGRESS_DS, 3);
  spec.source.table = MIRROR;
  expect((await runCli(['release', 'submit', writeRelease(workspace(), spec)], env)).code).toBe(0);
  await installIngressMirror(db, MIRROR);
});
beforeEach(() => keepOnFailure(tdb));
afterAll(async () => {
  await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
  await bob.end();
  await db.end();
});

describe('a login with no genfill role', () => {
  it("holding every advisory key genfill used to wait on stalls nothing: a batch, an ingest, a submission, a plan, a catch-up round and a cutover with its seal complete", async () => {
    const outsider = await connectAs(OUTSIDER);
    expect((await outsider.query(`SELECT pg_has_role('genfill_service', 'MEMBER') OR pg_has_role('genfill_operator', 'MEMBER') AS member`)).rows[0].member).toBe(false);
    const release = 'cut@1';
    const keys = [
      `genfill:seal:${DS}`,
      `genfill:ingress:${MIRROR}`,
      `genfill:ingress:public.orders`,
      `genfill:dataset:${DS}`,
      `genfill:adopt:${DS}`,
      `genfill:plan:${release}`,
      `genfill:dispatch:${release}`,
      `genfill:catchup:${release}`,
    ];
    for (const k of keys) await outsider.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [k]);
    // It also holds ACCESS SHARE on every lock table it can name by oid (no privilege needed for
    // pg_relation_size): the only mode that conflicts with it, ACCESS EXCLUSIVE, genfill never takes.
    const { rows: tables } = await db.query<{ oid: number }>(`SELECT c.oid::int AS oid FROM pg_class c WHERE c.relnamespace = 'genfill_lock'::regnamespace`);
    expect(tables.length).toBeGreaterThan(0);
    await outsider.query('BEGIN');
    for (const t of tables) await outsider.query('SELECT pg_relation_size($1::oid::regclass)', [t.oid]);
    await outsider.query('SELECT 1'); // closes the last portal: it holds the locks, not a snapshot
    const { rows: held } = await db.query(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = $1`, [
      (await outsider.query('SELECT pg_backend_pid() AS p')).rows[0].p,
    ]);
    expect(held[0].n).toBe(keys.length);

    // The projector applies a batch.
    await drain();
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = 4242 WHERE order_id = 3`);
    const t = await drain();
    expect(t.applied).toBeGreaterThan(0);
    expect(await amountIn('g2', 3)).toBe('4242');

    // An ingest applies.
    const events = writeEvents(workspace(), 'events.ndjson', [upsert(7, 1, 'through')]);
    const ingest = await runCli(['ingest', INGRESS_DS, events, '--json'], env);
    expect(ingest.stderr).toBe('');
    expect(JSON.parse(ingest.stdout)).toMatchObject({ applied: 1 });
    expect(await mirrorRow(tdb.pool, MIRROR, 7)).toMatchObject({ note: 'through' });

    // A release is submitted, planned, started, built, caught up, reconciled, approved and cut over.
    await builtRelease(db, { id: release, generation: 'g3', from: '2025-07-02T00:00:00Z', to: '2025-07-03T00:00:00Z' });
    await drain();
    await catchupRound(db, release);
    const r = await reconcile(db, release);
    expect(r.state).toBe('RECONCILED');
    await bob.query('SELECT * FROM genfill.approve($1, $2)', [release, r.id]);
    const cut = await cutoverRelease(db, release);
    expect(cut.ok).toBe(true);
    expect(await dataset()).toMatchObject({ active: 'g3', ingress: 'OPEN', epoch: 2 });
    expect(await state(release)).toBe('ACTIVE');

    // Its advisory keys were held throughout.
    const { rows: still } = await db.query(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = $1`, [
      (await outsider.query('SELECT pg_backend_pid() AS p')).rows[0].p,
    ]);
    expect(still[0].n).toBe(keys.length);
    await outsider.query('ROLLBACK');
    await outsider.query('SELECT pg_advisory_unlock_all()');
  });

  it('can neither take a lock genfill waits on nor call the function that takes them: permission denied, nothing held', async () => {
    const outsider = await connectAs(OUTSIDER);
    const name = (await one<{ n: string }>(`SELECT genfill.lock_relation_name('seal', $1) AS n`, [DS])).n;
    const pid = (await outsider.query('SELECT pg_backend_pid() AS p')).rows[0].p;
    for (const mode of ['ROW SHARE', 'EXCLUSIVE', 'ACCESS EXCLUSIVE']) {
      await outsider.query('BEGIN');
      await expect(outsider.query(`LOCK TABLE genfill_lock."${name}" IN ${mode} MODE NOWAIT`)).rejects.toMatchObject({
        code: '42501',
        message: 'permission denied for schema genfill_lock',
      });
      await outsider.query('ROLLBACK');
    }
    await expect(outsider.query(`SELECT genfill.take_lock('seal', $1, 'exclusive')`, [DS])).rejects.toMatchObject({
      code: '42501',
      message: 'permission denied for schema genfill',
    });
    // A person, who may use schema genfill, may not call it either.
    const person = await connectAs('genfill_bob');
    await expect(person.query(`SELECT genfill.take_lock('seal', $1, 'exclusive')`, [DS])).rejects.toMatchObject({
      code: '42501',
      message: 'permission denied for function take_lock',
    });
    const { rows } = await db.query(`SELECT count(*)::int AS n FROM pg_locks WHERE pid = $1 AND locktype = 'relation' AND relation IN (SELECT oid FROM pg_class WHERE relnamespace = 'genfill_lock'::regnamespace)`, [pid]);
    expect(rows[0].n).toBe(0);
    // Nor does anyone else hold any privilege on genfill_lock or its tables: only the owner (and its members).
    const { rows: grants } = await db.query(
      `SELECT c.relname, r.rolname, p.priv
         FROM pg_class c CROSS JOIN pg_roles r
        CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS p(priv)
        WHERE c.relnamespace = 'genfill_lock'::regnamespace AND NOT r.rolsuper AND r.rolname <> 'genfill_owner'
          AND r.rolname IN ('genfill_service', 'genfill_operator', 'genfill_approver', 'genfill_reader', 'genfill_api', '${SVC}', '${OUTSIDER}', 'genfill_alice', 'genfill_bob')
          AND has_table_privilege(r.oid, c.oid, p.priv)`,
    );
    expect(grants).toEqual([]);
    const { rows: usage } = await db.query(
      `SELECT r.rolname FROM pg_roles r
        WHERE NOT r.rolsuper AND NOT pg_has_role(r.oid, 'genfill_owner', 'MEMBER') AND has_schema_privilege(r.oid, 'genfill_lock', 'USAGE')
          AND r.rolname NOT IN ('pg_read_all_data', 'pg_write_all_data')`, // an administrator's grant, like superuser
    );
    expect(usage).toEqual([]);
  });
});

describe('every wait for a genfill lock ends with a named refusal', () => {
  it('a seal that cannot get its lock within the timeout is refused naming the lock and its holder, and the epoch stays OPEN', async () => {
    await builtRelease(db, { id: 'late@1', generation: 'g4', expectedActive: 'g3', from: '2025-07-03T00:00:00Z', to: '2025-07-04T00:00:00Z' });
    await drain();
    const before = { ds: await dataset(), state: await state('late@1'), epochs: (await db.query('SELECT * FROM genfill.epochs ORDER BY epoch')).rows };
    // A batch-like holder: a plain genfill_service login in the tail of a transaction.
    const holder = await connectAs(SVC);
    await holder.query('BEGIN');
    await holder.query(`SELECT genfill.take_lock('seal', $1, 'shared')`, [DS]);
    const pid = (await holder.query('SELECT pg_backend_pid() AS p')).rows[0].p;
    try {
      const err = await sealRelease(db, 'late@1', { lockTimeoutMs: 200, lockAttempts: 2 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(LockWaitTimeoutError);
      expect(err).toMatchObject({ lock: 'seal', key: DS, timeoutMs: 200, exitCode: 3 });
      expect((err as Error).message).toMatch(
        new RegExp(`^the seal lock of ${DS} was not granted within 200 ms in 2 attempts: held by pid ${pid} \\(RowShareLock, trust-locks-${SVC}\\)\\. Nothing was sealed; run seal again`),
      );
    } finally {
      await holder.query('ROLLBACK');
    }
    expect(await dataset()).toEqual(before.ds);
    expect(await state('late@1')).toBe(before.state);
    expect((await db.query('SELECT * FROM genfill.epochs ORDER BY epoch')).rows).toEqual(before.epochs);
  });

  it("a projector batch whose tail cannot get the seal lock within lock_timeout writes nothing and says which lock", async () => {
    await drain();
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = 5151 WHERE order_id = 60`);
    const f = await frontier();
    const holder = await connectAs(SVC);
    await holder.query('BEGIN');
    await holder.query(`SELECT genfill.take_lock('seal', $1, 'exclusive')`, [DS]);
    const short = createPool({ DATABASE_URL: tdb.url, GENFILL_LOCK_TIMEOUT: 300 } as never, 'trust-locks-short', 2);
    try {
      const lease = (await db.query(`SELECT genfill.projector_acquire($1, 'trust-locks-short', 60000)::text AS t`, [DS])).rows[0].t as string;
      const out = await runBatch(short, DS, { lease: { holder: 'trust-locks-short', token: BigInt(lease) }, maxEvents: 1000, statementTimeoutMs: 30_000 });
      expect(out).toMatchObject({ kind: 'fenced', dataset: DS });
      expect(out.kind === 'fenced' && out.reason).toMatch(new RegExp(`^the seal lock of ${DS} was not granted within 300 ms: held by pid \\d+ \\(ExclusiveLock, trust-locks-${SVC}\\)`));
      await db.query(`SELECT genfill.projector_release($1, 'trust-locks-short', $2)`, [DS, lease]);
    } finally {
      await holder.query('ROLLBACK');
      await short.end();
    }
    expect(await frontier()).toBe(f);
    expect(await amountIn('g3', 60)).not.toBe('5151');
  });
});

describe('the projector as a plain genfill_service login', () => {
  let projector: Spawned | null = null;
  afterAll(async () => {
    if (projector && projector.child.exitCode === null) {
      projector.child.kill('SIGTERM');
      await projector.exit;
    }
  });

  it('spawned as the genfill binary, applies a batch: a source change appears in the active generation', async () => {
    await drain();
    const active = (await dataset()).active;
    projector = spawnGenfill(['projector', '--dataset', DS, '--poll', '20'], {
      cwd: process.cwd(),
      env: { DATABASE_URL: urlAs(tdb, SVC), GENFILL_LOG_LEVEL: 'warn' },
    });
    await tdb.pool.query(`INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents) VALUES (100001, 1, 'north', '2025-07-02T12:00:00Z', 777)`);
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = 31337 WHERE order_id = 5`);
    await waitFor('the plain-login projector to apply the insert and the update', async () => (await amountIn(active, 100001)) === '777' && (await amountIn(active, 5)) === '31337', 30_000);
    const { rows } = await db.query(`SELECT usename FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'genfill-projector%'`);
    expect(rows.length).toBeGreaterThan(0);
    expect(new Set(rows.map((r) => r.usename))).toEqual(new Set([SVC]));
    expect(projector.stderr()).not.toMatch(/permission denied/);
  });

  it('beside it, the same login catches up, reconciles, cuts over and rolls back a release: the seals, the catch-up to B and the switches need nothing more', async () => {
    const svc = createPool({ DATABASE_URL: urlAs(tdb, SVC) } as never, 'trust-locks-svc', 4, { fleet: true });
    try {
      expect((await svc.query(`SELECT current_user AS u, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS su`)).rows[0]).toEqual({ u: SVC, su: false });
      await catchupRound(svc, 'late@1');
      const r = await reconcile(svc, 'late@1');
      expect(r.state).toBe('RECONCILED');
      await bob.query('SELECT * FROM genfill.approve($1, $2)', ['late@1', r.id]);
      const cut = await cutoverRelease(svc, 'late@1');
      expect(cut.ok).toBe(true);
      expect(await dataset()).toMatchObject({ active: 'g4', ingress: 'OPEN' });
      expect(await state('late@1')).toBe('ACTIVE');
      // And rolls it back (the rollback's seal, its replay into g3, the switch back).
      const back = await rollbackRelease(svc, 'late@1');
      expect(back).toMatchObject({ ok: true, from: 'g4', to: 'g3' });
    } finally {
      await svc.end();
    }
    expect(await dataset()).toMatchObject({ active: 'g3', ingress: 'OPEN' });
    expect(projector!.stderr()).not.toMatch(/permission denied/);
  });
});

describe('the switch', () => {
  it('a switch transaction that waits past its lock timeout is refused by name, switches nothing and undoes the seal', async () => {
    const before = await dataset();
    expect(before).toMatchObject({ active: 'g3', ingress: 'OPEN' });
    await builtRelease(db, { id: 'hold@1', generation: 'g5', expectedActive: 'g3', from: FROM, to: '2025-07-02T00:00:00Z' });
    await drain();
    await catchupRound(db, 'hold@1');
    const r = await reconcile(db, 'hold@1');
    expect(r.state).toBe('RECONCILED');
    await bob.query('SELECT * FROM genfill.approve($1, $2)', ['hold@1', r.id]);
    // A fleet session holds the candidate's generation row, which only the switch writes.
    const holder = await connectAs(SVC);
    const short = createPool({ DATABASE_URL: tdb.url, GENFILL_LOCK_TIMEOUT: 500 } as never, 'trust-locks-switch', 4);
    try {
      const err = await cutoverRelease(short, 'hold@1', {
        onStep: async (step) => {
          if (step !== 'verified') return;
          await holder.query('BEGIN');
          await holder.query(`SELECT 1 FROM genfill.generations WHERE dataset = $1 AND generation = 'g5' FOR UPDATE`, [DS]);
        },
      }).catch((e: unknown) => e);
      expect(err).toMatchObject({ name: 'SwitchRefusedError', check: 'switch', exitCode: 3 });
      expect((err as Error).message).toMatch(/^cutover refused: the switch transaction waited past its lock timeout \(canceling statement due to lock timeout\): nothing switched; .* run cutover again; /);
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      await short.end();
    }
    expect(await dataset()).toEqual({ active: 'g3', ingress: 'OPEN', epoch: before.epoch + 1 });
    expect(await state('hold@1')).toBe('APPROVED');
    expect((await one<{ state: string }>(`SELECT state FROM genfill.generations WHERE dataset = $1 AND generation = 'g5'`, [DS])).state).not.toBe('ACTIVE');
  });
});
