import type pg from 'pg';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, keepOnFailure } from '../../../test/support/db.ts';
import { probeTransform, wrapTransform } from '../src/index.ts';
import type { ProbeOptions, ProbeResult } from '../src/index.ts';

const db = await createTestDatabase('transform_probe');

beforeAll(async () => {
  await db.pool.query(`
    CREATE TABLE public.orders (
      order_id bigint PRIMARY KEY,
      created_at timestamptz NOT NULL,
      region text,
      amount_cents bigint
    );
    CREATE TABLE public.tax_rates (region text PRIMARY KEY, rate numeric);
    CREATE TABLE public.orders_enriched (
      order_id bigint, created_at timestamptz, region text, amount_cents bigint, tax_cents bigint
    );
    CREATE TABLE public.customers (region text, name text);
    CREATE FUNCTION public.jitter() RETURNS double precision LANGUAGE sql VOLATILE AS 'SELECT random()';
    INSERT INTO public.orders VALUES (1, '2025-07-01T10:00:00Z', 'eu', 1000), (2, '2025-07-01T11:00:00Z', 'us', 2000);
    INSERT INTO public.tax_rates VALUES ('eu', 0.2), ('us', 0.07);
  `);
});

beforeEach(() => keepOnFailure(db));

const GOOD = `
SELECT s.order_id, s.created_at, s.region, s.amount_cents,
       round(s.amount_cents * r.rate)::bigint AS tax_cents
  FROM source s
  JOIN tax_rates r ON r.region = s.region;
`;

const BASE: ProbeOptions = {
  sql: GOOD,
  sourceTable: 'public.orders',
  key: ['order_id'],
  time: 'created_at',
  dependencies: ['public.tax_rates'],
  target: { table: 'public.orders_enriched' },
};

/** Runs the probe on a fresh connection and checks it left nothing behind on that connection. */
async function probe(overrides: Partial<ProbeOptions>): Promise<ProbeResult> {
  const client = await db.pool.connect();
  try {
    const result = await probeTransform(client, { ...BASE, ...overrides });
    await expectCleanConnection(client);
    return result;
  } finally {
    client.release();
  }
}

async function expectCleanConnection(client: pg.PoolClient): Promise<void> {
  // Not left inside a transaction: an aborted one would fail this query, and in an open one
  // the transaction would have started before this statement.
  const state = await client.query<{ own: boolean }>(
    `SELECT xact_start = query_start AS own FROM pg_stat_activity WHERE pid = pg_backend_pid()`,
  );
  expect(state.rows[0]?.own).toBe(true);
  const views = await client.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_views WHERE viewname LIKE 'genfill%'`,
  );
  expect(views.rows[0]?.n).toBe(0);
  const temp = await client.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_class WHERE relnamespace = pg_my_temp_schema()`,
  );
  expect(temp.rows[0]?.n).toBe(0);
  await client.query('BEGIN; SELECT 1; COMMIT');
}

function messages(result: ProbeResult): string[] {
  return result.problems.map((p) => p.message);
}

describe('probeTransform', () => {
  it('passes a join to a declared dependency and reports its output columns and relations', async () => {
    const result = await probe({});
    expect(result.problems).toEqual([]);
    expect(result.columns).toEqual([
      { name: 'order_id', type: 'bigint' },
      { name: 'created_at', type: 'timestamp with time zone' },
      { name: 'region', type: 'text' },
      { name: 'amount_cents', type: 'bigint' },
      { name: 'tax_cents', type: 'bigint' },
    ]);
    expect(result.relations).toEqual(['public.orders', 'public.tax_rates']);
    expect(result.volatileFunctions).toEqual([]);
  });

  it('lets a nested WITH inside the transform read the outer source CTE', async () => {
    const sql = `WITH s AS (SELECT * FROM source)
      SELECT s.*, (SELECT round(s.amount_cents * max(rate))::bigint FROM tax_rates t WHERE t.region = s.region) AS tax_cents
      FROM s`;
    expect(messages(await probe({ sql }))).toEqual([]);
    const client = await db.pool.connect();
    try {
      const rows = await client.query(wrapTransform(sql, 'SELECT * FROM public.orders'));
      expect(rows.rows.map((r: { tax_cents: string }) => r.tax_cents)).toEqual(['200', '140']);
    } finally {
      client.release();
    }
  });

  it('refuses random() and the volatile public.jitter() by name', async () => {
    const sql = `SELECT s.*, 0::bigint AS tax_cents FROM source s WHERE random() < 2 AND public.jitter() < 2`;
    const result = await probe({ sql });
    expect(result.volatileFunctions).toEqual(['pg_catalog.random', 'public.jitter']);
    expect(messages(result)).toEqual([
      expect.stringContaining('calls pg_catalog.random(), which is VOLATILE'),
      expect.stringContaining('calls public.jitter(), which is VOLATILE'),
    ]);
  });

  it('refuses a table that is read but not declared in dependencies, naming it', async () => {
    const sql = `SELECT s.*, 0::bigint AS tax_cents FROM source s JOIN customers c ON c.region = s.region`;
    const result = await probe({ sql });
    expect(messages(result)).toEqual(['reads public.customers, which is not declared in dependencies']);
    expect(result.relations).toEqual(['public.customers', 'public.orders']);
  });

  it('refuses reading the live source table directly instead of source', async () => {
    const sql = `SELECT s.*, 0::bigint AS tax_cents FROM source s WHERE s.order_id IN (SELECT order_id FROM public.orders)`;
    expect(messages(await probe({ sql }))).toEqual([
      expect.stringContaining('reads the source table public.orders directly'),
    ]);
  });

  it('refuses output without a key or time column, naming the column', async () => {
    const sql = `SELECT s.region, s.amount_cents FROM source s`;
    const found = messages(await probe({ sql, target: undefined }));
    expect(found).toEqual([
      'output has no column order_id, which is part of the source key',
      'output has no column created_at, the source time column',
    ]);
  });

  it('refuses output that does not fit the target: extra, missing and mistyped columns', async () => {
    const sql = `SELECT s.order_id, s.created_at, s.region::varchar(10) AS region, s.amount_cents, 1 AS bonus FROM source s`;
    expect(messages(await probe({ sql }))).toEqual([
      'output column region is character varying(10) but target public.orders_enriched has text; cast it',
      'output lacks column tax_cents (bigint) of target public.orders_enriched',
      'output column bonus (integer) is not a column of target public.orders_enriched',
    ]);
    // The tax computed as numeric is a type mismatch, named with both types.
    const numeric = `SELECT s.*, s.amount_cents * r.rate AS tax_cents FROM source s JOIN tax_rates r USING (region)`;
    expect(messages(await probe({ sql: numeric }))).toEqual([
      'output column tax_cents is numeric but target public.orders_enriched has bigint; cast it',
    ]);
  });

  it('skips target columns listed in ignoreColumns and a target that does not exist yet', async () => {
    const sql = `SELECT s.*, 0::bigint AS tax_cents FROM source s`;
    const ignoring = { table: 'public.orders_enriched', ignoreColumns: ['tax_cents'] };
    expect(messages(await probe({ sql: `SELECT s.* FROM source s`, target: ignoring }))).toEqual([]);
    expect(messages(await probe({ sql, target: { table: 'public.not_yet_there' } }))).toEqual([]);
  });

  it('refuses a missing source table without running the other checks', async () => {
    const result = await probe({ sourceTable: 'public.nope', dependencies: ['public.tax_rates', 'public.missing'] });
    expect(result.problems).toEqual([
      { path: 'source.table', message: 'source table public.nope does not exist' },
      { path: 'dependencies[1]', message: 'dependency public.missing does not exist' },
    ]);
    expect(result.columns).toEqual([]);
  });

  it('refuses a malformed table name as a problem rather than throwing', async () => {
    const result = await probe({ dependencies: ['a.b.c.d'] });
    expect(result.problems).toContainEqual({
      path: 'dependencies[0]',
      message: expect.stringContaining('is not a valid table name'),
    });
  });

  it('reports a PostgreSQL error with its position in the transform file', async () => {
    const sql = `SELECT s.*,\n       0::bigint AS tax_cents,\n       s.no_such_column\nFROM source s`;
    expect(messages(await probe({ sql, target: undefined }))).toEqual([
      'line 3, column 8: PostgreSQL rejects the transform: column s.no_such_column does not exist',
    ]);
  });

  it('reports an error that only planning finds', async () => {
    const sql = `SELECT s.*, (1 / 0)::bigint AS tax_cents FROM source s`;
    expect(messages(await probe({ sql }))).toEqual(['PostgreSQL rejects the transform: division by zero']);
  });

  it('refuses DML, two statements and syntax errors before touching the database', async () => {
    expect(messages(await probe({ sql: 'DELETE FROM public.orders' }))).toEqual([
      'is a DELETE statement, not a SELECT: a transform only reads',
    ]);
    expect(messages(await probe({ sql: 'SELECT * FROM source; DROP TABLE public.orders' }))).toEqual([
      'must be exactly one SELECT statement, found 2',
    ]);
    expect(messages(await probe({ sql: 'SELECT * FROM source) x; DROP TABLE public.orders; SELECT (1' }))).toEqual([
      'line 1, column 21: syntax error at or near ")"',
    ]);
    expect(messages(await probe({ sql: 'SELECT * FROM source WHERE' }))).toEqual([
      'line 1, column 27: syntax error at end of input',
    ]);
    const orders = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM public.orders');
    expect(orders.rows[0]?.n).toBe(2);
  });

  it('leaves nothing behind: no view, no temp table, no open transaction, no written rows', async () => {
    const sql = `SELECT s.*, 0::bigint AS tax_cents FROM source s`;
    const client = await db.pool.connect();
    try {
      await probeTransform(client, { ...BASE, sql });
      await probeTransform(client, { ...BASE, sql: 'SELECT s.*, s.nope FROM source s' });
      await expectCleanConnection(client);
      const views = await client.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_views WHERE viewname LIKE 'genfill%'`);
      expect(views.rows[0]?.n).toBe(0);
      const enriched = await client.query<{ n: number }>('SELECT count(*)::int AS n FROM public.orders_enriched');
      expect(enriched.rows[0]?.n).toBe(0);
    } finally {
      client.release();
    }
  });
});
