// The demo's dataset: a year of orders with tax_rates, and orders_enriched as the legacy
// pipeline built it — with the tax bug release order-tax-fix@3 repairs. Everything is derived
// from the order id by hashing, so every run (and every machine) seeds the same rows, and the
// load is set-based SQL: a million single-row inserts from Node would take minutes.
import { performance } from 'node:perf_hooks';
import { RefusedError } from '@genfill/contracts';
import { wrapTransform } from '@genfill/transform';
import type pg from 'pg';

/**
 * The live order writer (writer.ts) inserts orders from this id up: a second demo run tells the
 * seed's rows from the writer's by it.
 */
export const DEMO_WRITER_FIRST_ID = 1_000_000_000_000;

/** The release's range, half-open; the bug and the fix only differ inside it. */
export const DEMO_RANGE = { from: '2025-07-01T00:00:00Z', to: '2026-07-01T00:00:00Z' } as const;
/** History before the range and late rows after it, so carry partitions have work later. */
const BEFORE_FROM = '2025-01-01T00:00:00Z';
const AFTER_TO = '2026-07-15T00:00:00Z';
const DAYS = (Date.parse(DEMO_RANGE.to) - Date.parse(DEMO_RANGE.from)) / 86_400_000;

/**
 * The transform the legacy pipeline ran, which `adopt` records as generation tax-fix-g2's
 * transform map. It is also what builds orders_enriched below, so the map is true by
 * construction rather than by a second copy of the bug that could drift.
 */
export const DEMO_ADOPT_TRANSFORM = `-- The legacy tax (generation tax-fix-g2). For orders created from ${DEMO_RANGE.from} until the
-- pipeline was fixed at ${DEMO_RANGE.to} the tax was truncated instead of rounded: the bug
-- order-tax-fix@3 repairs. Orders before and after that year were rounded.
SELECT s.order_id,
       s.created_at,
       s.region,
       s.amount_cents,
       CASE WHEN s.created_at >= timestamptz '${DEMO_RANGE.from}' AND s.created_at < timestamptz '${DEMO_RANGE.to}'
            THEN trunc(s.amount_cents * coalesce(t.rate, 0))
            ELSE round(s.amount_cents * coalesce(t.rate, 0))
       END::bigint AS tax_cents
  FROM source AS s
  LEFT JOIN public.tax_rates AS t ON t.region = s.region
`;

/** Rows outside the range, as a function of the rows inside it (a few thousand at 1.2M). */
export function demoCounts(rows: number): { inRange: number; before: number; after: number; total: number } {
  const before = Math.max(10, Math.ceil(rows / 400));
  const after = Math.max(3, Math.ceil(rows / 4000));
  return { inRange: rows, before, after, total: rows + before + after };
}

// Eight taxed regions; us-or has no row (Oregon has no sales tax), which the transforms'
// LEFT JOIN … coalesce(rate, 0) must survive.
const TAX_RATES: [string, string][] = [
  ['us-ca', '0.0725'], ['us-tx', '0.0625'], ['us-ny', '0.0400'], ['ca-on', '0.1300'],
  ['gb', '0.2000'], ['de', '0.1900'], ['fr', '0.2000'], ['jp', '0.1000'],
];

// Region by share of orders (percent); us-or last, the untaxed 3%.
const REGION_SHARES: [string, number][] = [
  ['us-ca', 24], ['us-tx', 14], ['us-ny', 12], ['ca-on', 8], ['gb', 12], ['de', 10], ['fr', 8], ['jp', 9], ['us-or', 3],
];
const REGION_BY_PERCENT = REGION_SHARES.flatMap(([r, n]) => Array<string>(n).fill(`'${r}'`)).join(',');

// Non-negative hash of the id under a salt; `& max` because abs() overflows on the minimum.
const h = (id: string, salt: number) => `(hashint8extended(${id}, ${salt}) & 9223372036854775807)`;

/**
 * Inserts the orders of `o(id, at)`, deriving the rest from the id. OFFSET 0 keeps the
 * subquery from being flattened, which would evaluate each hash once per use.
 */
const INSERT_ORDERS = `
INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents)
SELECT x.id,
       1 + x.h1 % $customers,
       (ARRAY[${REGION_BY_PERCENT}])[x.h2 % 100 + 1],
       x.at,
       99 + x.h3 % 200 * (x.h3 / 200 % 250) + x.h3 / 50000 % 100
  FROM (SELECT o.id, o.at, ${h('o.id', 1)} AS h1, ${h('o.id', 2)} AS h2, ${h('o.id', 3)} AS h3 FROM o OFFSET 0) AS x`;

// Weights of a (day, hour) bucket: UTC hour of day, weekday (2025-07-01 is a Tuesday), a
// year of growth, the November/December season with Black Friday and Cyber Monday, Christmas
// Day, and ±10% per-day noise. Integers, so the allocation is exact everywhere.
const HOUR_WEIGHTS = [30, 20, 14, 10, 8, 8, 12, 20, 35, 50, 62, 70, 76, 80, 82, 84, 88, 95, 105, 110, 100, 85, 65, 45];
const WEEKDAY_WEIGHTS = [70, 95, 100, 100, 105, 120, 80]; // Sunday first
const dayOf = (iso: string) => (Date.parse(iso) - Date.parse(DEMO_RANGE.from)) / 86_400_000;
const SEASON = `CASE WHEN b.d = ${dayOf('2025-11-28T00:00:00Z')} THEN 300
                     WHEN b.d = ${dayOf('2025-12-01T00:00:00Z')} THEN 250
                     WHEN b.d = ${dayOf('2025-12-25T00:00:00Z')} THEN 40
                     WHEN b.d BETWEEN ${dayOf('2025-11-20T00:00:00Z')} AND ${dayOf('2025-12-23T00:00:00Z')} THEN 130
                     ELSE 100 END`;

/** In-range orders: each (day, hour) bucket gets its exact share of $rows, ids follow time. */
const IN_RANGE_SQL = `
WITH b AS (
  SELECT d, hr FROM generate_series(0, ${DAYS - 1}) AS d, generate_series(0, 23) AS hr
), w AS (
  SELECT b.d, b.hr,
         (ARRAY[${HOUR_WEIGHTS}])[b.hr + 1]::numeric * (ARRAY[${WEEKDAY_WEIGHTS}])[(b.d + 2) % 7 + 1]
           * (365 + b.d) * ${SEASON} * (90 + (hashint4(b.d) & 2147483647) % 21) AS w
    FROM b
), cum AS (
  SELECT d, hr, sum(w) OVER (ORDER BY d, hr) - w AS below, sum(w) OVER (ORDER BY d, hr) AS upto, sum(w) OVER () AS total FROM w
), alloc AS (
  SELECT d, hr, floor($rows * below / total)::bigint AS lo, floor($rows * upto / total)::bigint AS hi FROM cum
), o AS (
  SELECT $before + a.lo + k + 1 AS id,
         -- The first order sits exactly on the range's lower end, and the first of each
         -- midnight hour exactly on its day's boundary: the half-open edges get exercised.
         timestamptz '${DEMO_RANGE.from}' + interval '1 microsecond' * CASE WHEN a.lo + k = 0 THEN 0 ELSE
           (a.d * 24 + a.hr) * 3600000000::bigint + k * 3600000000::bigint / (a.hi - a.lo)
           + CASE WHEN k = 0 AND a.hr = 0 THEN 0
                  ELSE ${h('$before + a.lo + k + 1', 7)} % (3600000000::bigint / (a.hi - a.lo)) END
         END AS at
    FROM alloc AS a, generate_series(0, a.hi - a.lo - 1) AS k
)${INSERT_ORDERS}`;

/** $count orders with ids from $first, spread evenly over $span microseconds from start, the first at start. */
const SPREAD_SQL = (start: string) => `
WITH o AS (
  SELECT $first + k AS id,
         timestamptz '${start}' + interval '1 microsecond' * (
           k * $span / $count
           + CASE WHEN k = 0 THEN 0 ELSE ${h('$first + k', 7)} % ($span / $count) END
         ) AS at
    FROM generate_series(0, $count - 1) AS k
)${INSERT_ORDERS}`;

// Named placeholders keep the SQL readable; values are integers computed here, never input text.
function bind(sql: string, values: Record<string, number | bigint>): string {
  return sql.replace(/\$([a-z]+)/g, (m, name: string) => (name in values ? `${values[name]}::bigint` : m));
}

const n = (x: number) => x.toLocaleString('en-US');
const micros = (from: string, to: string) => BigInt(Date.parse(to) - Date.parse(from)) * 1000n;

async function count(conn: pg.ClientBase, table: string, where = 'true'): Promise<number | null> {
  const { rows } = await conn.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [table]);
  if (rows[0]?.t == null) return null;
  const res = await conn.query<{ n: string }>(`SELECT count(*) AS n FROM ${table} WHERE ${where}`);
  return Number(res.rows[0]!.n);
}

async function addPrimaryKeyIfMissing(conn: pg.ClientBase, table: string, column: string): Promise<void> {
  const { rowCount } = await conn.query(`SELECT 1 FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'`, [table]);
  if (rowCount === 0) await conn.query(`ALTER TABLE ${table} ADD PRIMARY KEY (${column})`);
}

export async function seedDemo(
  db: pg.Pool,
  opts: { rows: number; log: (line: string) => void },
): Promise<{ seeded: boolean; orders: number; seconds: number }> {
  if (!Number.isSafeInteger(opts.rows) || opts.rows < 1) throw new RangeError(`rows must be a positive integer, not ${opts.rows}`);
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started) / 1000;
  let mark = started;
  const step = (what: string) => {
    const now = performance.now();
    opts.log(`${what} (${((now - mark) / 1000).toFixed(1)}s)`);
    mark = now;
  };
  const counts = demoCounts(opts.rows);
  const conn = await db.connect();
  try {
    await conn.query('BEGIN');
    // Two demos at once: the second waits here, then finds the first one's rows.
    await conn.query(`SELECT pg_advisory_xact_lock(hashtextextended('genfill:demo:seed', 0))`);
    const existing = await count(conn, 'public.orders', `order_id < ${DEMO_WRITER_FIRST_ID}`);
    if (existing === counts.total) {
      await conn.query('COMMIT');
      opts.log(`public.orders already holds the demo's ${n(existing)} rows; not seeding again`);
      return { seeded: false, orders: existing, seconds: elapsed() };
    }
    for (const table of ['public.orders', 'public.orders_enriched', 'public.tax_rates']) {
      const n = table === 'public.orders' ? existing : await count(conn, table);
      if (n) {
        throw new RefusedError(
          `${table} already holds ${n} rows that are not this demo's (public.orders should hold ${counts.total} for ${opts.rows} rows in range); ` +
            'seed into a fresh database, or drop public.orders, public.orders_enriched and public.tax_rates first',
        );
      }
    }
    // A bulk load: the configured statement timeout is meant for operator statements, not
    // this; bigger sort memory makes the index builds after the load one pass.
    await conn.query(`SET LOCAL statement_timeout = 0`);
    await conn.query(`SET LOCAL maintenance_work_mem = '512MB'`);
    await conn.query(`SET LOCAL synchronous_commit = off`);

    // Keys and indexes come after the load (when the tables are new): building them once
    // from sorted data is several times faster than maintaining them row by row.
    await conn.query(`
      CREATE TABLE IF NOT EXISTS public.orders (
        order_id bigint NOT NULL, customer_id bigint NOT NULL, region text NOT NULL,
        created_at timestamptz NOT NULL, amount_cents bigint NOT NULL);
      CREATE TABLE IF NOT EXISTS public.tax_rates (region text PRIMARY KEY, rate numeric(6, 4) NOT NULL);
      CREATE TABLE IF NOT EXISTS public.orders_enriched (
        order_id bigint NOT NULL, created_at timestamptz NOT NULL, region text NOT NULL,
        amount_cents bigint NOT NULL, tax_cents bigint NOT NULL)`);
    await conn.query(
      `INSERT INTO public.tax_rates (region, rate) SELECT * FROM unnest($1::text[], $2::numeric[])`,
      [TAX_RATES.map((r) => r[0]), TAX_RATES.map((r) => r[1])],
    );
    step(`created tables, ${TAX_RATES.length} tax rates`);

    const customers = Math.max(100, Math.floor(opts.rows / 8));
    await conn.query(
      bind(SPREAD_SQL(BEFORE_FROM), { first: 1, count: counts.before, span: micros(BEFORE_FROM, DEMO_RANGE.from), customers }),
    );
    await conn.query(bind(IN_RANGE_SQL, { rows: counts.inRange, before: counts.before, customers }));
    await conn.query(
      bind(SPREAD_SQL(DEMO_RANGE.to), {
        first: counts.before + counts.inRange + 1, count: counts.after, span: micros(DEMO_RANGE.to, AFTER_TO), customers,
      }),
    );
    step(`inserted ${n(counts.total)} orders (${n(counts.before)} before the range, ${n(counts.after)} from its end on)`);
    await addPrimaryKeyIfMissing(conn, 'public.orders', 'order_id');
    await conn.query('CREATE INDEX IF NOT EXISTS orders_created_at_idx ON public.orders (created_at)');
    step('indexed orders');

    await conn.query(
      `INSERT INTO public.orders_enriched (order_id, created_at, region, amount_cents, tax_cents)
       ${wrapTransform(DEMO_ADOPT_TRANSFORM, 'SELECT * FROM public.orders')}`,
    );
    await addPrimaryKeyIfMissing(conn, 'public.orders_enriched', 'order_id');
    step('built orders_enriched with the legacy (truncating) tax');

    await conn.query('ANALYZE public.orders, public.tax_rates, public.orders_enriched');
    await conn.query('COMMIT');
    step('analyzed and committed');
    return { seeded: true, orders: counts.total, seconds: elapsed() };
  } catch (err) {
    await conn.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    conn.release();
  }
}
