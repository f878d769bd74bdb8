// Golden row images, one column per type: a row written from a session with hostile settings
// is logged with the image genfill's pinned settings give (SPEC "Capture rules"), and
// jsonb_populate_record of that image gives the row back, column for column. A writer with
// extra_float_digits = 0 once logged 0.3 for 0.30000000000000004.
import pg from 'pg';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { migrate } from '@genfill/registry';
import { installCapture } from '../src/index.ts';
import { createTestDatabase, keepOnFailure } from '../../../test/support/db.ts';

const db = await createTestDatabase('capture_types');

/** Column → type, and the values of the rows written (row 1 ordinary, row 2 edge cases, row 3 NULLs). */
const COLUMNS: [string, string][] = [
  ['i4', 'integer'],
  ['i8', 'bigint'],
  ['num', 'numeric(12, 4)'],
  ['num_free', 'numeric'],
  ['f8', 'double precision'],
  ['f4', 'real'],
  ['txt', 'text'],
  ['bin', 'bytea'],
  ['flag', 'boolean'],
  ['d', 'date'],
  ['ts', 'timestamp'],
  ['tstz', 'timestamptz'],
  ['iv', 'interval'],
  ['tm', 'time'],
  ['jb', 'jsonb'],
  ['js', 'json'],
  ['uid', 'uuid'],
  ['ints', 'integer[]'],
  ['texts', 'text[]'],
  ['stamps', 'timestamptz[]'],
  ['mood', 'public.mood'],
  ['cash', 'money'],
  ['span', 'tstzrange'],
];

const ROWS = [
  `(1, 42, 9007199254740993, 1.5000, 1.50, 0.1::float8 + 0.2::float8, 1.0000001, 'plain', '\\x00ff10'::bytea, true,
    '2025-07-01', '2025-07-01 12:34:56.789012', '2025-07-01 00:00:00+00', '1 year 2 mons 3 days 04:05:06.789', '23:59:59.999999',
    '{"b": 1, "a": [1, 2.50]}', '{"k": "v"}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,2,3}', '{"x","y"}',
    '{"2025-07-01 00:00:00+00","2025-12-31 23:00:00+00"}', 'happy', 1234.56, '[2025-07-01 00:00:00+00,2025-08-01 00:00:00+00)')`,
  `(2, -2147483648, -1, -0.0001, 123456789012345678901234567890.000000001, 'Infinity', 'NaN', '', '\\x'::bytea, false,
    '0001-01-01 BC', '1999-12-31 23:59:59', '1970-01-01 00:00:00.000001+00', '-1 year +2 days -03:00:00', '00:00:00',
    '{"unicode": "é☃", "esc": "a\\"b", "nul": null}', '[]', '00000000-0000-0000-0000-000000000000', '{}', '{"", NULL, "NULL"}',
    '{NULL}', 'sad', -0.01, 'empty')`,
  `(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`,
];

const HOSTILE = [
  'SET extra_float_digits = 0',
  "SET DateStyle = 'SQL, DMY'",
  "SET IntervalStyle = 'sql_standard'",
  "SET TimeZone = 'Pacific/Kiritimati'",
  "SET bytea_output = 'escape'",
  // Only C locales exist on the test machine; C.utf8 is the only other lc_monetary it accepts.
  "SET lc_monetary = 'C.utf8'",
];

beforeAll(async () => {
  await migrate(db.pool);
  await db.pool.query(`CREATE TYPE public.mood AS ENUM ('sad', 'happy');
    CREATE TABLE public.golden (id int PRIMARY KEY, ${COLUMNS.map(([c, t]) => `${c} ${t}`).join(', ')})`);
  await installCapture(db.pool, { table: 'public.golden' });
  const writer = new pg.Client({ connectionString: db.url });
  await writer.connect();
  try {
    for (const s of HOSTILE) await writer.query(s);
    await writer.query(`INSERT INTO public.golden VALUES ${ROWS.join(', ')}`);
    // Update one to log a second image of row 1 from the same session.
    await writer.query(`UPDATE public.golden SET txt = 'updated' WHERE id = 1`);
  } finally {
    await writer.end();
  }
});
beforeEach(() => keepOnFailure(db));

const latest = `(SELECT DISTINCT ON (key) key, row FROM genfill.change_log WHERE source_table = 'public.golden' ORDER BY key, revision DESC)`;

describe('row images written from a hostile session', () => {
  it('give every column back through jsonb_populate_record', async () => {
    const differs = COLUMNS.map(([c, t]) =>
      t === 'json' ? `(r.${c})::jsonb IS DISTINCT FROM (g.${c})::jsonb` : `r.${c} IS DISTINCT FROM g.${c}`,
    );
    const { rows } = await db.pool.query<{ id: number; columns: string[] }>(
      `SELECT g.id, array_remove(ARRAY[${COLUMNS.map(([c], i) => `CASE WHEN ${differs[i]} THEN '${c}' END`).join(', ')}], NULL) AS columns
         FROM public.golden g JOIN ${latest} l ON (l.key->>'id')::int = g.id
        CROSS JOIN LATERAL jsonb_populate_record(NULL::public.golden, l.row) AS r
        ORDER BY g.id`,
    );
    expect(rows).toEqual([
      { id: 1, columns: [] },
      { id: 2, columns: [] },
      { id: 3, columns: [] },
    ]);
  });

  it('are the text genfill\'s pinned settings give, not the writer\'s', async () => {
    const { rows } = await db.pool.query<{ image: Record<string, unknown> }>(`SELECT row::text::json AS image FROM ${latest} l WHERE l.key = '{"id": 1}'`);
    const image = rows[0]!.image;
    // pg's JSON parser reads numbers as JS numbers: compare the exact text instead.
    const text = (await db.pool.query<{ t: Record<string, string> }>(`SELECT (SELECT jsonb_object_agg(k, v #>> '{}') FROM jsonb_each(row) AS e(k, v)) AS t FROM ${latest} l WHERE l.key = '{"id": 1}'`)).rows[0]!.t;
    expect(text.f8).toBe('0.30000000000000004');
    expect(text.f4).toBe('1.0000001');
    expect(text.i8).toBe('9007199254740993');
    expect(text.num).toBe('1.5000');
    expect(text.bin).toBe('\\x00ff10');
    expect(text.tstz).toBe('2025-07-01T00:00:00+00:00');
    expect(text.ts).toBe('2025-07-01T12:34:56.789012');
    expect(text.iv).toBe('1 year 2 mons 3 days 04:05:06.789');
    expect(text.cash).toBe('$1,234.56');
    expect(text.span).toBe('["2025-07-01 00:00:00+00","2025-08-01 00:00:00+00")');
    expect(image.stamps).toEqual(['2025-07-01T00:00:00+00:00', '2025-12-31T23:00:00+00:00']);
    expect(image.txt).toBe('updated');
    expect(image.mood).toBe('happy');
  });

  it('keep NULL, the empty string and the string "NULL" apart', async () => {
    const { rows } = await db.pool.query<{ id: string; txt: unknown; texts: unknown }>(
      `SELECT l.key->>'id' AS id, l.row->'txt' AS txt, l.row->'texts' AS texts FROM ${latest} l WHERE l.key->>'id' IN ('2', '3') ORDER BY 1`,
    );
    expect(rows).toEqual([
      { id: '2', txt: '', texts: ['', null, 'NULL'] },
      { id: '3', txt: null, texts: null },
    ]);
  });
});
