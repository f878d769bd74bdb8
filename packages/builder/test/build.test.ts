// One partition into the candidate: claims, fencing, receipts, final failures (SPEC
// invariants 3, 4 and 5 for builds). The queue is not involved: these are the registry's rules.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { PartitionFailedError, StaleLeaseError } from '@genfill/contracts';
import { planRelease, submitRelease } from '@genfill/planner';
import { casTransition, createPool, migrate, withTransaction } from '@genfill/registry';
import { buildPartition, claimPartition, failPartition } from '../src/index.ts';
import { releaseLease, renewLease, whileLeased } from '../src/claim.ts';
import { createTestDatabase, keepOnFailure } from '../../../test/support/db.ts';
import { captureAsOwner, createExampleSchema, firstGenerationRelease, workspace, writeRelease } from '../../../test/support/fixtures.ts';

const tdb = await createTestDatabase('build');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'build-test');

/** Submit, plan and move to BUILDING a release over [from, to) (daily partitions). */
async function building(id: string, opts: { from: string; to: string; dataset: string; transform?: string; deps?: string[] }): Promise<void> {
  const r = firstGenerationRelease();
  r.release = id;
  r.dataset = opts.dataset;
  r.target.table = `public.${opts.dataset}`;
  r.target.generation = 'g1';
  r.range = { from: opts.from, to: opts.to };
  if (opts.deps) r.dependencies = opts.deps;
  await submitRelease(writeRelease(workspace(), r, { transform: opts.transform }), db);
  await planRelease(db, id);
  await withTransaction(db, (c) => casTransition(c, { release: id, from: 'SNAPSHOT_PINNED', to: 'BUILDING', action: 'plan' }));
}

const claim = (release: string, partition: string, worker = 'w1', leaseMs = 60_000) => claimPartition(db, { release, partition, worker, leaseMs });
const count = async (sql: string, values: unknown[] = []) => Number((await db.query(sql, values)).rows[0].n);

beforeAll(async () => {
  await migrate(db);
  await createExampleSchema(tdb.pool);
  // Orders on 2025-07-01..03, one exactly at `from` and one exactly at `to` of the 3-day release.
  await tdb.pool.query(`
    INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents)
    SELECT i, i % 7, (ARRAY['north', 'south', 'east'])[1 + i % 3], timestamptz '2025-07-01' + (i - 1) * interval '7 minutes', 1000 + i
      FROM generate_series(1, 1234) AS i;
    INSERT INTO public.orders VALUES (5001, 1, 'north', '2025-07-04T00:00:00Z', 500), (5002, 1, 'south', '2025-06-30T23:59:59.999999Z', 700);`);
  await building('three-days@1', { from: '2025-07-01T00:00:00Z', to: '2025-07-04T00:00:00Z', dataset: 'orders_three' });
}, 120_000);
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

describe('claim and build', () => {
  it('builds a partition with its receipt in one transaction and marks it BUILT', async () => {
    const c = await claim('three-days@1', 'b-20250701T000000Z');
    expect(c).toMatchObject({ kind: 'claimed', attempt: 1 });
    const res = await buildPartition(db, { release: 'three-days@1', partition: 'b-20250701T000000Z', attempt: 1 });
    const inDay = await count(`SELECT count(*) AS n FROM public.orders WHERE created_at >= '2025-07-01' AND created_at < '2025-07-02'`);
    expect(res).toMatchObject({ rowsIn: inDay, rowsOut: inDay, inserted: inDay, releaseBuilt: false });
    const receipt = (await db.query(`SELECT * FROM genfill.receipts WHERE release = 'three-days@1' AND partition = 'b-20250701T000000Z'`)).rows;
    expect(receipt).toHaveLength(1);
    expect(receipt[0]).toMatchObject({ attempt: 1, kind: 'build', rows_in: String(inDay), rows_out: String(inDay) });
    expect(receipt[0].conserved_sums.amount_cents.source).toBe(receipt[0].conserved_sums.amount_cents.candidate);
    expect(Object.keys(receipt[0].timings)).toEqual(expect.arrayContaining(['claim', 'prepare', 'statement', 'fence', 'total']));
    // The roots are recomputable from the stored rows with the shared definition.
    const roots = (await db.query(`
      SELECT mod(mod(sum(genfill.row_hash(ARRAY[genfill.canon(order_id)]::text[])), 18446744073709551616) + 18446744073709551616, 18446744073709551616)::text AS k
        FROM genfill_data.orders_three__g1 WHERE created_at >= '2025-07-01' AND created_at < '2025-07-02'`)).rows[0];
    expect(roots.k).toBe(receipt[0].key_root);
    const rows = await db.query(`SELECT DISTINCT _gf_rev, _gf_deleted FROM genfill_data.orders_three__g1`);
    expect(rows.rows).toEqual([{ _gf_rev: '0', _gf_deleted: false }]);
    expect((await db.query(`SELECT status FROM genfill.partitions WHERE release = 'three-days@1' AND id = 'b-20250701T000000Z'`)).rows[0].status).toBe('BUILT');
  });

  it('finds the receipt when the job is delivered again after its acknowledgement was lost, and writes nothing', async () => {
    const before = await count(`SELECT count(*) AS n FROM genfill_data.orders_three__g1`);
    expect(await claim('three-days@1', 'b-20250701T000000Z')).toEqual({ kind: 'built' });
    expect(await count(`SELECT count(*) AS n FROM genfill_data.orders_three__g1`)).toBe(before);
    expect(await count(`SELECT count(*) AS n FROM genfill.receipts WHERE partition = 'b-20250701T000000Z'`)).toBe(1);
  });

  it('fences the older of two workers on one partition: one receipt, the other writes nothing', async () => {
    const a = await claim('three-days@1', 'b-20250702T000000Z', 'worker-a');
    // Worker A stalls past its lease; the job is delivered to worker B.
    expect(await claim('three-days@1', 'b-20250702T000000Z', 'worker-b')).toMatchObject({ kind: 'refused', reason: 'leased' });
    await db.query(`UPDATE genfill.partitions SET lease_expires_at = now() - interval '1 second' WHERE id = 'b-20250702T000000Z'`);
    const b = await claim('three-days@1', 'b-20250702T000000Z', 'worker-b');
    expect([a, b]).toMatchObject([{ kind: 'claimed', attempt: 1 }, { kind: 'claimed', attempt: 2 }]);
    await expect(buildPartition(db, { release: 'three-days@1', partition: 'b-20250702T000000Z', attempt: 1 })).rejects.toBeInstanceOf(StaleLeaseError);
    expect(await count(`SELECT count(*) AS n FROM genfill_data.orders_three__g1 WHERE created_at >= '2025-07-02' AND created_at < '2025-07-03'`)).toBe(0);
    await buildPartition(db, { release: 'three-days@1', partition: 'b-20250702T000000Z', attempt: 2 });
    const receipts = (await db.query(`SELECT attempt FROM genfill.receipts WHERE partition = 'b-20250702T000000Z'`)).rows;
    expect(receipts).toEqual([{ attempt: 2 }]);
  });

  it('lets a claim take over a lease that has run out, fencing the old holder', async () => {
    const a = await claim('three-days@1', 'b-20250703T000000Z', 'worker-a', 0);
    expect(a).toMatchObject({ kind: 'claimed', attempt: 1 });
    const b = await claim('three-days@1', 'b-20250703T000000Z', 'worker-b');
    expect(b).toMatchObject({ kind: 'claimed', attempt: 2 });
    await expect(buildPartition(db, { release: 'three-days@1', partition: 'b-20250703T000000Z', attempt: 1 })).rejects.toBeInstanceOf(StaleLeaseError);
  });

  it('keeps a lease while its build runs: renewed past its first expiry, so a second claimer waits instead of taking over', async () => {
    // worker-b gives its lease back (a retryable failure), worker-c claims with a 600 ms lease.
    await releaseLease(db, { release: 'three-days@1', partition: 'b-20250703T000000Z', attempt: 2 });
    const held = (await claim('three-days@1', 'b-20250703T000000Z', 'worker-c', 600)) as { attempt: number };
    expect(held.attempt).toBe(3);
    const expiry = async () => (await db.query(`SELECT lease_expires_at AS t FROM genfill.partitions WHERE release = 'three-days@1' AND id = 'b-20250703T000000Z'`)).rows[0].t as Date;
    const first = await expiry();
    const lease = { release: 'three-days@1', partition: 'b-20250703T000000Z', attempt: held.attempt, leaseMs: 600 };
    await whileLeased(db, lease, async () => {
      // The "build": it outlives the first lease; the renewal keeps pushing the expiry out.
      while ((await expiry()).getTime() <= first.getTime() + 300) await new Promise((r) => setTimeout(r, 50));
      expect(await claim('three-days@1', 'b-20250703T000000Z', 'worker-d')).toMatchObject({ kind: 'refused', reason: 'leased' });
    });
    expect(await renewLease(db, { ...lease, attempt: held.attempt - 1 })).toBe(false);
  });

  it('moves the release to BUILT with the receipt that completes the manifest, and puts a row at `to` nowhere', async () => {
    const res = await buildPartition(db, { release: 'three-days@1', partition: 'b-20250703T000000Z', attempt: 3 });
    expect(res.releaseBuilt).toBe(true);
    const st = (await db.query(`SELECT state FROM genfill.releases WHERE id = 'three-days@1'`)).rows[0].state;
    expect(st).toBe('BUILT');
    const log = (await db.query(`SELECT action, from_state, to_state FROM genfill.release_log WHERE release = 'three-days@1' AND action = 'built'`)).rows;
    expect(log).toEqual([{ action: 'built', from_state: 'BUILDING', to_state: 'BUILT' }]);
    const keys = (await db.query(`SELECT order_id FROM genfill_data.orders_three__g1 WHERE order_id IN (1, 5001, 5002) ORDER BY 1`)).rows;
    // order 1 is exactly at `from` (first partition); 5001 exactly at `to` and 5002 just before `from` are in none.
    expect(keys).toEqual([{ order_id: '1' }]);
    const source = await count(`SELECT count(*) AS n FROM public.orders WHERE created_at >= '2025-07-01' AND created_at < '2025-07-04'`);
    expect(await count(`SELECT count(*) AS n FROM genfill_data.orders_three__g1`)).toBe(source);
    expect(await count(`SELECT count(*) AS n FROM genfill.receipts WHERE release = 'three-days@1'`)).toBe(3);
  });
});

describe('a candidate that already holds a key', () => {
  it('keeps the newer row an event wrote and builds the rest of the partition', async () => {
    await building('held@1', { from: '2025-07-01T00:00:00Z', to: '2025-07-02T00:00:00Z', dataset: 'orders_held' });
    await db.query(`INSERT INTO genfill_data.orders_held__g1 (generation, order_id, created_at, region, amount_cents, tax_cents, _gf_rev)
                    VALUES ('g1', 5, '2025-07-01T00:28:00Z', 'north', 1, 1, 42)`);
    const c = (await claim('held@1', 'b-20250701T000000Z')) as { attempt: number };
    const res = await buildPartition(db, { release: 'held@1', partition: 'b-20250701T000000Z', attempt: c.attempt });
    expect(res.timings.safePath).toBe(1);
    expect(res.inserted).toBe(res.rowsOut - 1);
    const kept = (await db.query(`SELECT amount_cents, _gf_rev FROM genfill_data.orders_held__g1 WHERE order_id = 5`)).rows;
    expect(kept).toEqual([{ amount_cents: '1', _gf_rev: '42' }]);
    const n = await count(`SELECT count(*) AS n FROM genfill_data.orders_held__g1`);
    expect(n).toBe(res.rowsOut);
  });
});

describe('a crash between the rows and the receipt', () => {
  it('leaves neither: the backend killed after inserting, before its receipt, committed nothing', async () => {
    await building('crash@1', { from: '2025-07-01T00:00:00Z', to: '2025-07-02T00:00:00Z', dataset: 'orders_crash' });
    const c = (await claim('crash@1', 'b-20250701T000000Z')) as { attempt: number };
    // Hold the release row so the build stops right after its statement wrote the rows: its
    // commit (genfill.commit_partition) waits for the row lock before the fence and receipt.
    const holder = new pg.Client({ connectionString: tdb.url });
    await holder.connect();
    await holder.query('BEGIN');
    await holder.query(`SELECT 1 FROM genfill.releases WHERE id = 'crash@1' FOR UPDATE`);
    const victim = createPool({ DATABASE_URL: tdb.url } as never, 'crash-victim', 1);
    const build = buildPartition(victim, { release: 'crash@1', partition: 'b-20250701T000000Z', attempt: c.attempt }).catch((e) => e);
    const pid = await (async () => {
      for (;;) {
        const { rows } = await db.query(
          `SELECT pid FROM pg_stat_activity WHERE application_name = 'crash-victim' AND wait_event_type = 'Lock' AND query LIKE '%commit_partition%'`,
        );
        if (rows[0]) return rows[0].pid as number;
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    // The rows are written but not committed: the crash comes now.
    await db.query('SELECT pg_terminate_backend($1)', [pid]);
    expect(await build).toBeInstanceOf(Error);
    await holder.query('ROLLBACK');
    await holder.end();
    await victim.end().catch(() => undefined);
    expect(await count(`SELECT count(*) AS n FROM genfill_data.orders_crash__g1`)).toBe(0);
    expect(await count(`SELECT count(*) AS n FROM genfill.receipts WHERE release = 'crash@1'`)).toBe(0);
    const p = (await db.query(`SELECT status, attempt FROM genfill.partitions WHERE release = 'crash@1'`)).rows[0];
    expect(p).toEqual({ status: 'RUNNING', attempt: c.attempt });
  });
});

describe('watermarks', () => {
  it('records the statement snapshot: a transaction in flight during the build is neither in the rows nor visible in the watermark', async () => {
    await building('watermark@1', { from: '2025-07-01T00:00:00Z', to: '2025-07-02T00:00:00Z', dataset: 'orders_wm' });
    const writer = new pg.Client({ connectionString: tdb.url });
    await writer.connect();
    try {
      await writer.query('BEGIN');
      await writer.query(`INSERT INTO public.orders VALUES (9001, 1, 'north', '2025-07-01T12:00:00Z', 900)`);
      const xid = (await writer.query('SELECT pg_current_xact_id()::text AS x')).rows[0].x;
      const c = await claim('watermark@1', 'b-20250701T000000Z');
      const res = await buildPartition(db, { release: 'watermark@1', partition: 'b-20250701T000000Z', attempt: (c as { attempt: number }).attempt });
      await writer.query('COMMIT');
      const seen = (await db.query(`SELECT pg_visible_in_snapshot($1::xid8, $2::pg_snapshot) AS v`, [xid, res.watermark])).rows[0].v;
      expect(seen).toBe(false);
      expect(await count(`SELECT count(*) AS n FROM genfill_data.orders_wm__g1 WHERE order_id = 9001`)).toBe(0);
      const committedBefore = (await db.query(`SELECT pg_visible_in_snapshot(xmin::text::xid8, $1::pg_snapshot) AS v FROM public.orders WHERE order_id = 1`, [res.watermark])).rows[0];
      expect(committedBefore.v).toBe(true);
    } finally {
      await writer.end();
    }
  });
});

describe('final failures write nothing', () => {
  it('fails a partition DEPENDENCY_CHANGED when a pinned dependency changed after plan', async () => {
    await building('deps@1', { from: '2025-07-01T00:00:00Z', to: '2025-07-02T00:00:00Z', dataset: 'orders_deps' });
    await tdb.pool.query(`UPDATE public.tax_rates SET rate = 0.21 WHERE region = 'north'`);
    try {
      const c = (await claim('deps@1', 'b-20250701T000000Z')) as { attempt: number };
      const err = await buildPartition(db, { release: 'deps@1', partition: 'b-20250701T000000Z', attempt: c.attempt }).catch((e) => e);
      expect(err).toBeInstanceOf(PartitionFailedError);
      expect(err.reason).toBe('DEPENDENCY_CHANGED');
      expect(err.evidence.changed[0].relation).toBe('public.tax_rates');
      expect(await count(`SELECT count(*) AS n FROM genfill_data.orders_deps__g1`)).toBe(0);
      expect(await failPartition(db, { release: 'deps@1', partition: 'b-20250701T000000Z', attempt: c.attempt, reason: err.reason, evidence: err.evidence })).toBe(true);
      const p = (await db.query(`SELECT status, reason FROM genfill.partitions WHERE release = 'deps@1'`)).rows[0];
      expect(p).toEqual({ status: 'FAILED', reason: 'DEPENDENCY_CHANGED' });
      expect(await claim('deps@1', 'b-20250701T000000Z')).toEqual({ kind: 'refused', reason: 'failed', retryInMs: null });
    } finally {
      await tdb.pool.query(`UPDATE public.tax_rates SET rate = 0.19 WHERE region = 'north'`);
    }
  });

  it('stops a transform that joins duplicated reference rows with JOIN_FANOUT and the keys, before any write', async () => {
    // A surrogate key, so its owner can capture it (plan refuses an uncaptured dependency); the
    // regions still repeat.
    await tdb.pool.query(`CREATE TABLE public.rate_history (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, region text NOT NULL, rate numeric(6,4) NOT NULL);
      INSERT INTO public.rate_history (region, rate) VALUES ('north', 0.19), ('south', 0.07), ('east', 0.2), ('east', 0.21);`);
    await captureAsOwner(tdb.pool, 'public.rate_history');
    const fanout = `SELECT s.order_id, s.created_at, s.region, s.amount_cents, round(s.amount_cents * h.rate)::bigint AS tax_cents
                      FROM source AS s JOIN public.rate_history AS h ON h.region = s.region`;
    await building('fanout@1', { from: '2025-07-01T00:00:00Z', to: '2025-07-02T00:00:00Z', dataset: 'orders_fan', transform: fanout, deps: ['public.rate_history'] });
    const c = (await claim('fanout@1', 'b-20250701T000000Z')) as { attempt: number };
    const err = await buildPartition(db, { release: 'fanout@1', partition: 'b-20250701T000000Z', attempt: c.attempt }).catch((e) => e);
    expect(err).toBeInstanceOf(PartitionFailedError);
    expect(err.reason).toBe('JOIN_FANOUT');
    const east = await count(`SELECT count(*) AS n FROM public.orders WHERE region = 'east' AND created_at >= '2025-07-01' AND created_at < '2025-07-02'`);
    expect(err.evidence.keys).toBe(east);
    expect(err.evidence.sample[0]).toMatch(/^\(\d+\)$/);
    expect(await count(`SELECT count(*) AS n FROM genfill_data.orders_fan__g1`)).toBe(0);
    expect(await count(`SELECT count(*) AS n FROM genfill.receipts WHERE release = 'fanout@1'`)).toBe(0);
  });

  it('fails TRANSFORM_ERROR when the transform breaks on the data', async () => {
    const divide = `SELECT s.order_id, s.created_at, s.region, s.amount_cents, (s.amount_cents / (s.order_id - 3))::bigint AS tax_cents FROM source AS s`;
    await building('divide@1', { from: '2025-07-01T00:00:00Z', to: '2025-07-02T00:00:00Z', dataset: 'orders_div', transform: divide, deps: [] });
    const c = (await claim('divide@1', 'b-20250701T000000Z')) as { attempt: number };
    const err = await buildPartition(db, { release: 'divide@1', partition: 'b-20250701T000000Z', attempt: c.attempt }).catch((e) => e);
    expect(err).toBeInstanceOf(PartitionFailedError);
    expect(err.reason).toBe('TRANSFORM_ERROR');
    expect(err.evidence.sqlstate).toBe('22012');
  });
});

describe('pause and cancel', () => {
  it('writes nothing when the release stopped building between the claim and the commit', async () => {
    await building('late@1', { from: '2025-07-01T00:00:00Z', to: '2025-07-02T00:00:00Z', dataset: 'orders_late' });
    const c = (await claim('late@1', 'b-20250701T000000Z')) as { attempt: number };
    await withTransaction(db, (x) => casTransition(x, { release: 'late@1', from: 'BUILDING', to: 'CANCELLED', action: 'cancel' }));
    await expect(buildPartition(db, { release: 'late@1', partition: 'b-20250701T000000Z', attempt: c.attempt })).rejects.toThrow(/CANCELLED, no longer BUILDING/);
    expect(await count(`SELECT count(*) AS n FROM genfill_data.orders_late__g1`)).toBe(0);
    expect(await count(`SELECT count(*) AS n FROM genfill.receipts WHERE release = 'late@1'`)).toBe(0);
  });

  it('refuses claims while paused without spending an attempt, and for good once cancelled', async () => {
    await building('paused@1', { from: '2025-07-01T00:00:00Z', to: '2025-07-02T00:00:00Z', dataset: 'orders_pause' });
    await db.query(`UPDATE genfill.releases SET operator_paused = true WHERE id = 'paused@1'`);
    expect(await claim('paused@1', 'b-20250701T000000Z')).toEqual({ kind: 'refused', reason: 'operator_paused', retryInMs: 5000 });
    await db.query(`UPDATE genfill.releases SET operator_paused = false, throttle_paused = true WHERE id = 'paused@1'`);
    expect(await claim('paused@1', 'b-20250701T000000Z')).toMatchObject({ kind: 'refused', reason: 'throttle_paused' });
    expect((await db.query(`SELECT attempt FROM genfill.partitions WHERE release = 'paused@1'`)).rows[0].attempt).toBe(0);
    await withTransaction(db, (c) => casTransition(c, { release: 'paused@1', from: 'BUILDING', to: 'CANCELLED', action: 'cancel' }));
    expect(await claim('paused@1', 'b-20250701T000000Z')).toEqual({ kind: 'refused', reason: 'cancelled', retryInMs: null });
  });
});

