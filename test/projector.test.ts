// The projector (SPEC invariant 6, the projector row of "Parts"): after adopt, the change log
// of the source reaches the active generation through the transform map, version-aware, with
// tombstones; a poison event stops it naming the key; a dependency change flags the dataset.
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '@genfill/observability';
import { projectDataset, projectorStatus, runBatch } from '@genfill/projector';
import { createPool } from '@genfill/registry';
import { LEGACY_TRANSFORM, plannedRelease, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';

const tdb = await createTestDatabase('projector');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'projector-test', 8);
const env = { DATABASE_URL: tdb.url };
const log = createLogger('projector-test', 'silent');
const GEN = `genfill_data."orders_enriched__g2"`;

/** The transform map (one unbounded entry: the legacy transform) applied to the source now. */
const EXPECTED = `SELECT t.order_id, t.created_at, t.region, t.amount_cents, t.tax_cents
  FROM (${LEGACY_TRANSFORM.replace('FROM source AS s', 'FROM public.orders AS s')}) AS t`;
const VIEW = `SELECT order_id, created_at, region, amount_cents, tax_cents FROM public.orders_enriched`;

async function diff(): Promise<{ missing: number; extra: number }> {
  const { rows } = await tdb.pool.query(
    `SELECT (SELECT count(*)::int FROM (${EXPECTED} EXCEPT ${VIEW}) a) AS missing, (SELECT count(*)::int FROM (${VIEW} EXCEPT ${EXPECTED}) b) AS extra`,
  );
  return rows[0];
}

const drain = (o: Partial<Parameters<typeof projectDataset>[1]> = {}) => projectDataset('orders_enriched', { db, log, untilIdle: true, id: 'test-holder', leaseMs: 2000, ...o });

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: '2025-07-01T00:00:00Z', days: 5, perDay: 240 });
  await db.query('GRANT SELECT ON public.orders_enriched TO genfill_alice');
});
beforeEach(() => keepOnFailure(tdb));

describe('adopt starts the live path', () => {
  it('installs capture before the adopt snapshot and records it as the first frontier, unverified', async () => {
    const { rows } = await db.query(
      `SELECT f.snapshot::text AS frontier, c.mode, fl.adopt_unverified, e.epoch, e.opened_for
         FROM genfill.frontiers f, genfill.captures c, genfill.dataset_flags fl, genfill.epochs e
        WHERE f.dataset = 'orders_enriched' AND f.generation = 'g2' AND c.source_table = 'public.orders'
          AND fl.dataset = 'orders_enriched' AND e.dataset = 'orders_enriched'`,
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ mode: 'trigger', adopt_unverified: true, epoch: '1', opened_for: 'adopt' });
    const { rows: inst } = await db.query(
      `SELECT pg_visible_in_snapshot(c.installed_txid, f.snapshot) AS sees FROM genfill.captures c, genfill.frontiers f WHERE f.dataset = 'orders_enriched'`,
    );
    expect(inst[0].sees).toBe(true);
  });
});

describe('the view follows its writer', () => {
  it('applies inserts in and outside the time range, back-dated rows, updates, rows moving days, deletes, and re-inserts', async () => {
    await tdb.pool.query(`
      INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents)
      VALUES (900001, 1, 'north', '2025-07-02 10:00Z', 1234), (900002, 2, 'south', '2019-01-01 00:00Z', 555),
             (900003, 3, 'east', '2031-05-05 05:05Z', 999), (900004, 4, 'west', '2025-07-03 00:00Z', 4321);
      UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id BETWEEN 10 AND 30;
      UPDATE public.orders SET created_at = created_at + interval '2 days' WHERE order_id BETWEEN 31 AND 40;
      DELETE FROM public.orders WHERE order_id BETWEEN 41 AND 50;
      DELETE FROM public.orders WHERE order_id = 51;
      INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents) VALUES (51, 5, 'north', '2025-07-04 12:00Z', 77);
      UPDATE public.orders SET order_id = order_id + 800000 WHERE order_id BETWEEN 60 AND 62;`);
    expect((await diff()).missing).toBeGreaterThan(0);
    const t = await drain();
    expect(t.last?.kind).toBe('applied');
    expect(t.events).toBeGreaterThan(0);
    expect(await diff()).toEqual({ missing: 0, extra: 0 });
    // Deleted keys are tombstones in the generation (their last image kept), not in the view.
    const { rows } = await db.query(`SELECT count(*)::int AS n FROM ${GEN} WHERE _gf_deleted AND order_id BETWEEN 41 AND 50`);
    expect(rows[0].n).toBe(10);
    // Each key's revision is its latest event id.
    const { rows: rev } = await db.query(
      `SELECT count(*)::int AS n FROM ${GEN} g
        WHERE g._gf_rev <> 0 AND g._gf_rev <> (SELECT max(l.event_id) FROM genfill.change_log l WHERE l.source_table = 'public.orders' AND l.key = jsonb_build_object('order_id', g.order_id))`,
    );
    expect(rows.length).toBe(1);
    expect(rev[0].n).toBe(0);
  });

  it('the same batch twice changes nothing, and an empty batch still advances the frontier', async () => {
    const before = (await db.query(`SELECT snapshot::text AS s FROM genfill.frontiers WHERE dataset = 'orders_enriched'`)).rows[0].s;
    const t = await drain();
    expect(t.events).toBe(0);
    expect(t.applied).toBe(0);
    const after = (await db.query(`SELECT snapshot::text AS s FROM genfill.frontiers WHERE dataset = 'orders_enriched'`)).rows[0].s;
    expect(after).not.toBe(before);
    expect(await diff()).toEqual({ missing: 0, extra: 0 });
  });

  it('caps a large backlog with prefix snapshots and still ends exact', async () => {
    // Many transactions (a cut never splits one), touching keys more than once.
    for (let i = 0; i < 12; i++) await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 3 WHERE order_id % 12 = ${i}`);
    for (let i = 0; i < 6; i++) await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 5 WHERE order_id % 6 = ${i}`);
    await tdb.pool.query(`DELETE FROM public.orders WHERE order_id % 7 = 0`);
    const outcomes: boolean[] = [];
    const t = await drain({ maxBatchEvents: 100, onBatch: (o) => o.kind === 'applied' && outcomes.push(o.capped) });
    expect(outcomes.filter(Boolean).length).toBeGreaterThan(3);
    expect(t.batches).toBeGreaterThan(4);
    expect(await diff()).toEqual({ missing: 0, extra: 0 });
  });

  it('shows its lag in `genfill status --dataset`', async () => {
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id BETWEEN 100 AND 104`);
    const s = await projectorStatus(db, 'orders_enriched');
    expect(s).toMatchObject({ pendingEvents: 5, ingress: 'OPEN', epoch: 1, adoptUnverified: true });
    const res = await runCli(['status', '--dataset', 'orders_enriched'], env);
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/pending 5 events/);
    const j = await runCli(['status', '--dataset', 'orders_enriched', '--json'], env);
    expect(JSON.parse(j.stdout)).toMatchObject({ dataset: 'orders_enriched', pendingEvents: 5 });
    await drain();
    expect((await projectorStatus(db, 'orders_enriched'))!.pendingEvents).toBe(0);
  });
});

describe('the drift check', () => {
  it('verifies the adopted rows against the transform map (exit 0), and names a drifted key (exit 4), leaving pending keys out', async () => {
    await drain();
    const ok = await runCli(['reconcile', '--dataset', 'orders_enriched', '--json'], env);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({ verified: true, missing: 0, extra: 0 });
    expect((await db.query(`SELECT adopt_unverified FROM genfill.dataset_flags WHERE dataset = 'orders_enriched'`)).rows[0].adopt_unverified).toBe(false);
    // One row written by hand drifts; a key changed after the frontier is pending, not drift.
    await db.query(`UPDATE ${GEN} SET tax_cents = tax_cents + 1 WHERE order_id = 110`);
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = 111`);
    const bad = await runCli(['reconcile', '--dataset', 'orders_enriched', '--json'], env);
    expect(bad.code).toBe(4);
    expect(JSON.parse(bad.stdout)).toMatchObject({ verified: false, missing: 1, extra: 1, pending: 1, sample: [{ order_id: 110 }] });
    expect((await runCli(['status', '--dataset', 'orders_enriched'], env)).stdout).toMatch(/adopted rows unverified/);
    // Put it back for the tests after this one.
    await db.query(`UPDATE ${GEN} SET tax_cents = tax_cents - 1 WHERE order_id = 110`);
    await drain();
  });
});

describe('a poison event', () => {
  it('stops the projector naming the key, writes nothing, and a quarantine lets it go on', async () => {
    // One order whose tax overflows bigint in the transform (amount × 99.9999), among good ones.
    await tdb.pool.query(`INSERT INTO public.tax_rates (region, rate) VALUES ('poison', 99.9999)`);
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id IN (200, 201)`);
    await tdb.pool.query(`UPDATE public.orders SET region = 'poison', amount_cents = 9000000000000000000 WHERE order_id = 202`);
    const t = await drain();
    expect(t.last?.kind).toBe('poison');
    const stop = (await db.query(`SELECT key, error FROM genfill.projector_stops WHERE dataset = 'orders_enriched'`)).rows[0];
    expect(stop.key).toEqual({ order_id: 202 });
    expect(stop.error).toMatch(/out of range/);
    // Nothing of the batch was applied: 200 still has its old amount.
    const { rows } = await db.query(`SELECT amount_cents FROM ${GEN} WHERE order_id = 200`);
    const { rows: src } = await db.query(`SELECT amount_cents FROM public.orders WHERE order_id = 200`);
    expect(rows[0].amount_cents).not.toBe(src[0].amount_cents);
    const status = await runCli(['status', '--dataset', 'orders_enriched'], env);
    expect(status.stdout).toMatch(/STOPPED at key \{"order_id":202\}/);

    const bad = await runCli(['quarantine', 'orders_enriched', '--key', '{"order_id": 202}', '--reason', ' '], env);
    expect(bad.code).toBe(3);
    const q = await runCli(['quarantine', 'orders_enriched', '--key', '{"order_id": 202}', '--reason', 'rate overflow, fixed upstream'], env);
    expect(q.stderr).toBe('');
    expect(q.code).toBe(0);
    const t2 = await drain();
    expect(t2.last?.kind).toBe('applied');
    const { rows: after } = await db.query(`SELECT amount_cents FROM ${GEN} WHERE order_id = 200`);
    expect(after[0].amount_cents).toBe(src[0].amount_cents);
    const { rows: qk } = await db.query(`SELECT key, reason, principal FROM genfill.quarantined_keys`);
    expect(qk).toEqual([{ key: { order_id: 202 }, reason: 'rate overflow, fixed upstream', principal: 'postgres' }]);
    await tdb.pool.query(`DELETE FROM public.tax_rates WHERE region = 'poison'`);
    // The quarantine covers the key's events up to its revision then: a later fix is applied.
    expect(await diff()).toEqual({ missing: 1, extra: 1 });
    await tdb.pool.query(`UPDATE public.orders SET region = 'north', amount_cents = 100 WHERE order_id = 202`);
    await drain();
    expect(await diff()).toEqual({ missing: 0, extra: 0 });
  });
});

describe('a dependency change', () => {
  it('marks the dataset DEPENDENCY_STALE and moves its open releases to RECONCILIATION_REQUIRED', async () => {
    await db.query(`INSERT INTO genfill.dataset_dependencies (dataset, relation) VALUES ('orders_enriched', 'public.tax_rates') ON CONFLICT DO NOTHING`);
    const cap = await runCli(['capture', 'install', 'public.tax_rates'], env);
    expect(cap.code).toBe(0);
    await plannedRelease(db, { id: 'dep@1', generation: 'g3', from: '2025-07-01T00:00:00Z', to: '2025-07-03T00:00:00Z' });
    await drain();
    expect((await db.query(`SELECT dependency_stale_since FROM genfill.dataset_flags WHERE dataset = 'orders_enriched'`)).rows[0].dependency_stale_since).toBeNull();
    await tdb.pool.query(`UPDATE public.tax_rates SET rate = rate WHERE region = 'north'`);
    await drain();
    const { rows } = await db.query(`SELECT dependency_stale_since IS NOT NULL AS stale, stale_relations FROM genfill.dataset_flags WHERE dataset = 'orders_enriched'`);
    expect(rows[0]).toEqual({ stale: true, stale_relations: ['public.tax_rates'] });
    const { rows: rel } = await db.query(`SELECT state FROM genfill.releases WHERE id = 'dep@1'`);
    expect(rel[0].state).toBe('RECONCILIATION_REQUIRED');
    const status = await runCli(['status', '--dataset', 'orders_enriched'], env);
    expect(status.stdout).toMatch(/DEPENDENCY_STALE since .*public.tax_rates/);
  });
});

describe('the lease', () => {
  it('a second holder waits; a zombie holder\'s late commit writes nothing and never moves the frontier back', async () => {
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = 300`);
    const zombie = (await db.query(`SELECT genfill.projector_acquire('orders_enriched', 'zombie', 300)::text AS t`)).rows[0].t;
    expect(zombie).not.toBeNull();
    expect((await db.query(`SELECT genfill.projector_acquire('orders_enriched', 'other', 60000)::text AS t`)).rows[0].t).toBeNull();
    let resume!: () => void;
    const paused = new Promise<void>((r) => (resume = r));
    let reached!: () => void;
    const atTail = new Promise<void>((r) => (reached = r));
    const late = runBatch(db, 'orders_enriched', {
      lease: { holder: 'zombie', token: BigInt(zombie) },
      maxEvents: 1000,
      statementTimeoutMs: 30_000,
      beforeTail: async () => {
        reached();
        await paused;
      },
    });
    await atTail;
    await new Promise((r) => setTimeout(r, 400)); // the zombie's lease expires
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = 301`);
    // The successor takes the lease (a new token) and waits for the zombie's row lock on key 300.
    const successor = drain({ id: 'successor' });
    await new Promise((r) => setTimeout(r, 500));
    expect((await db.query(`SELECT holder FROM genfill.projector_leases WHERE dataset = 'orders_enriched'`)).rows[0].holder).toBe('successor');
    resume();
    const out = await late;
    expect(out.kind).toBe('fenced');
    const t = await successor;
    expect(t.last?.kind).toBe('applied');
    const f = (await db.query(`SELECT snapshot::text AS s FROM genfill.frontiers WHERE dataset = 'orders_enriched'`)).rows[0].s;
    expect(t.last?.kind === 'applied' && t.last.to).toBe(f);
    expect(await diff()).toEqual({ missing: 0, extra: 0 });
  });
});
