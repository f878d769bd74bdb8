// The admission every service runs before it uses stored transform text (issue 28): the
// function rule, the extended protocol, the probe inside a caller's transaction, and the
// per-process cache of positive verdicts.
import { TransformRefusedError } from '@genfill/contracts';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, keepOnFailure } from '../../../test/support/db.ts';
import { admitTransform, checkTransformStatic, forgetAdmissions, probeTransform, queryUserSql } from '../src/index.ts';

const db = await createTestDatabase('transform_admit');

beforeAll(async () => {
  await db.pool.query(`
    CREATE TABLE public.orders (order_id bigint PRIMARY KEY, created_at timestamptz NOT NULL, region text, amount_cents bigint);
    CREATE TABLE public.secrets (region text PRIMARY KEY, secret text);
    CREATE FUNCTION public.cents(bigint) RETURNS bigint LANGUAGE sql IMMUTABLE AS 'SELECT $1 * 100';
    CREATE FUNCTION public.boom() RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$ BEGIN RAISE EXCEPTION 'boom ran'; END $$;
    CREATE FUNCTION public.peek(text) RETURNS text LANGUAGE sql STABLE AS 'SELECT secret FROM public.secrets WHERE region = $1';
    -- The allow-list as migration 0024 makes it (this database has no registry).
    CREATE SCHEMA genfill;
    CREATE TABLE genfill.transform_functions (function regprocedure PRIMARY KEY, reason text NOT NULL,
      added_by text NOT NULL DEFAULT session_user, added_at timestamptz NOT NULL DEFAULT clock_timestamp());`);
});
beforeEach(() => {
  keepOnFailure(db);
  forgetAdmissions();
});

const CONTEXT = { sourceTable: 'public.orders', key: ['order_id'], time: 'created_at', dependencies: [] as string[] };

async function messages(sql: string, dependencies: string[] = []): Promise<string[]> {
  const client = await db.pool.connect();
  try {
    return (await probeTransform(client, { ...CONTEXT, dependencies, sql })).problems.map((p) => p.message);
  } finally {
    client.release();
  }
}

describe('the function rule', () => {
  it('refuses SQL-running and server-state built-ins whatever their volatility', async () => {
    const sql = `SELECT s.*, table_to_xml('public.secrets'::regclass, true, false, '')::text AS a,
                        current_setting('data_directory') AS b, pg_stat_get_numscans('public.secrets'::regclass) AS c FROM source s`;
    const found = await messages(sql);
    expect(found).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/pg_catalog\.table_to_xml\(\), which runs a query of its own/),
        expect.stringMatching(/pg_catalog\.current_setting\(\), which reads server or catalog state/),
        expect.stringMatching(/pg_catalog\.pg_stat_get_numscans\(\), which reads server or catalog state/),
      ]),
    );
    // The static check names them too, before any database is involved.
    const statically = (await checkTransformStatic(sql)).problems.map((p) => p.message);
    expect(statically).toEqual(expect.arrayContaining([expect.stringMatching(/table_to_xml\(\) runs a query of its own/)]));
  });

  it('refuses a user function until the owner allow-lists it, then accepts it', async () => {
    const sql = 'SELECT s.*, public.cents(s.amount_cents) AS c FROM source s';
    expect(await messages(sql)).toEqual([expect.stringMatching(/calls public\.cents\(bigint\), which is not a built-in and not in genfill\.transform_functions/)]);
    await db.pool.query(`INSERT INTO genfill.transform_functions (function, reason) VALUES ('public.cents(bigint)', 'arithmetic')`);
    try {
      expect(await messages(sql)).toEqual([]);
    } finally {
      await db.pool.query(`DELETE FROM genfill.transform_functions`);
    }
  });

  it('refuses a STABLE user function that reads an undeclared table, without running it', async () => {
    const found = await messages(`SELECT s.*, public.peek(s.region) AS leaked FROM source s`);
    expect(found).toEqual([expect.stringMatching(/calls public\.peek\(text\), which is not a built-in/)]);
  });

  it('never plans a transform with a refused function: planning would run an IMMUTABLE one on constants', async () => {
    const found = await messages('SELECT s.*, public.boom() AS b FROM source s');
    expect(found).toEqual([expect.stringMatching(/calls public\.boom\(\), which is not a built-in/)]);
  });

  it('refuses a parameter placeholder: in a parameterised statement it would read the statement\'s values', async () => {
    const found = (await checkTransformStatic(`SELECT s.*, $1::text AS g FROM source s`)).problems.map((p) => p.message);
    expect(found).toEqual([expect.stringMatching(/the parameter placeholder \$1 has no value/)]);
  });
});

describe('queryUserSql', () => {
  it('refuses a second statement even without parameters (extended protocol)', async () => {
    await expect(queryUserSql(db.pool, `SELECT 1; UPDATE public.secrets SET secret = 'x'`)).rejects.toMatchObject({ code: '42601' });
    expect((await queryUserSql<{ n: number }>(db.pool, 'SELECT $1::int AS n', [7])).rows).toEqual([{ n: 7 }]);
  });
});

describe('admitTransform', () => {
  it('runs inside a caller\'s transaction under a savepoint, leaving its settings and work in place', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`SET LOCAL statement_timeout = '2s'`);
      await client.query(`INSERT INTO public.secrets VALUES ('inside', 'kept')`);
      await expect(admitTransform(client, { ...CONTEXT, sql: 'SELECT s.* FROM source s' })).resolves.toBeUndefined();
      await expect(admitTransform(client, { ...CONTEXT, sql: 'SELECT s.*, x.secret FROM source s, public.secrets x' })).rejects.toBeInstanceOf(TransformRefusedError);
      // Still usable, the same timeout, the row still there (rolled back only to the savepoint).
      const { rows } = await client.query(`SELECT current_setting('statement_timeout') AS t, (SELECT count(*)::int FROM public.secrets WHERE region = 'inside') AS n`);
      expect(rows[0]).toEqual({ t: '2s', n: 1 });
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
  });

  it('caches a positive verdict for the same text and context only; a changed text is probed again and refused', async () => {
    const client = await db.pool.connect();
    try {
      const good = 'SELECT s.* FROM source s';
      await admitTransform(client, { ...CONTEXT, sql: good });
      // Cached: admitted inside a READ ONLY transaction, where a probe could not run.
      await client.query('BEGIN READ ONLY');
      await expect(admitTransform(client, { ...CONTEXT, sql: good })).resolves.toBeUndefined();
      const err = await admitTransform(client, { ...CONTEXT, sql: `${good} WHERE s.region IS NOT NULL` }).then(() => null, (e) => e);
      expect(err).toBeInstanceOf(TransformRefusedError);
      expect(err.message).toMatch(/was not admitted before this read-only transaction began/);
      await client.query('ROLLBACK');
      // Another context (a dependency declared) is another verdict.
      await expect(admitTransform(client, { ...CONTEXT, sql: 'SELECT s.*, x.secret FROM source s JOIN public.secrets x USING (region)', dependencies: ['public.secrets'] })).resolves.toBeUndefined();
      await expect(admitTransform(client, { ...CONTEXT, sql: 'SELECT s.*, x.secret FROM source s JOIN public.secrets x USING (region)' })).rejects.toBeInstanceOf(TransformRefusedError);
    } finally {
      client.release();
    }
  });

  it('refuses the multi-statement text with its problems, before the database sees it', async () => {
    const client = await db.pool.connect();
    try {
      const err = await admitTransform(client, { ...CONTEXT, sql: `SELECT * FROM source) AS t; UPDATE public.secrets SET secret = 'x'; SELECT * FROM (SELECT 1`, digest: 'sha256:x', release: 'r@1' }).then(
        () => null,
        (e) => e,
      );
      expect(err).toBeInstanceOf(TransformRefusedError);
      expect(err).toMatchObject({ exitCode: 3, retryable: false, digest: 'sha256:x', release: 'r@1' });
      expect(err.problems.length).toBeGreaterThan(0);
    } finally {
      client.release();
    }
  });
});
