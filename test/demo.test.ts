// The demo's seeded dataset (issue 3): shape, the range's edges, idempotency, and the two
// claims the rest of the demo rests on — adopt's transform map reproduces orders_enriched
// exactly, and the fix release changes tax_cents only, only inside its range.
import { readFileSync } from 'node:fs';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DEMO_ADOPT_TRANSFORM, demoCounts, seedDemo } from '../apps/cli/src/demo/seed.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';

const db = await createTestDatabase('demo');
const ROWS = 20_000;
const FROM = '2025-07-01T00:00:00Z';
const TO = '2026-07-01T00:00:00Z';
const FIX_TRANSFORM = readFileSync(new URL('../examples/transforms/order-tax-fix.sql', import.meta.url), 'utf8');

const one = async <T>(sql: string, params: unknown[] = []): Promise<T> => (await db.pool.query(sql, params)).rows[0] as T;
const sourced = (transform: string) => `WITH source AS (SELECT * FROM public.orders) ${transform}`;

let first: Awaited<ReturnType<typeof seedDemo>>;
beforeAll(async () => {
  first = await seedDemo(db.pool, { rows: ROWS, log: () => {} });
});
beforeEach(() => keepOnFailure(db));

describe('seedDemo', () => {
  it('creates the three tables with the expected rows', async () => {
    const { total } = demoCounts(ROWS);
    expect(first).toMatchObject({ seeded: true, orders: total });
    const counts = await one<Record<string, number>>(`
      SELECT (SELECT count(*) FROM public.orders)::int AS orders,
             (SELECT count(*) FROM public.orders_enriched)::int AS enriched,
             (SELECT count(*) FROM public.tax_rates)::int AS rates,
             (SELECT count(*) FROM public.orders WHERE created_at >= $1 AND created_at < $2)::int AS in_range`, [FROM, TO]);
    expect(counts).toEqual({ orders: total, enriched: total, rates: 8, in_range: ROWS });
  });

  it('has exactly the columns, keys and index of examples/schema.sql', async () => {
    const { rows } = await db.pool.query(`
      SELECT table_name, string_agg(column_name || ' ' || data_type || ' ' || is_nullable, ', ' ORDER BY ordinal_position) AS cols
        FROM information_schema.columns WHERE table_schema = 'public' GROUP BY table_name ORDER BY table_name`);
    expect(rows).toEqual([
      { table_name: 'orders', cols: 'order_id bigint NO, customer_id bigint NO, region text NO, created_at timestamp with time zone NO, amount_cents bigint NO' },
      { table_name: 'orders_enriched', cols: 'order_id bigint NO, created_at timestamp with time zone NO, region text NO, amount_cents bigint NO, tax_cents bigint NO' },
      { table_name: 'tax_rates', cols: 'region text NO, rate numeric NO' },
    ]);
    const keys = await db.pool.query(`
      SELECT conrelid::regclass::text AS t, pg_get_constraintdef(oid) AS def FROM pg_constraint
       WHERE contype = 'p' AND connamespace = 'public'::regnamespace ORDER BY 1`);
    expect(keys.rows).toEqual([
      { t: 'orders', def: 'PRIMARY KEY (order_id)' },
      { t: 'orders_enriched', def: 'PRIMARY KEY (order_id)' },
      { t: 'tax_rates', def: 'PRIMARY KEY (region)' },
    ]);
    expect(await one(`SELECT indexdef FROM pg_indexes WHERE indexname = 'orders_created_at_idx'`)).toEqual({
      indexdef: 'CREATE INDEX orders_created_at_idx ON public.orders USING btree (created_at)',
    });
  });

  it('has orders exactly at both ends of the range and on both sides of it', async () => {
    const r = await one<Record<string, number>>(`
      SELECT count(*) FILTER (WHERE created_at = $1)::int AS at_from,
             count(*) FILTER (WHERE created_at = $2)::int AS at_to,
             count(*) FILTER (WHERE created_at < $1)::int AS before,
             count(*) FILTER (WHERE created_at > $2)::int AS after,
             count(*) FILTER (WHERE created_at < $1 - interval '3 months')::int AS months_before
        FROM public.orders`, [FROM, TO]);
    const { before, after } = demoCounts(ROWS);
    expect(r).toEqual({ at_from: 1, at_to: 1, before, after: after - 1, months_before: expect.any(Number) });
    expect(r.months_before).toBeGreaterThan(0);
  });

  it('spreads orders unevenly over the days of the range', async () => {
    const r = await one<{ days: number; min: number; max: number }>(`
      SELECT count(*)::int AS days, min(n)::int AS min, max(n)::int AS max FROM (
        SELECT count(*) AS n FROM public.orders WHERE created_at >= $1 AND created_at < $2
         GROUP BY date_trunc('day', created_at AT TIME ZONE 'UTC')) AS d`, [FROM, TO]);
    expect(r.days).toBe(365);
    expect(r.max).toBeGreaterThan(2 * r.min);
  });

  it('does nothing when run again', async () => {
    const fingerprint = `
      SELECT (SELECT count(*) FROM public.orders)::int AS orders,
             (SELECT sum(amount_cents + customer_id + order_id)::text FROM public.orders) AS order_sum,
             (SELECT sum(tax_cents)::text FROM public.orders_enriched) AS tax_sum,
             (SELECT count(*) FROM public.orders_enriched)::int AS enriched`;
    const before = await one(fingerprint);
    const again = await seedDemo(db.pool, { rows: ROWS, log: () => {} });
    expect(again).toMatchObject({ seeded: false, orders: demoCounts(ROWS).total });
    expect(await one(fingerprint)).toEqual(before);
  });

  it("adopt's transform map (the legacy transform) reproduces orders_enriched exactly", async () => {
    const diff = await one<{ missing: number; extra: number }>(`
      SELECT (SELECT count(*) FROM ((${sourced(DEMO_ADOPT_TRANSFORM)}) EXCEPT ALL SELECT * FROM public.orders_enriched) AS a)::int AS missing,
             (SELECT count(*) FROM (SELECT * FROM public.orders_enriched EXCEPT ALL (${sourced(DEMO_ADOPT_TRANSFORM)})) AS b)::int AS extra`);
    expect(diff).toEqual({ missing: 0, extra: 0 });
  });

  it('the fix changes tax_cents only, only inside the range, for a good share of its rows', async () => {
    const r = await one<Record<string, number>>(`
      WITH fixed AS (${sourced(FIX_TRANSFORM)})
      SELECT count(*)::int AS joined,
             count(*) FILTER (WHERE (f.created_at, f.region, f.amount_cents) IS DISTINCT FROM (e.created_at, e.region, e.amount_cents))::int AS other_columns,
             count(*) FILTER (WHERE f.tax_cents <> e.tax_cents AND NOT (e.created_at >= $1 AND e.created_at < $2))::int AS changed_outside,
             count(*) FILTER (WHERE f.tax_cents <> e.tax_cents AND e.created_at >= $1 AND e.created_at < $2)::int AS changed_inside,
             count(*) FILTER (WHERE e.created_at >= $1 AND e.created_at < $2)::int AS inside,
             count(*) FILTER (WHERE f.order_id IS NULL OR e.order_id IS NULL)::int AS unmatched
        FROM fixed AS f FULL JOIN public.orders_enriched AS e USING (order_id)`, [FROM, TO]);
    expect(r).toMatchObject({ joined: demoCounts(ROWS).total, other_columns: 0, changed_outside: 0, unmatched: 0, inside: ROWS });
    expect(r.changed_inside).toBeGreaterThanOrEqual(0.1 * ROWS);
  });
});
