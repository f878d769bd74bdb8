// Retention of old generations (SPEC invariant 12; issue 18 parts 2 and 4): a generation that a
// cutover replaced is kept for its release's rollback window and its longest reader lease, then
// retired by the registry (RETIRED, a `retire` log row with the reason) and its table detached
// concurrently and dropped on an owner connection. A pinned reader paging through it while that
// happens gets 410 with the reason and never an SQL error or a short read; an interrupted
// DETACH … CONCURRENTLY is finalized by the next round; a login that may not act as the owner
// gets a message naming the grant; a release past its window loses its queue and Redis keys
// but keeps its receipts. Every release here has a rollbackWindow of one second.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { GenerationGoneError, loadConfig } from '@genfill/contracts';
import { createLogger, createMetricsRegistry } from '@genfill/observability';
import { releaseQueue } from '@genfill/queue';
import { readPage } from '@genfill/reads';
import { runReconcilerService } from '@genfill/reconcile';
import { createPool, type Db } from '@genfill/registry';
import { seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';
import { built, cutOver, DS, tempLogin } from './support/retention.ts';
import { waitFor } from './support/wait.ts';
import { cleanupRound, retentionRound, retentionStatus } from '@genfill/retention';

const tdb = await createTestDatabase('retention');
const tq = createTestQueues('retention');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'retention-test', 12);
const env = { DATABASE_URL: tdb.url };
const log = createLogger('retention-test', 'silent');
const FROM = '2025-07-01T00:00:00Z';
const TO = '2025-07-02T00:00:00Z';
const ROWS = 96;
let bob: Db;
let service: Awaited<ReturnType<typeof tempLogin>>;

const one = async <T = Record<string, unknown>>(q: string, v: unknown[] = []) => (await db.query(q, v)).rows[0] as T;
const generation = (g: string) => one<{ state: string }>('SELECT state FROM genfill.generations WHERE dataset = $1 AND generation = $2', [DS, g]);
const release = (id: string) => one<{ state: string }>('SELECT state FROM genfill.releases WHERE id = $1', [id]);
const tableOf = (g: string) =>
  one<{ present: boolean; pending: boolean | null }>(
    `SELECT to_regclass($1) IS NOT NULL AS present,
            (SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = to_regclass($1)) AS pending`,
    [`genfill_data.${DS}__${g}`],
  );
const windowEnded = (g: string) =>
  waitFor(`the rollback window of ${g} to end`, async () => {
    const s = (await retentionStatus(db, DS)).find((x) => x.generation === g);
    return s && !s.holds.some((h) => /window/.test(h)) ? s : null;
  });

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 2, perDay: 48 });
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
  // A service login that is not a member of genfill_owner (roles are cluster-wide: this test's own).
  service = await tempLogin(tdb.pool, tdb.url.replace(/\/[^/]*$/, '/postgres'), `gf_ret_svc_${process.pid}`, ['GRANT genfill_service TO $ROLE']);
  await cutOver(db, bob, { id: 'ret-a@1', generation: 'g3', expectedActive: 'g2', from: FROM, to: TO, rollbackWindow: 'PT1S' });
});
beforeEach(() => {
  keepOnFailure(tdb);
  keepQueuesOnFailure(tq);
});
afterAll(async () => {
  await service?.drop();
  await bob?.end();
  await db.end();
});

describe('retention of the generation a cutover replaced', () => {
  it('a live reader lease keeps it past the rollback window; status says until when, why and how big', async () => {
    const first = await readPage(db, { dataset: DS, generation: 'g2', holder: 'report-1', limit: 10, leaseTtlMs: 120_000 });
    expect(first.rows).toHaveLength(10);
    const kept = await windowEnded('g2');
    expect(kept).toMatchObject({ state: 'RETAINED', leftBy: 'cutover', leftByRelease: 'ret-a@1', rollbackWindow: '00:00:01', retirable: false, leaseHolder: 'report-1' });
    expect(kept.holds).toEqual([expect.stringMatching(/^reader lease report-1 until \d{4}-\d\d-\d\dT/)]);
    expect(Date.parse(kept.retainUntil!)).toBe(Date.parse(kept.leaseUntil!));
    expect(kept.bytes).toBeGreaterThan(0);

    const round = await retentionRound(db, log);
    expect(round.retired).toEqual([]);
    expect(round.kept).toEqual([{ dataset: DS, generation: 'g2', retainUntil: kept.retainUntil, holds: kept.holds }]);
    expect(await generation('g2')).toEqual({ state: 'RETAINED' });
    expect(await tableOf('g2')).toEqual({ present: true, pending: false });

    const text = await runCli(['status', '--dataset', DS], env);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/retained: 1 generation\n\s+g2 {2}RETAINED, replaced by ret-a@1 at \S+; kept until \S+ — [\d.]+ kB\n\s+why: reader lease report-1 until/);
    const json = JSON.parse((await runCli(['status', '--dataset', DS, '--json'], env)).stdout);
    expect(json.retained).toEqual([expect.objectContaining({ generation: 'g2', retirable: false, leaseHolder: 'report-1' })]);
    // An operator sees the same (people read the registry; the horizon's functions are granted to them).
    await tdb.pool.query('GRANT genfill_operator TO genfill_alice');
    const asAlice = await runCli(['status', '--dataset', DS], { DATABASE_URL: urlAs(tdb, 'genfill_alice') });
    expect(asAlice.stderr).toBe('');
    expect(asAlice.stdout).toMatch(/g2 {2}RETAINED, replaced by ret-a@1/);
    expect(asAlice.stdout).toMatch(/log horizon \d+:\d+:/);
  });

  it('after the lease expired, retirement does not disturb a reader paging through it: 410 with the reason, never an error or a short read', async () => {
    // The reader pages on with a 1 s lease; the clock of its lease is run out with SQL while
    // retention rounds run, so the retirement lands between two of its pages at some point.
    const reader = { passes: [] as number[], pages: 0, gone: null as GenerationGoneError | null, errors: [] as unknown[], partial: 0 };
    let stop = false;
    const reading = (async () => {
      let cursor: string | null = null;
      let rows = 0;
      while (!stop) {
        try {
          const p = await readPage(db, { dataset: DS, generation: 'g2', cursor, holder: 'report-1', limit: 7, leaseTtlMs: 1000 });
          reader.pages++;
          rows += p.rows.length;
          if (p.nextCursor) cursor = p.nextCursor;
          else {
            reader.passes.push(rows);
            rows = 0;
            cursor = null;
          }
        } catch (err) {
          if (err instanceof GenerationGoneError) reader.gone = err;
          else reader.errors.push(err);
          reader.partial = rows;
          return;
        }
      }
    })();
    const expiring = (async () => {
      while (!stop) {
        await tdb.pool.query(`UPDATE genfill.reader_leases SET expires_at = clock_timestamp() - interval '1 ms' WHERE generation = 'g2'`);
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    await waitFor('a few pages read', async () => reader.pages > 20);
    const rounds: Awaited<ReturnType<typeof retentionRound>>[] = [];
    await waitFor('the retirement of g2', async () => {
      const r = await retentionRound(db, log, { detachTimeoutMs: 20_000 });
      rounds.push(r);
      return r.dropped.some((d) => d.generation === 'g2');
    });
    await waitFor('the reader to stop', async () => reader.gone !== null || reader.errors.length > 0);
    stop = true;
    await Promise.all([reading, expiring]);

    expect(reader.errors).toEqual([]);
    expect(reader.passes.length).toBeGreaterThan(0);
    expect(reader.passes.every((n) => n === ROWS)).toBe(true);
    expect(reader.gone!.reason).toMatch(
      /^generation g2 of orders_enriched was retired at \S+ by \S+ \(the rollback window of ret-a@1 \(00:00:01 from its cutover at \S+\) ended at \S+; the last reader lease expired at \S+\)/,
    );
    expect(reader.gone!.reason).toMatch(/read the active generation instead/);
    const retired = rounds.flatMap((r) => r.retired);
    expect(retired).toEqual([{ dataset: DS, generation: 'g2', releases: [], reason: expect.stringMatching(/^the rollback window of ret-a@1/) }]);

    expect(await generation('g2')).toEqual({ state: 'RETIRED' });
    expect(await tableOf('g2')).toEqual({ present: false, pending: null });
    expect(await one(`SELECT count(*)::int AS n FROM genfill.frontiers WHERE generation = 'g2'`)).toEqual({ n: 0 });
    const logs = (await db.query(`SELECT action, generation, detail->>'reason' AS reason FROM genfill.dataset_log WHERE generation = 'g2' AND action NOT LIKE 'adopt%' ORDER BY id`)).rows;
    expect(logs.map((l) => l.action)).toEqual(['retire', 'generation-dropped']);
    // The user's view and the new generation never noticed.
    expect(await one(`SELECT count(*)::int AS n FROM public.orders_enriched`)).toEqual({ n: ROWS });
    // A new read of it is refused the same way (exit 3 from the CLI).
    const cli = await runCli(['read', DS, '--generation', 'g2'], env);
    expect(cli.code).toBe(3);
    expect(cli.stderr).toMatch(/generation g2 of orders_enriched was retired at .* \(the rollback window of ret-a@1/);
  });
});

describe('a second cutover: the superseded release retires with its generation', () => {
  it('a page in flight holds the retirement off until it commits, and the lease it renewed keeps the generation', async () => {
    await cutOver(db, bob, { id: 'ret-b@1', generation: 'g4', expectedActive: 'g3', from: FROM, to: TO, rollbackWindow: 'PT1S' });
    expect(await release('ret-a@1')).toEqual({ state: 'SUPERSEDED' });
    // A reader whose lease ran out (backdated) reads its next page while retention runs.
    await readPage(db, { dataset: DS, generation: 'g3', holder: 'slow-report', limit: 1, leaseTtlMs: 1000 });
    await tdb.pool.query(`UPDATE genfill.reader_leases SET expires_at = clock_timestamp() - interval '1 s' WHERE generation = 'g3'`);
    await waitFor('g3 to be retirable', async () => (await retentionStatus(db, DS)).find((g) => g.generation === 'g3')?.retirable);
    const page = new pg.Client({ connectionString: tdb.url });
    await page.connect();
    await page.query('BEGIN');
    await page.query(`SELECT genfill.reader_lease($1, 'g3', 'slow-report', 1000)`, [DS]);
    const round = retentionRound(db, log);
    await waitFor('the retirement to wait for the page', async () => {
      const { rows } = await tdb.pool.query(`SELECT 1 FROM pg_stat_activity WHERE query ILIKE '%retire_generation%' AND wait_event_type = 'Lock'`);
      return rows.length > 0;
    });
    // The page reads its whole generation: nothing was detached under it.
    expect((await page.query(`SELECT count(*)::int AS n FROM genfill_data.${DS} WHERE generation = 'g3'`)).rows[0]).toEqual({ n: ROWS });
    await page.query('COMMIT');
    await page.end();
    const r = await round;
    expect(r.retired).toEqual([]);
    expect(r.kept).toEqual([{ dataset: DS, generation: 'g3', retainUntil: expect.any(String), holds: [expect.stringMatching(/^generation g3 of orders_enriched is kept: reader lease slow-report until /)] }]);
    expect(await generation('g3')).toEqual({ state: 'RETAINED' });
    await waitFor('the renewed lease to run out', async () => (await retentionStatus(db, DS)).find((g) => g.generation === 'g3')?.retirable);
  });

  it('without an owner connection the registry retires it and the table stays, with the grant named', async () => {
    const svc = new pg.Pool({ connectionString: urlAs(tdb, service.name), max: 2 });
    try {
      const r = await retentionRound(svc, log);
      expect(r.retired).toEqual([{ dataset: DS, generation: 'g3', releases: ['ret-a@1'], reason: expect.stringMatching(/rollback window of ret-b@1/) }]);
      expect(r.dropped).toEqual([]);
      expect(r.owner).toMatch(new RegExp(`the login ${service.name} \\(DATABASE_URL\\) is not a member of genfill_owner.*GRANT genfill_owner TO ${service.name}, or set GENFILL_OWNER_DATABASE_URL`));
      expect(r.pending).toEqual([{ dataset: DS, generation: 'g3', table: `${DS}__g3`, why: r.owner }]);
    } finally {
      await svc.end();
    }
    expect(await release('ret-a@1')).toEqual({ state: 'RETIRED' });
    expect(await one(`SELECT from_state, to_state, reason FROM genfill.release_log WHERE release = 'ret-a@1' AND action = 'retire'`)).toEqual({
      from_state: 'SUPERSEDED',
      to_state: 'RETIRED',
      reason: expect.stringMatching(/^the rollback window of ret-b@1/),
    });
    expect(await tableOf('g3')).toEqual({ present: true, pending: false });
    const text = await runCli(['status', '--dataset', DS], env);
    expect(text.stdout).toMatch(/g3 {2}RETIRED, its table is still attached — .*the reconciler drops it/);
  });

  it('rollback of the release that replaced it is refused once it is retired', async () => {
    expect(await one(`SELECT genfill.rollback_refusal('ret-b@1') AS why`)).toEqual({
      why: expect.stringMatching(/^generation g3, which ret-b@1 replaced, is retired: it can no longer take readers back/),
    });
  });

  it('an interrupted DETACH … CONCURRENTLY is finalized by the next round, then the table dropped', async () => {
    // A reader of the parent keeps the detach waiting; its backend is killed mid-wait.
    const holder = new pg.Client({ connectionString: tdb.url });
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query(`SELECT count(*) FROM genfill_data.${DS}`);
    const round = retentionRound(db, log, { detachTimeoutMs: 60_000 }).catch((e: Error) => e);
    const pid = await waitFor('the DETACH to wait', async () => {
      const { rows } = await tdb.pool.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE query ILIKE 'ALTER TABLE%DETACH PARTITION%CONCURRENTLY' AND wait_event_type = 'Lock'`);
      return rows[0]?.pid;
    });
    expect(await tableOf('g3')).toEqual({ present: true, pending: true });
    await tdb.pool.query('SELECT pg_terminate_backend($1)', [pid]);
    expect(await round).toBeInstanceOf(Error);
    await holder.query('COMMIT');
    await holder.end();
    expect(await tableOf('g3')).toEqual({ present: true, pending: true });
    const s = (await retentionStatus(db, DS)).find((g) => g.generation === 'g3');
    expect(s).toMatchObject({ state: 'RETIRED', tableAttached: true, detachPending: true });

    const next = await retentionRound(db, log);
    expect(next.dropped).toEqual([{ dataset: DS, generation: 'g3', table: `${DS}__g3`, bytes: expect.any(Number), finalized: true }]);
    expect(await tableOf('g3')).toEqual({ present: false, pending: null });
    expect(await retentionStatus(db, DS)).toEqual([]);
    expect(await one(`SELECT detail->>'finalized' AS f FROM genfill.dataset_log WHERE generation = 'g3' AND action = 'generation-dropped'`)).toEqual({ f: 'true' });
  });
});

describe('cleanup after the rollback window', () => {
  it('the reconciler service removes the queue and Redis keys of a retired release, keeps its receipts, and does it once', async () => {
    // What dispatch left of ret-a@1: a job, a throttle leader key, the throttle's fencing row.
    const q = releaseQueue('ret-a@1', { connection: tq.redis, prefix: tq.prefix });
    await q.add('build', { release: 'ret-a@1', partition: 'b-20250701T000000Z', epoch: 0 }, { jobId: 'b-20250701T000000Z.e0' });
    await q.close();
    await tq.redis.set(`${tq.prefix}:throttle:ret-a@1:leader`, 'worker-1');
    const keepB = releaseQueue('ret-b@1', { connection: tq.redis, prefix: tq.prefix });
    await keepB.add('build', { release: 'ret-b@1', partition: 'b-20250701T000000Z', epoch: 0 }, { jobId: 'b-20250701T000000Z.e0' });
    await keepB.close();
    await tdb.pool.query(`INSERT INTO genfill.throttle_leases (release, token, holder) VALUES ('ret-a@1', 3, 'worker-1')`);
    const receipts = await one<{ n: number }>(`SELECT count(*)::int AS n FROM genfill.receipts WHERE release = 'ret-a@1'`);
    expect(receipts.n).toBeGreaterThan(0);
    const keysOf = async (id: string) => (await tq.keys()).filter((k) => k.includes(`release.${id}:`) || k.includes(`throttle:${id}:`));
    expect((await keysOf('ret-a@1')).length).toBeGreaterThan(1);

    const registry = createMetricsRegistry('reconciler');
    const config = loadConfig({ DATABASE_URL: tdb.url, REDIS_URL, GENFILL_QUEUE_PREFIX: tq.prefix });
    const run = await runReconcilerService({ config, log, db, registry, intervalSeconds: 1, once: true });
    const cleanup = run.last!.housekeeping!.cleanup!;
    expect(cleanup.cleaned).toEqual([{ release: 'ret-a@1', state: 'RETIRED', queue: `${tq.prefix}:release.ret-a@1`, jobs: 1, keys: 1 }]);
    expect(await keysOf('ret-a@1')).toEqual([]);
    expect((await keysOf('ret-b@1')).length).toBeGreaterThan(0);
    expect(await one(`SELECT count(*)::int AS n FROM genfill.receipts WHERE release = 'ret-a@1'`)).toEqual(receipts);
    expect(await one(`SELECT count(*)::int AS n FROM genfill.throttle_leases WHERE release = 'ret-a@1'`)).toEqual({ n: 0 });
    expect(await one(`SELECT count(*)::int AS n FROM genfill.reconciliations WHERE release = 'ret-a@1'`)).toEqual({ n: 1 });
    const metrics = await registry.metrics();
    expect(metrics).toMatch(/^genfill_log_horizon_age_seconds\{service="reconciler"\} [\d.e+-]+$/m);
    expect(metrics).toMatch(/^genfill_log_partitions_prunable\{service="reconciler"\} 0$/m);
    expect(metrics).toMatch(/^genfill_releases_cleaned_total\{service="reconciler"\} 1$/m);

    // Idempotent: nothing is due any more, and a second round touches nothing.
    const again = await cleanupRound(db, log, { redis: tq.redis, prefix: tq.prefix });
    expect(again.cleaned).toEqual([]);
    expect(await one(`SELECT count(*)::int AS n FROM genfill.release_log WHERE release = 'ret-a@1' AND action = 'cleanup'`)).toEqual({ n: 1 });
    expect(await one(`SELECT detail FROM genfill.release_log WHERE release = 'ret-a@1' AND action = 'cleanup'`)).toEqual({
      detail: expect.objectContaining({ queue: `${tq.prefix}:release.ret-a@1`, jobs: 1, redisKeys: 1, state: 'RETIRED', throttleLeaseRows: 1 }),
    });
  });
  it('an abandoned candidate is retired after the cancelled release\'s window, and the release cleaned up then, not before', async () => {
    await built(db, { id: 'ret-c@1', generation: 'g9', expectedActive: 'g4', from: FROM, to: TO, rollbackWindow: 'PT5S' });
    const q = releaseQueue('ret-c@1', { connection: tq.redis, prefix: tq.prefix });
    await q.add('build', { release: 'ret-c@1', partition: 'b-20250701T000000Z', epoch: 1 }, { jobId: 'b-20250701T000000Z.e1' });
    await q.close();
    await db.query(`SELECT genfill.cancel_release('ret-c@1', 'not needed', NULL)`);
    expect(await generation('g9')).toEqual({ state: 'ABANDONED' });
    const early = await cleanupRound(db, log, { redis: tq.redis, prefix: tq.prefix });
    expect(early.cleaned.map((c) => c.release)).not.toContain('ret-c@1');
    const [kept] = await retentionStatus(db, DS);
    expect(kept).toMatchObject({ generation: 'g9', state: 'ABANDONED', leftBy: 'cancel', leftByRelease: 'ret-c@1', retirable: false });
    expect(kept!.holds).toEqual([expect.stringMatching(/^window after the cancel of ret-c@1 until /)]);

    await windowEnded('g9');
    const r = await retentionRound(db, log);
    expect(r.retired).toEqual([{ dataset: DS, generation: 'g9', releases: [], reason: expect.stringMatching(/^abandoned by the cancel of ret-c@1 at \S+, kept 00:00:05, until /) }]);
    expect(r.dropped.map((d) => d.generation)).toEqual(['g9']);
    expect(await generation('g9')).toEqual({ state: 'RETIRED' });
    expect(await release('ret-c@1')).toEqual({ state: 'CANCELLED' });
    const late = await cleanupRound(db, log, { redis: tq.redis, prefix: tq.prefix });
    expect(late.cleaned).toEqual([expect.objectContaining({ release: 'ret-c@1', state: 'CANCELLED', jobs: 1 })]);
    expect((await tq.keys()).filter((k) => k.includes('release.ret-c@1:'))).toEqual([]);
  });
});
