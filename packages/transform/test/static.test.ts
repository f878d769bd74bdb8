import { describe, expect, it } from 'vitest';
import { checkTransformStatic, wrapTransform } from '../src/index.ts';
import { stripTrailingSemicolons } from '../src/wrap.ts';

async function messages(sql: string): Promise<string[]> {
  const { problems } = await checkTransformStatic(sql);
  for (const p of problems) expect(p.path).toBe('transform.sql');
  return problems.map((p) => p.message);
}

const GOOD = `
SELECT s.order_id, s.created_at, s.region, s.amount_cents,
       round(s.amount_cents * r.rate)::bigint AS tax_cents
  FROM source s
  JOIN tax_rates r ON r.region = s.region;
`;

describe('checkTransformStatic', () => {
  it('accepts a row-local join of source to a dependency table and lists its functions', async () => {
    const result = await checkTransformStatic(GOOD);
    expect(result.problems).toEqual([]);
    expect(result.functionNames).toEqual(['round']);
  });

  it('allows an aggregate inside a scalar subquery that reads only a dependency table', async () => {
    const sql = `SELECT s.*, (SELECT max(rate) FROM tax_rates t WHERE t.region = s.region) AS rate FROM source s`;
    expect(await messages(sql)).toEqual([]);
  });

  it('allows an aggregate in a lateral subquery over a dependency table', async () => {
    const sql = `SELECT s.*, x.n FROM source s, LATERAL (SELECT count(*) AS n FROM tax_rates t WHERE t.region = s.region) x`;
    expect(await messages(sql)).toEqual([]);
  });

  it('allows nested WITH clauses, UNION ALL of two reads of source and set-returning functions', async () => {
    const sql = `
      WITH a AS (SELECT * FROM source), b AS (SELECT * FROM a WHERE amount_cents > 0)
      SELECT order_id, created_at FROM b
      UNION ALL
      SELECT order_id, created_at FROM source, generate_series(1, 2) g WHERE g = 1`;
    const result = await checkTransformStatic(sql);
    expect(result.problems).toEqual([]);
    expect(result.functionNames).toEqual(['generate_series']);
  });

  it('refuses count(*) with GROUP BY over source', async () => {
    const found = await messages('SELECT region, count(*) FROM source GROUP BY region');
    expect(found).toEqual([
      expect.stringMatching(/^line 1, column 46: GROUP BY over source/),
      expect.stringMatching(/^line 1, column 16: aggregate count\(\*\) over source/),
    ]);
  });

  it('refuses an aggregate over source reached through a CTE chain, and HAVING', async () => {
    const sql = 'WITH a AS (SELECT * FROM source), b AS (SELECT * FROM a) SELECT sum(amount_cents) FROM b HAVING true';
    const found = await messages(sql);
    expect(found).toContainEqual(expect.stringContaining('HAVING over source'));
    expect(found).toContainEqual(expect.stringContaining('aggregate sum(...) over source'));
  });

  it('refuses FILTER, DISTINCT, DISTINCT ON, LIMIT and OFFSET over source', async () => {
    expect(await messages('SELECT count(x) FILTER (WHERE x > 0) FROM source')).toEqual([
      expect.stringContaining('aggregate count(...) over source'),
    ]);
    expect(await messages('SELECT DISTINCT region FROM source')).toEqual([expect.stringContaining('DISTINCT over source')]);
    expect(await messages('SELECT DISTINCT ON (region) * FROM source')).toEqual([
      expect.stringContaining('DISTINCT ON over source'),
    ]);
    expect(await messages('SELECT * FROM (SELECT * FROM source ORDER BY 1 LIMIT 5) x')).toEqual([
      expect.stringContaining('LIMIT/OFFSET/FETCH over source'),
    ]);
    expect(await messages('SELECT * FROM source OFFSET 1')).toEqual([expect.stringContaining('LIMIT/OFFSET/FETCH')]);
    expect(await messages('SELECT * FROM source LIMIT ALL')).toEqual([]);
  });

  it('refuses a window function wherever it appears, naming it', async () => {
    expect(await messages('SELECT *, row_number() OVER (ORDER BY order_id) FROM source')).toEqual([
      expect.stringMatching(/^line 1, column 11: window function row_number\(\.\.\.\) OVER/),
    ]);
    const overDependency = 'SELECT s.*, (SELECT rank() OVER (ORDER BY rate) FROM tax_rates LIMIT 1) FROM source s';
    expect(await messages(overDependency)).toEqual([expect.stringContaining('window function rank(...)')]);
  });

  it('refuses now() and current_timestamp, naming each with its position', async () => {
    const sql = 'SELECT *,\n  now() AS a,\n  current_timestamp AS b\nFROM source';
    expect(await messages(sql)).toEqual([
      'line 2, column 3: now() reads the clock: a transform must be deterministic',
      'line 3, column 3: CURRENT_TIMESTAMP reads the clock: a transform must be deterministic',
    ]);
  });

  it('refuses other clock readers, randomness, sequences and transaction ids by name', async () => {
    const sql = `SELECT current_date, localtimestamp, pg_catalog.clock_timestamp(), statement_timestamp(),
      transaction_timestamp(), timeofday(), random(), gen_random_uuid(), nextval('s'), txid_current(),
      'now'::timestamptz, date 'today' FROM source`;
    const found = (await messages(sql)).join('\n');
    for (const name of [
      'CURRENT_DATE',
      'LOCALTIMESTAMP',
      'pg_catalog.clock_timestamp()',
      'statement_timestamp()',
      'transaction_timestamp()',
      'timeofday()',
      'random()',
      'gen_random_uuid()',
      'nextval()',
      'txid_current()',
      "'now'::timestamptz",
      "'today'::date",
    ]) {
      expect(found).toContain(name);
    }
  });

  it('refuses DML, DDL, SELECT INTO, locking clauses and data-modifying CTEs', async () => {
    expect(await messages('INSERT INTO t SELECT * FROM source')).toEqual([
      'is an INSERT statement, not a SELECT: a transform only reads',
    ]);
    expect(await messages('UPDATE t SET a = 1')).toEqual([expect.stringContaining('is an UPDATE statement')]);
    expect(await messages('DELETE FROM t')).toEqual([expect.stringContaining('is a DELETE statement')]);
    expect(await messages('CREATE TABLE t (a int)')).toEqual([expect.stringContaining('is a CREATE TABLE statement')]);
    expect(await messages('SELECT * INTO t FROM source')).toEqual([expect.stringContaining('SELECT INTO creates a table')]);
    expect(await messages('SELECT * FROM source FOR UPDATE')).toEqual([expect.stringContaining('FOR UPDATE locks rows')]);
    expect(await messages('SELECT * FROM source FOR KEY SHARE')).toEqual([expect.stringContaining('FOR KEY SHARE')]);
    expect(await messages('WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM source')).toEqual([
      expect.stringContaining('CTE d is a DELETE statement'),
    ]);
  });

  it('refuses two statements and an empty file', async () => {
    expect(await messages('SELECT * FROM source; SELECT 1')).toEqual([
      'must be exactly one SELECT statement, found 2',
    ]);
    expect(await messages('  \n')).toEqual([expect.stringContaining('is empty')]);
    expect(await messages('-- nothing here')).toEqual(['must be exactly one SELECT statement, found none']);
  });

  it('reports a syntax error with the parser message and its line and column', async () => {
    expect(await messages('SELECT *\nFROM source\nWHER order_id > 1')).toEqual([
      'line 3, column 6: syntax error at or near "order_id"',
    ]);
    // The parser's cursor counts characters, so non-ASCII text before it does not shift it.
    expect(await messages("SELECT 'ä', x frm source")).toEqual(['line 1, column 19: syntax error at or near "source"']);
  });

  it('refuses a transform that does not read source', async () => {
    expect(await messages('SELECT * FROM tax_rates')).toEqual([
      expect.stringContaining('does not read source'),
    ]);
    // public.source is some table, not the CTE genfill provides.
    expect(await messages('SELECT * FROM public.source')).toEqual([expect.stringContaining('does not read source')]);
  });

  it('refuses a CTE named source, which would hide the one genfill provides', async () => {
    expect(await messages('WITH source AS (SELECT * FROM orders) SELECT * FROM source')).toEqual([
      expect.stringMatching(/^line 1, column 6: defines its own CTE named source/),
    ]);
  });

  it('refuses reading source only in a filter, a self-join and an outer join that keeps non-source rows', async () => {
    expect(await messages('SELECT * FROM tax_rates WHERE region IN (SELECT region FROM source)')).toEqual([
      expect.stringContaining('a subquery in an expression reads source'),
      expect.stringContaining('the outer SELECT does not take its rows from source'),
    ]);
    expect(await messages('SELECT * FROM source a JOIN source b ON a.parent_id = b.order_id')).toEqual([
      expect.stringContaining('self-join'),
    ]);
    expect(await messages('SELECT * FROM source a, source b')).toEqual([expect.stringContaining('self-join')]);
    expect(await messages('SELECT * FROM tax_rates t LEFT JOIN source s USING (region)')).toEqual([
      expect.stringContaining('LEFT JOIN keeps rows that match no source row'),
    ]);
    expect(await messages('SELECT * FROM source s LEFT JOIN tax_rates t USING (region)')).toEqual([]);
  });

  it('accepts set operations only when each side is fine', async () => {
    expect(await messages('SELECT order_id FROM source UNION SELECT order_id FROM source')).toEqual([]);
    expect(await messages('SELECT a FROM source UNION ALL SELECT a FROM tax_rates')).toEqual([
      expect.stringContaining('only one side of UNION reads source'),
    ]);
    expect(await messages('SELECT a FROM source UNION ALL SELECT count(*) FROM source')).toEqual([
      expect.stringContaining('aggregate count(*) over source'),
    ]);
    expect(await messages('SELECT region FROM source EXCEPT SELECT region FROM tax_rates')).toEqual([]);
    expect(await messages('SELECT region FROM source EXCEPT SELECT region FROM source')).toEqual([
      expect.stringContaining('the right side of EXCEPT reads source'),
    ]);
  });

  it('accepts a recursive CTE that expands one source row at a time', async () => {
    const sql = `WITH RECURSIVE r AS (
        SELECT order_id, created_at, 1 AS n FROM source
        UNION ALL SELECT order_id, created_at, n + 1 FROM r WHERE n < 3)
      SELECT * FROM r`;
    expect(await messages(sql)).toEqual([]);
  });

  it('refuses TABLESAMPLE', async () => {
    expect(await messages('SELECT * FROM source TABLESAMPLE bernoulli (10)')).toEqual([
      expect.stringContaining('TABLESAMPLE picks rows at random'),
    ]);
  });

  it('lists every called function, lower-cased and qualified as written', async () => {
    const sql = 'SELECT Upper(region), pg_catalog.lower(region), public.jitter(), coalesce(a, 1) FROM source';
    const result = await checkTransformStatic(sql);
    expect(result.problems).toEqual([]);
    expect(result.functionNames).toEqual(['upper', 'pg_catalog.lower', 'public.jitter']);
  });
});

describe('wrapTransform', () => {
  it('binds the source rows to a CTE named source and nests the transform without its semicolon', () => {
    const wrapped = wrapTransform('SELECT * FROM source; -- the end ; really\n', 'SELECT * FROM "public"."orders"');
    expect(wrapped).toBe(
      'WITH source AS (\nSELECT * FROM "public"."orders"\n)\nSELECT * FROM (\nSELECT * FROM source\n) AS genfill_transform',
    );
  });

  it('keeps a trailing line comment from swallowing the closing parenthesis', () => {
    const wrapped = wrapTransform('SELECT * FROM source -- trailing', 'SELECT 1');
    expect(wrapped.endsWith('-- trailing\n) AS genfill_transform')).toBe(true);
  });

  it('strips only semicolons followed by nothing but whitespace and comments', () => {
    expect(stripTrailingSemicolons('SELECT 1;;  /* c */ ;\n')).toBe('SELECT 1');
    expect(stripTrailingSemicolons("SELECT ';'")).toBe("SELECT ';'");
    expect(stripTrailingSemicolons(';')).toBe('');
  });
});
