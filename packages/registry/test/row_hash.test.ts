// The one SQL definition of a row's 64-bit hash (its current definition, sql/functions/row_hash.sql,
// first made by migration 0002): genfill.canon per value and genfill.row_hash over the canonical
// texts. The golden vectors at the bottom pin the definition: if one of them fails, the
// definition changed, and that needs new vectors and a migration that deals with the hashes
// already stored — never an edit of these numbers.
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, keepOnFailure } from '../../../test/support/db.ts';

const DEFINITION = fileURLToPath(new URL('../sql/functions/row_hash.sql', import.meta.url));

const db = await createTestDatabase('row_hash');
beforeEach(() => keepOnFailure(db));

beforeAll(async () => {
  const sql = fs.readFileSync(DEFINITION, 'utf8');
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('CREATE SCHEMA IF NOT EXISTS genfill');
    await client.query(sql);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  } finally {
    client.release();
  }
});

/** Run `fn` on one connection with the given settings (SET LOCAL, rolled back afterwards). */
async function withSettings<T>(settings: Record<string, string>, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    for (const [name, value] of Object.entries(settings)) {
      await client.query('SELECT set_config($1, $2, true)', [name, value]);
    }
    return await fn(client);
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}

/** The value of one SQL expression, as text (bigint hashes included), under the given settings. */
async function value(expr: string, settings: Record<string, string> = {}): Promise<string | null> {
  return withSettings(settings, async (c) => {
    const { rows } = await c.query<{ v: string | null }>(`SELECT (${expr})::text AS v`);
    return rows[0]!.v;
  });
}

const hash = (arrayExpr: string, settings: Record<string, string> = {}) =>
  value(`genfill.row_hash(${arrayExpr})`, settings);

/** The same expression under every combination of settings gives one and the same text. */
async function sameUnder(expr: string, combos: Record<string, string>[]): Promise<string> {
  const seen = await Promise.all(combos.map((s) => value(expr, s)));
  expect(new Set(seen).size, `${expr} under ${JSON.stringify(combos)} gave ${JSON.stringify(seen)}`).toBe(1);
  expect(seen[0]).not.toBeNull();
  return seen[0]!;
}

describe('row_hash: NULL, empty and the string NULL', () => {
  it('gives three different hashes for NULL, the empty string and the string NULL alone', async () => {
    const hashes = await Promise.all([hash(`ARRAY[NULL::text]`), hash(`ARRAY['']`), hash(`ARRAY['NULL']`)]);
    expect(new Set(hashes).size).toBe(3);
  });

  it('gives three different hashes for NULL, the empty string and the string NULL in the middle of a row', async () => {
    const hashes = await Promise.all([
      hash(`ARRAY['a', NULL::text, 'b']`),
      hash(`ARRAY['a', '', 'b']`),
      hash(`ARRAY['a', 'NULL', 'b']`),
    ]);
    expect(new Set(hashes).size).toBe(3);
  });

  it('tells a row of no columns from a row of one NULL column, and a NULL array gives NULL', async () => {
    expect(await hash(`ARRAY[]::text[]`)).not.toBe(await hash(`ARRAY[NULL::text]`));
    expect(await hash(`NULL::text[]`)).toBeNull();
  });
});

describe('row_hash: column boundaries and order', () => {
  it('does not take a comma inside a value for a column boundary', async () => {
    expect(await hash(`ARRAY['a,b']`)).not.toBe(await hash(`ARRAY['a', 'b']`));
    expect(await hash(`ARRAY['a", "b']`)).not.toBe(await hash(`ARRAY['a', 'b']`));
  });

  it('depends on the position of a NULL', async () => {
    expect(await hash(`ARRAY['a', NULL]`)).not.toBe(await hash(`ARRAY[NULL, 'a']`));
  });

  it('depends on column order', async () => {
    expect(await hash(`ARRAY['a', 'b']`)).not.toBe(await hash(`ARRAY['b', 'a']`));
  });

  it('keeps the difference between A and a under a case-insensitive column collation', async () => {
    await db.pool.query(
      `CREATE COLLATION IF NOT EXISTS public.case_insensitive (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`,
    );
    expect(await value(`'A' = ('a' COLLATE public.case_insensitive)`)).toBe('true');
    expect(await hash(`ARRAY[genfill.canon('A'::text COLLATE public.case_insensitive)]`)).not.toBe(
      await hash(`ARRAY[genfill.canon('a'::text COLLATE public.case_insensitive)]`),
    );
  });

  it('does not cancel in a sum when values swap between rows', async () => {
    // A linear combination of element hashes would give both partitions the same sum.
    const sum = (rows: string[]) =>
      value(`(SELECT sum(genfill.row_hash(r)) FROM (VALUES ${rows.map((r) => `(${r})`).join(', ')}) v(r))`);
    expect(await sum([`ARRAY['a', 'b']`, `ARRAY['c', 'd']`])).not.toBe(await sum([`ARRAY['a', 'd']`, `ARRAY['c', 'b']`]));
  });
});

describe('canon: numeric', () => {
  it('canons 1.0, 1.00 and 1 identically', async () => {
    expect(await value(`genfill.canon(1.0::numeric)`)).toBe('1');
    expect(await value(`genfill.canon(1.00::numeric)`)).toBe('1');
    expect(await value(`genfill.canon(1::numeric)`)).toBe('1');
    expect(await hash(`ARRAY[genfill.canon(1.0::numeric)]`)).toBe(await hash(`ARRAY[genfill.canon(1::numeric)]`));
  });

  it('canons 1.5 and 1.50 identically', async () => {
    expect(await value(`genfill.canon(1.5::numeric)`)).toBe('1.5');
    expect(await value(`genfill.canon(1.50::numeric)`)).toBe('1.5');
  });

  it('canons 10 and 1 differently, and 100 and 1.00 too', async () => {
    expect(await value(`genfill.canon(10::numeric)`)).toBe('10');
    expect(await value(`genfill.canon(100::numeric)`)).toBe('100');
    expect(await hash(`ARRAY[genfill.canon(10::numeric)]`)).not.toBe(await hash(`ARRAY[genfill.canon(1::numeric)]`));
  });

  it('canons -0 as 0, and keeps NaN and the infinities', async () => {
    expect(await value(`genfill.canon('-0'::numeric)`)).toBe('0');
    expect(await value(`genfill.canon('-0.000'::numeric)`)).toBe('0');
    expect(await value(`genfill.canon('NaN'::numeric)`)).toBe('NaN');
    expect(await value(`genfill.canon('-Infinity'::numeric)`)).toBe('-Infinity');
    expect(await value(`genfill.canon(-12.3400::numeric)`)).toBe('-12.34');
  });
});

describe('canon: integers and text', () => {
  it('keeps every digit of a bigint above 2^53 (integers never go through float8)', async () => {
    expect(await value(`genfill.canon(9007199254740993::bigint)`)).toBe('9007199254740993');
    expect(await hash(`ARRAY[genfill.canon(9007199254740993::bigint)]`)).not.toBe(
      await hash(`ARRAY[genfill.canon(9007199254740992::bigint)]`),
    );
    expect(await value(`genfill.canon((-32768)::smallint) || genfill.canon(2147483647)`)).toBe('-327682147483647');
  });

  it('canons text, varchar and char(n) by their characters', async () => {
    expect(await value(`genfill.canon('x y'::text)`)).toBe('x y');
    expect(await value(`genfill.canon('x y'::varchar(10))`)).toBe('x y');
    expect(await value(`genfill.canon('x y'::char(6))`)).toBe('x y');
    expect(await value(`genfill.canon('untyped literal')`)).toBe('untyped literal');
  });
});

const TIMEZONES = ['UTC', 'Europe/Berlin', 'America/New_York', 'Asia/Kolkata'];
const DATESTYLES = ['ISO, MDY', 'SQL, DMY', 'German', 'Postgres, YMD'];
const allTimeSettings = TIMEZONES.flatMap((TimeZone) => DATESTYLES.map((DateStyle) => ({ TimeZone, DateStyle })));

describe('canon: time types do not depend on TimeZone or DateStyle', () => {
  it('canons a timestamptz to the same epoch text under UTC, Berlin, New York and DateStyle SQL, DMY', async () => {
    const combos = [
      { TimeZone: 'UTC' },
      { TimeZone: 'Europe/Berlin' },
      { TimeZone: 'America/New_York' },
      { TimeZone: 'America/New_York', DateStyle: 'SQL, DMY' },
      ...allTimeSettings,
    ];
    // The literal carries its own offset, so it is one instant whatever the session's TimeZone.
    expect(await sameUnder(`genfill.canon('2025-07-01 02:00:00+02'::timestamptz)`, combos)).toBe('1751328000');
    expect(await sameUnder(`genfill.canon('2025-12-31 23:59:59.123456-05'::timestamptz)`, combos)).toBe('1767243599.123456');
    expect(await sameUnder(`genfill.row_hash(ARRAY[genfill.canon('2025-07-01 00:00:00+00'::timestamptz)])`, combos)).toMatch(
      /^-?\d+$/,
    );
  });

  it('canons the same instant written in two zones identically', async () => {
    expect(await value(`genfill.canon('2025-07-01 02:00:00+02'::timestamptz)`)).toBe(
      await value(`genfill.canon('2025-06-30 20:00:00-04'::timestamptz)`),
    );
  });

  it('canons the infinities of timestamptz, timestamp and date as infinity and -infinity', async () => {
    for (const type of ['timestamptz', 'timestamp', 'date']) {
      expect(await sameUnder(`genfill.canon('infinity'::${type})`, allTimeSettings)).toBe('infinity');
      expect(await sameUnder(`genfill.canon('-infinity'::${type})`, allTimeSettings)).toBe('-infinity');
    }
  });

  it('canons a date as YYYY-MM-DD even under DateStyle German', async () => {
    expect(await sameUnder(`genfill.canon('2025-07-01'::date)`, [{ DateStyle: 'German' }, ...allTimeSettings])).toBe(
      '2025-07-01',
    );
    expect(await value(`'2025-07-01'::date::text`, { DateStyle: 'German' })).toBe('01.07.2025');
  });

  it('canons a timestamp as exact epoch seconds and a time with six fractional digits under every DateStyle', async () => {
    expect(await sameUnder(`genfill.canon('2025-07-01 12:34:56.5'::timestamp)`, allTimeSettings)).toBe('1751373296.5');
    expect(await sameUnder(`genfill.canon('01:02:03.000004'::time)`, allTimeSettings)).toBe('01:02:03.000004');
    expect(await value(`genfill.canon('24:00'::time)`)).toBe('24:00:00.000000');
  });

  it('keeps years outside 1..9999 distinct and readable', async () => {
    expect(await value(`genfill.canon('0001-01-01'::date)`)).toBe('0001-01-01');
    expect(await value(`genfill.canon('0044-03-15 BC'::date)`)).toBe('-44-03-15');
    expect(await value(`genfill.canon('12345-06-07'::date)`)).toBe('12345-06-07');
    expect(await value(`genfill.canon('5874897-12-31'::date)`)).toBe('5874897-12-31');
    expect(await value(`genfill.canon('12345-06-07 08:09:10+00'::timestamptz)`)).toBe('327416976550');
    expect(await value(`genfill.canon('0044-03-15 12:00:00 BC'::timestamp)`)).toBe('-63517780800');
    // Past year 99999 the epoch difference would overflow an interval: the ISO spelling stays.
    expect(await value(`genfill.canon('123456-01-01 00:00:00'::timestamp)`)).toBe('123456-01-01T00:00:00.000000');
    expect(await value(`genfill.canon('123456-01-01 00:00:00+00'::timestamptz)`)).toBe('123456-01-01T00:00:00.000000Z');
  });

  it('canons many instants to their exact epoch (reading back as the same instant), dates and times as to_char does', async () => {
    const { rows } = await db.pool.query<{ bad: string }>(`
      SELECT count(*)::text AS bad FROM (
        SELECT to_timestamp(i * 431999.938271 - 2e9) AS ts FROM generate_series(1, 20000) i) s
       WHERE genfill.canon(ts) <> trim_scale(extract(epoch FROM ts))::text
          OR to_timestamp(genfill.canon(ts)::numeric) <> ts
          OR genfill.canon(ts AT TIME ZONE 'UTC') <> genfill.canon(ts)
          OR genfill.canon((ts AT TIME ZONE 'UTC')::date) <> to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD')
          OR genfill.canon((ts AT TIME ZONE 'UTC')::time) <> to_char(ts AT TIME ZONE 'UTC', 'HH24:MI:SS.US')`);
    expect(rows[0]!.bad).toBe('0');
  });
});

describe('canon: interval', () => {
  const styles = ['postgres', 'postgres_verbose', 'sql_standard', 'iso_8601'].map((IntervalStyle) => ({ IntervalStyle }));

  it("canons '1 day' and '24 hours' differently (they are different values in storage)", async () => {
    expect(await value(`'1 day'::interval = '24 hours'::interval`)).toBe('true');
    expect(await sameUnder(`genfill.canon('1 day'::interval)`, styles)).toBe('0 mon 1 day 0 us');
    expect(await sameUnder(`genfill.canon('24 hours'::interval)`, styles)).toBe('0 mon 0 day 86400000000 us');
  });

  it('canons months, days and microseconds as separate fields under every IntervalStyle', async () => {
    expect(await sameUnder(`genfill.canon('1 mon 2 days 3 seconds'::interval)`, styles)).toBe('1 mon 2 day 3000000 us');
    expect(await sameUnder(`genfill.canon('-1 year -2 mons +3 days -04:05:06.7'::interval)`, styles)).toBe(
      '-14 mon 3 day -14706700000 us',
    );
    expect(await sameUnder(`genfill.canon('1000000 hours 0.000001 seconds'::interval)`, styles)).toBe(
      '0 mon 0 day 3600000000000001 us',
    );
    expect(await value(`'1 mon 2 days 3 seconds'::interval::text`, { IntervalStyle: 'iso_8601' })).toBe('P1M2DT3S');
  });
});

describe('canon: bytea, json and floats', () => {
  it('canons bytea as \\x and hex even when bytea_output is escape', async () => {
    const combos = [{ bytea_output: 'hex' }, { bytea_output: 'escape' }];
    expect(await sameUnder(`genfill.canon('\\x00ff41'::bytea)`, combos)).toBe('\\x00ff41');
    expect(await value(`'\\x00ff41'::bytea::text`, { bytea_output: 'escape' })).toBe('\\000\\377A');
  });

  it('canons json as its jsonb text, so key order and whitespace do not matter', async () => {
    expect(await value(`genfill.canon('{"b": 1,   "a": [true, null]}'::json)`)).toBe('{"a": [true, null], "b": 1}');
    expect(await value(`genfill.canon('{"a":[true,null],"b":1}'::jsonb)`)).toBe('{"a": [true, null], "b": 1}');
  });

  it('canons float8 the same under extra_float_digits 0, 1, 3 and -15', async () => {
    const combos = ['0', '1', '3', '-15'].map((d) => ({ extra_float_digits: d }));
    expect(await value(`(0.1::float8 + 0.2)::text`, { extra_float_digits: '0' })).not.toBe(
      await value(`(0.1::float8 + 0.2)::text`, { extra_float_digits: '3' }),
    );
    expect(await sameUnder(`genfill.canon(0.1::float8)`, combos)).toBe('0.1');
    expect(await sameUnder(`genfill.canon(0.1::float8 + 0.2)`, combos)).toBe('float8:3fd3333333333334');
    expect(await sameUnder(`genfill.canon(1e300::float8)`, combos)).toBe(`1${'0'.repeat(300)}`);
    expect(await sameUnder(`genfill.canon(-2.5e-3::float8)`, combos)).toBe('-0.0025');
    expect(await sameUnder(`genfill.canon(0.1::real)`, combos)).toBe('0.1');
    expect(await sameUnder(`genfill.canon(16777217::float8)`, combos)).toBe('16777217');
    expect(await sameUnder(`genfill.canon(1::real / 3::real)`, combos)).toBe('float4:3eaaaaab');
  });

  it('canons float -0 as 0 and keeps NaN and the infinities', async () => {
    expect(await value(`genfill.canon('-0'::float8)`)).toBe('0');
    expect(await value(`genfill.canon('-0'::real)`)).toBe('0');
    expect(await value(`genfill.canon('NaN'::float8)`)).toBe('NaN');
    expect(await value(`genfill.canon('Infinity'::float8)`)).toBe('Infinity');
    expect(await value(`genfill.canon('-Infinity'::real)`)).toBe('-Infinity');
  });

  it('canons every float8 to a text that reads back as exactly that float8, distinct for distinct values', async () => {
    // Random doubles over many magnitudes, plus edge values; decimal canons read back with
    // ::float8, hex canons with float8 bits.
    const { rows } = await db.pool.query<{ n: string; bad: string; distinct_values: string; distinct_canons: string }>(`
      WITH x AS (
        SELECT v FROM (SELECT setseed(0.42)) s,
             LATERAL (SELECT ((random() - 0.5) * 10 ^ (random() * 600 - 300))::float8 AS v
                        FROM generate_series(1, 20000)) r
        UNION ALL SELECT (i::float8 / 7) FROM generate_series(1, 2000) i
        -- the top of the range, where a 15-digit decimal can round up past the largest float8
        UNION ALL SELECT s * 1.7976931348623157e308::float8 * (1 - k * 2::float8 ^ -53)
                    FROM generate_series(0, 3000) k, (VALUES (1::float8), (-1)) sign(s)
        UNION ALL SELECT unnest(ARRAY[0.1::float8 + 0.2, 1::float8 / 3, 5e-324, 2.2250738585072014e-308,
                                      1.7976931348623157e308, 1.79769313486231e308, 0.1, 1e23, 9007199254740993,
                                      'NaN', 'Infinity', '-Infinity', '-0'])
      ), c AS (SELECT v, genfill.canon(v) AS canon FROM x)
      SELECT count(*)::text AS n,
             count(*) FILTER (WHERE CASE WHEN canon LIKE 'float8:%'
                                         THEN ('x' || substr(canon, 8))::bit(64)::bigint
                                              <> ('x' || encode(float8send(v), 'hex'))::bit(64)::bigint
                                         ELSE canon::float8 <> v END)::text AS bad,
             count(DISTINCT v)::text AS distinct_values,
             count(DISTINCT canon)::text AS distinct_canons
        FROM c`);
    expect(rows[0]!.bad).toBe('0');
    expect(rows[0]!.distinct_canons).toBe(rows[0]!.distinct_values);
    expect(Number(rows[0]!.n)).toBeGreaterThan(20000);
  });

  it('canons every real to a text that reads back as exactly that real, distinct for distinct values', async () => {
    const { rows } = await db.pool.query<{ n: string; bad: string; distinct_values: string; distinct_canons: string }>(`
      WITH x AS (
        SELECT v FROM (SELECT setseed(0.17)) s,
             LATERAL (SELECT ((random() - 0.5) * 10 ^ (random() * 76 - 38))::real AS v
                        FROM generate_series(1, 20000)) r
        UNION ALL SELECT (i::real / 7::real) FROM generate_series(1, 2000) i
        -- the top of the range, where a 6-digit decimal can round up past the largest float4
        UNION ALL SELECT (s * 3.4028234663852886e38::float8 * (1 - k * 2::float8 ^ -24))::real
                    FROM generate_series(0, 3000) k, (VALUES (1::float8), (-1)) sign(s)
        UNION ALL SELECT unnest(ARRAY['1.4e-45'::real, '1.17549435e-38', '3.4028235e38', 0.1, 16777216,
                                      'NaN', 'Infinity', '-Infinity', '-0'])
      ), c AS (SELECT v, genfill.canon(v) AS canon FROM x)
      SELECT count(*)::text AS n,
             count(*) FILTER (WHERE CASE WHEN canon LIKE 'float4:%'
                                         THEN substr(canon, 8) <> encode(float4send(v), 'hex')
                                         ELSE canon::real <> v END)::text AS bad,
             count(DISTINCT v)::text AS distinct_values,
             count(DISTINCT canon)::text AS distinct_canons
        FROM c`);
    expect(rows[0]!.bad).toBe('0');
    expect(rows[0]!.distinct_canons).toBe(rows[0]!.distinct_values);
    expect(Number(rows[0]!.n)).toBeGreaterThan(20000);
  });
});

describe('NULL in, NULL out', () => {
  it('gives NULL for a NULL of every canon overload and for a NULL array', async () => {
    const types = [
      'text', 'varchar', 'smallint', 'integer', 'bigint', 'numeric', 'double precision', 'real', 'date', 'time',
      'timestamp', 'timestamptz', 'interval', 'bytea', 'json', 'jsonb', 'boolean', 'uuid',
    ];
    const exprs = types.map((t) => `genfill.canon(NULL::${t}) IS NULL`);
    const { rows } = await db.pool.query<{ all_null: boolean }>(
      `SELECT (${exprs.join(' AND ')}) AND genfill.row_hash(NULL) IS NULL AS all_null`,
    );
    expect(rows[0]!.all_null).toBe(true);
  });
});

describe('functions', () => {
  it('are all IMMUTABLE, PARALLEL SAFE, LANGUAGE sql, without SET clauses, and documented as the shared definition', async () => {
    const { rows } = await db.pool.query<{ sig: string; volatile: string; parallel: string; lang: string; config: string[] | null; comment: string | null }>(`
      SELECT p.oid::regprocedure::text AS sig, p.provolatile AS volatile, p.proparallel AS parallel,
             l.lanname AS lang, p.proconfig AS config, obj_description(p.oid, 'pg_proc') AS comment
        FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
       WHERE p.pronamespace = 'genfill'::regnamespace AND p.proname IN ('canon', 'row_hash')
       ORDER BY 1`);
    expect(rows.length).toBe(16);
    for (const r of rows) {
      expect({ sig: r.sig, volatile: r.volatile, parallel: r.parallel, lang: r.lang, config: r.config }).toEqual({
        sig: r.sig, volatile: 'i', parallel: 's', lang: 'sql', config: null,
      });
      expect(r.comment, r.sig).toMatch(/shared by receipts, roots and reconciliation/);
      expect(r.comment, r.sig).toMatch(/new migration and new golden vectors/);
    }
  });

  it('row_hash is inlined by the planner (EXPLAIN VERBOSE shows hashtextextended, not the function)', async () => {
    const { rows } = await db.pool.query<{ 'QUERY PLAN': string }>(
      `EXPLAIN (VERBOSE) SELECT genfill.row_hash(ARRAY[genfill.canon(x)]) FROM generate_series(1, 10) x`,
    );
    const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(plan).toMatch(/hashtextextended/);
    expect(plan).not.toMatch(/genfill\./);
  });

  it('inlines a typical many-column row and every canon overload, leaving no genfill function call', async () => {
    const cols = [
      'x', 'x::smallint', 'x::bigint', 'x::text', 'x::varchar', 'x::numeric / 7', 'x::float8 / 7', 'x::real / 7',
      `now()`, `localtimestamp`, `current_date`, `localtime`, `x * interval '1 second'`, `x::text::bytea`,
      `('[' || x || ']')::json`, `('[' || x || ']')::jsonb`, `x > 5`, `gen_random_uuid()`,
    ];
    const { rows } = await db.pool.query<{ 'QUERY PLAN': string }>(
      `EXPLAIN (VERBOSE) SELECT genfill.row_hash(ARRAY[${cols.map((c) => `genfill.canon(${c})`).join(', ')}])
         FROM generate_series(1, 10) x`,
    );
    const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(plan).toMatch(/hashtextextended\(\(hash_array_extended\(/);
    expect(plan).not.toMatch(/genfill\./);
  });
});

// ------------------------------------------------------------------------------------------------
// GOLDEN VECTORS. Computed once from migration 0002 (the same body as the file) and pasted here as literals. A failure means
// the definition of the row hash changed: every stored receipt and root would stop matching.
// Do not update these numbers; add a migration with a new definition and new vectors instead.
// ------------------------------------------------------------------------------------------------
const ORDER_TS = `'2025-07-01 12:34:56.789+00'::timestamptz`;
const GOLDEN: { input: string; canon: (string | null)[]; hash: string }[] = [
  { input: `ARRAY[NULL::text]`, canon: [null], hash: '-5790240921376542886' },
  { input: `ARRAY['']`, canon: [''], hash: '-3944434312572038954' },
  { input: `ARRAY['NULL']`, canon: ['NULL'], hash: '-4143547293064643059' },
  { input: `ARRAY[]::text[]`, canon: [], hash: '8680131335536356089' },
  { input: `ARRAY['a,b']`, canon: ['a,b'], hash: '7449235448920514905' },
  { input: `ARRAY['a', 'b']`, canon: ['a', 'b'], hash: '1029634292985439124' },
  { input: `ARRAY['a', NULL]`, canon: ['a', null], hash: '-7582096049688999437' },
  { input: `ARRAY[NULL, 'a']`, canon: [null, 'a'], hash: '-7774295678488320397' },
  { input: `ARRAY[genfill.canon(1.50::numeric)]`, canon: ['1.5'], hash: '-5814188737731136071' },
  { input: `ARRAY[genfill.canon(1::numeric)]`, canon: ['1'], hash: '-863343014461808957' },
  { input: `ARRAY[genfill.canon('2025-07-01 00:00:00+00'::timestamptz)]`, canon: ['1751328000'], hash: '-7217859206673596781' },
  { input: `ARRAY[genfill.canon('2025-07-01'::date)]`, canon: ['2025-07-01'], hash: '385471775030666670' },
  { input: `ARRAY[genfill.canon('1 day'::interval)]`, canon: ['0 mon 1 day 0 us'], hash: '-2112444161016755513' },
  { input: `ARRAY[genfill.canon(0.1::float8 + 0.2)]`, canon: ['float8:3fd3333333333334'], hash: '7460579367148360386' },
  { input: `ARRAY[genfill.canon('\\xdeadbeef'::bytea)]`, canon: ['\\xdeadbeef'], hash: '5978563478489353666' },
  {
    // A typical order row: order_id bigint, created_at timestamptz, note text, amount numeric.
    input: `ARRAY[genfill.canon(1001::bigint), genfill.canon(${ORDER_TS}), genfill.canon('Widget, "deluxe"'::text), genfill.canon(19.90::numeric)]`,
    canon: ['1001', '1751373296.789', 'Widget, "deluxe"', '19.9'],
    hash: '-5681853065758041034',
  },
  {
    // The same order with a NULL note and a zero amount.
    input: `ARRAY[genfill.canon(1002::bigint), genfill.canon(${ORDER_TS}), genfill.canon(NULL::text), genfill.canon(0.00::numeric)]`,
    canon: ['1002', '1751373296.789', null, '0'],
    hash: '8675855001294883201',
  },
];

describe('golden vectors', () => {
  it.each(GOLDEN)('$input has its pinned canonical texts and row hash', async ({ input, canon, hash: expected }) => {
    const sessions: Record<string, string>[] = [
      {},
      { TimeZone: 'America/New_York', DateStyle: 'SQL, DMY', IntervalStyle: 'iso_8601', extra_float_digits: '0', bytea_output: 'escape' },
    ];
    for (const settings of sessions) {
      const got = await withSettings(settings, async (c) => {
        const { rows } = await c.query<{ canon: (string | null)[]; hash: string }>(
          `SELECT (${input})::text[] AS canon, genfill.row_hash(${input})::text AS hash`,
        );
        return rows[0]!;
      });
      expect(got).toEqual({ canon, hash: expected });
    }
  });

  it('pins different hashes for the different inputs among the vectors', () => {
    const byCanon = new Map<string, string>();
    for (const g of GOLDEN) byCanon.set(JSON.stringify(g.canon), g.hash);
    expect(new Set(byCanon.values()).size).toBe(byCanon.size);
  });
});
