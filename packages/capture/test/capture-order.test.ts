// Per-key order of captured events (SPEC invariant 5, "Capture rules"): for every key, the
// latest event in the log is the table's state — after the statements that trip naive
// triggers (a CTE whose INSERT trigger fires before its DELETE trigger, key updates,
// ON CONFLICT, MERGE), after writes naming a partition instead of the partitioned table, and
// after two connections race on the same keys.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { migrate } from '@genfill/registry';
import { installCapture } from '../src/index.ts';
import { createTestDatabase, keepOnFailure } from '../../../test/support/db.ts';
import { eventsAfter, lastEventId, logMismatch, NO_MISMATCH, prng, writer } from './capture-harness.ts';

const db = await createTestDatabase('capture_order');
const clients: pg.Client[] = [];

async function connect(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  clients.push(c);
  return c;
}

beforeAll(async () => {
  await migrate(db.pool);
  await db.pool.query(`
    CREATE TABLE public.t (id int PRIMARY KEY, v int NOT NULL);
    CREATE TABLE public.p (id int NOT NULL, part int NOT NULL, v int NOT NULL, PRIMARY KEY (id, part)) PARTITION BY LIST (part);
    CREATE TABLE public.p0 PARTITION OF public.p FOR VALUES IN (0);
    CREATE TABLE public.p1 PARTITION OF public.p FOR VALUES IN (1) PARTITION BY LIST (id);
    CREATE TABLE public.p1_low PARTITION OF public.p1 FOR VALUES IN (1, 2, 3, 4);
    CREATE TABLE public.p1_high PARTITION OF public.p1 FOR VALUES IN (5, 6, 7, 8);`);
  expect((await installCapture(db.pool, { table: 'public.t' })).status).toBe('installed');
  expect((await installCapture(db.pool, { table: 'public.p' })).members).toEqual(['public.p', 'public.p0', 'public.p1', 'public.p1_high', 'public.p1_low']);
});
beforeEach(() => keepOnFailure(db));
afterAll(async () => {
  await Promise.all(clients.map((c) => c.end()));
});

describe('statements that trip naive capture triggers', () => {
  beforeEach(async () => {
    await db.pool.query('DELETE FROM public.t');
  });

  it('logs no delete for a key a CTE deletes and re-inserts, although the INSERT trigger fires first', async () => {
    await db.pool.query('INSERT INTO public.t VALUES (1, 10), (7, 70)');
    const before = await lastEventId(db.pool);
    // The INSERT reads one row of the DELETE's output and stops: the DELETE finishes after it,
    // so its statement trigger fires second, with both old rows.
    await db.pool.query('WITH d AS (DELETE FROM public.t WHERE id IN (1, 7) RETURNING *) INSERT INTO public.t SELECT id, v + 1 FROM d LIMIT 1');
    expect(await eventsAfter(db.pool, 'public.t', before)).toEqual(['upsert(1)', 'delete(7)']);
    expect((await db.pool.query('SELECT id, v FROM public.t')).rows).toEqual([{ id: 1, v: 11 }]);
    expect(await logMismatch(db.pool, 'public.t')).toEqual(NO_MISMATCH);
  });

  it('logs a delete for each vacated key and an upsert for each new one on UPDATE … SET id = id + 1', async () => {
    // Inserted in descending order so the row-by-row uniqueness check lets the update through.
    await db.pool.query('INSERT INTO public.t VALUES (3, 30), (2, 20), (1, 10)');
    const before = await lastEventId(db.pool);
    await db.pool.query('UPDATE public.t SET id = id + 1');
    expect((await eventsAfter(db.pool, 'public.t', before)).sort()).toEqual(['delete(1)', 'upsert(2)', 'upsert(3)', 'upsert(4)']);
    expect(await logMismatch(db.pool, 'public.t')).toEqual(NO_MISMATCH);
  });

  it('logs upserts, never a delete, for INSERT … ON CONFLICT DO UPDATE', async () => {
    await db.pool.query('INSERT INTO public.t VALUES (1, 10)');
    const before = await lastEventId(db.pool);
    await db.pool.query('INSERT INTO public.t VALUES (1, 11), (2, 20) ON CONFLICT (id) DO UPDATE SET v = excluded.v');
    expect((await eventsAfter(db.pool, 'public.t', before)).sort()).toEqual(['upsert(1)', 'upsert(2)']);
    expect(await logMismatch(db.pool, 'public.t')).toEqual(NO_MISMATCH);
  });

  it('logs the inserts, updates and deletes of one MERGE', async () => {
    await db.pool.query('INSERT INTO public.t VALUES (1, 10), (2, 20)');
    const before = await lastEventId(db.pool);
    await db.pool.query(`MERGE INTO public.t USING (VALUES (1, 0), (2, 21), (3, 30)) AS s (id, v) ON t.id = s.id
      WHEN MATCHED AND s.v = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v)`);
    expect((await eventsAfter(db.pool, 'public.t', before)).sort()).toEqual(['delete(1)', 'upsert(2)', 'upsert(3)']);
    expect(await logMismatch(db.pool, 'public.t')).toEqual(NO_MISMATCH);
  });

  it('logs delete then upsert when one transaction deletes a key and inserts it again', async () => {
    await db.pool.query('INSERT INTO public.t VALUES (1, 10)');
    const before = await lastEventId(db.pool);
    await db.pool.query('BEGIN; DELETE FROM public.t WHERE id = 1; INSERT INTO public.t VALUES (1, 12); COMMIT');
    expect(await eventsAfter(db.pool, 'public.t', before)).toEqual(['delete(1)', 'upsert(1)']);
    expect(await logMismatch(db.pool, 'public.t')).toEqual(NO_MISMATCH);
  });
});

describe('a partitioned source', () => {
  beforeEach(async () => {
    await db.pool.query('DELETE FROM public.p');
  });

  it('logs writes naming a partition, at any level, under the partitioned table', async () => {
    const before = await lastEventId(db.pool);
    await db.pool.query('INSERT INTO public.p0 VALUES (1, 0, 1)');
    await db.pool.query('INSERT INTO public.p1 VALUES (2, 1, 2)');
    await db.pool.query('INSERT INTO public.p1_high VALUES (6, 1, 6)');
    await db.pool.query('UPDATE public.p1_high SET v = 60');
    await db.pool.query('DELETE FROM public.p0');
    expect(await eventsAfter(db.pool, 'public.p', before)).toEqual(['upsert(1,0)', 'upsert(2,1)', 'upsert(6,1)', 'upsert(6,1)', 'delete(1,0)']);
    const sources = await db.pool.query('SELECT DISTINCT source_table FROM genfill.change_log WHERE event_id > $1', [before]);
    expect(sources.rows).toEqual([{ source_table: 'public.p' }]);
    expect(await logMismatch(db.pool, 'public.p')).toEqual(NO_MISMATCH);
  });

  it('logs a row moving between partitions as a delete of its old key and an upsert of its new one', async () => {
    await db.pool.query('INSERT INTO public.p VALUES (3, 0, 3)');
    const before = await lastEventId(db.pool);
    await db.pool.query('UPDATE public.p SET part = 1 WHERE id = 3');
    expect((await eventsAfter(db.pool, 'public.p', before)).sort()).toEqual(['delete(3,0)', 'upsert(3,1)']);
    expect(await logMismatch(db.pool, 'public.p')).toEqual(NO_MISMATCH);
  });
});

// Every statement shape above, on 8 keys, from two connections at once; deadlocks and unique
// violations roll a transaction back, as they would in production.
function plainStep(rnd: () => number): string[] {
  const k = 1 + Math.floor(rnd() * 8);
  const k2 = 1 + Math.floor(rnd() * 8);
  const v = Math.floor(rnd() * 1000);
  const shapes: string[][] = [
    [`INSERT INTO public.t VALUES (${k}, ${v})`],
    [`UPDATE public.t SET v = ${v} WHERE id = ${k}`],
    [`DELETE FROM public.t WHERE id = ${k}`],
    [`DELETE FROM public.t WHERE id = ${k}`, `INSERT INTO public.t VALUES (${k}, ${v})`],
    [`UPDATE public.t SET id = ${k2} WHERE id = ${k}`],
    [`WITH d AS (DELETE FROM public.t WHERE id IN (${k}, ${k2}) RETURNING *) INSERT INTO public.t SELECT id, v + 1 FROM d LIMIT 1`],
    [`INSERT INTO public.t VALUES (${k}, ${v}), (${k2 === k ? (k % 8) + 1 : k2}, ${v}) ON CONFLICT (id) DO UPDATE SET v = excluded.v + t.v`],
    [
      `MERGE INTO public.t USING (VALUES (${k}, ${v})) AS s (id, v) ON t.id = s.id
       WHEN MATCHED AND s.v % 3 = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v)`,
    ],
    [`UPDATE public.t SET v = v + 1 WHERE id IN (${k}, ${k2})`, `DELETE FROM public.t WHERE id = ${k2}`],
  ];
  return shapes[Math.floor(rnd() * shapes.length)]!;
}

function partitionedStep(rnd: () => number): string[] {
  const id = 1 + Math.floor(rnd() * 8);
  const part = Math.floor(rnd() * 2);
  const leaf = part === 0 ? 'public.p0' : id <= 4 ? 'public.p1_low' : 'public.p1_high';
  const v = Math.floor(rnd() * 1000);
  const shapes: string[][] = [
    [`INSERT INTO ${leaf} VALUES (${id}, ${part}, ${v})`],
    [`INSERT INTO public.p VALUES (${id}, ${part}, ${v}) ON CONFLICT (id, part) DO UPDATE SET v = excluded.v`],
    [`UPDATE ${leaf} SET v = ${v} WHERE id = ${id}`],
    [`DELETE FROM ${leaf} WHERE id = ${id}`],
    [`DELETE FROM ${leaf} WHERE id = ${id}`, `INSERT INTO public.p VALUES (${id}, ${part}, ${v})`],
    // Moves the row to the other partition: through the partitioned table only.
    [`UPDATE public.p SET part = 1 - part WHERE id = ${id} AND part = ${part}`],
    [`WITH d AS (DELETE FROM public.p1 WHERE id IN (${id}, ${(id % 8) + 1}) RETURNING *) INSERT INTO public.p1 SELECT id, part, v + 1 FROM d LIMIT 1`],
    [
      `MERGE INTO public.p USING (VALUES (${id}, ${part}, ${v})) AS s (id, part, v) ON p.id = s.id AND p.part = s.part
       WHEN MATCHED AND s.v % 3 = 0 THEN DELETE WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.part, s.v)`,
    ],
  ];
  return shapes[Math.floor(rnd() * shapes.length)]!;
}

/**
 * Rounds of a few transactions per writer, the log checked after each round: an inversion has
 * little time to be overwritten by a later write of the same key before it is seen.
 */
async function race(table: string, step: (rnd: () => number) => string[]): Promise<void> {
  const seed = Date.now() % 100_000;
  const [a, b] = [await connect(), await connect()];
  const [ra, rb] = [prng(seed), prng(seed + 1)];
  let committed = 0;
  for (let round = 0; round < 40; round++) {
    const results = await Promise.all([writer(a, 10, step, ra), writer(b, 10, step, rb)]);
    committed += results.reduce((n, r) => n + r.committed, 0);
    expect(await logMismatch(db.pool, table), `seed ${seed}, round ${round}`).toEqual(NO_MISMATCH);
  }
  expect(committed, `seed ${seed}`).toBeGreaterThan(300);
}

describe('two writers racing on the same keys', () => {
  it("leaves, for every key of a plain table, the table's state as the latest logged event", async () => {
    await race('public.t', plainStep);
  });

  it("leaves, for every key of a partitioned table written through its partitions, the table's state as the latest logged event", async () => {
    await race('public.p', partitionedStep);
  });
});
