// Readers across a cutover (SPEC invariant 12, release gate "0 mixed generations across 10,000
// concurrent reads during cutover"): 10,000 paged reads — pinned reads of two pages each, and
// reads of the user's view — run while the switch commits; each sees exactly one generation.
// The old and new generations are told apart row by row inside the release's range (the legacy
// transform truncates the tax, the fix rounds it), so a read mixing them would show both kinds.
// A long REPEATABLE READ reader spans the cutover on its generation.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '@genfill/observability';
import { projectDataset } from '@genfill/projector';
import { openPinnedRead } from '@genfill/reads';
import { reconcile } from '@genfill/reconcile';
import { createPool, type Db } from '@genfill/registry';
import { builtRelease, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { catchupRound, cutoverRelease } from '@genfill/switch';

const tdb = await createTestDatabase('cutover_reads');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'cutover-reads-test', 24);
const log = createLogger('cutover-reads-test', 'silent');
const DS = 'orders_enriched';
const FROM = '2025-07-01T00:00:00Z';
const TO = '2025-07-02T00:00:00Z';
const READS = 10_000;
let bob: Db;
/** order_id → 'old' | 'new' for the rows whose tax the two transforms give differently. */
const telling = new Map<string, 'old' | 'new'>();
let truncOf = new Map<string, string>();
let roundOf = new Map<string, string>();

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 2, perDay: 48 });
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
  await builtRelease(db, { id: 'reads@1', generation: 'g3', from: FROM, to: TO });
  await projectDataset(DS, { db, log, untilIdle: true, id: 'reads-test', leaseMs: 60_000 });
  await catchupRound(db, 'reads@1');
  const r = await reconcile(db, 'reads@1');
  expect(r.state).toBe('RECONCILED');
  await bob.query('SELECT * FROM genfill.approve($1, $2)', ['reads@1', r.id]);
  const { rows } = await tdb.pool.query<{ id: string; t: string; r: string }>(
    `SELECT s.order_id::text AS id, trunc(s.amount_cents * t.rate)::bigint::text AS t, round(s.amount_cents * t.rate)::bigint::text AS r
       FROM public.orders s JOIN public.tax_rates t ON t.region = s.region WHERE s.created_at >= $1 AND s.created_at < $2`,
    [FROM, TO],
  );
  truncOf = new Map(rows.map((x) => [x.id, x.t]));
  roundOf = new Map(rows.map((x) => [x.id, x.r]));
  for (const x of rows) if (x.t !== x.r) telling.set(x.id, 'old');
  expect(telling.size).toBeGreaterThan(10);
});
beforeEach(() => keepOnFailure(tdb));
afterAll(async () => {
  await bob.end();
  await db.end();
});

/** Which generation(s) a set of rows shows: by the tax of the rows the two transforms tell apart. */
function kinds(rows: { order_id: string | number; tax_cents: string | number }[]): Set<'old' | 'new'> {
  const seen = new Set<'old' | 'new'>();
  for (const row of rows) {
    const id = String(row.order_id);
    if (!telling.has(id)) continue;
    const tax = String(row.tax_cents);
    if (tax === truncOf.get(id)) seen.add('old');
    else if (tax === roundOf.get(id)) seen.add('new');
    else seen.add('old').add('new'); // neither: count it as a mix
  }
  return seen;
}

describe('10,000 reads across a cutover', () => {
  it('each sees one generation; a long REPEATABLE READ reader stays on its own', async () => {
    // The long reader: its snapshot is taken before the switch and read again after it.
    const long = new pg.Client({ connectionString: tdb.url });
    await long.connect();
    await long.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    const before = (await long.query(`SELECT order_id, tax_cents FROM public.orders_enriched ORDER BY order_id`)).rows;
    expect([...kinds(before)]).toEqual(['old']);

    let done = 0;
    const outcomes = { old: 0, new: 0, mixed: 0 };
    const reader = async (i: number) => {
      if (i % 2 === 0) {
        // A pinned read of two pages: the generation is fixed at its start.
        const p = await openPinnedRead(db, { dataset: DS, holder: `reads-test-${i % 50}`, leaseTtlMs: 60_000 });
        const a = await p.page({ limit: 50 });
        const b = a.nextCursor ? await p.page({ cursor: a.nextCursor, limit: 100 }) : { rows: [], generation: a.generation };
        const k = kinds([...a.rows, ...b.rows] as never);
        if (a.generation !== b.generation || k.size !== 1) outcomes.mixed++;
        else outcomes[[...k][0]!]++;
      } else {
        // The user's view, one statement.
        const { rows } = await db.query(`SELECT order_id, tax_cents FROM public.orders_enriched`);
        const k = kinds(rows);
        if (k.size !== 1) outcomes.mixed++;
        else outcomes[[...k][0]!]++;
      }
      done++;
    };
    let next = 0;
    const lanes = Array.from({ length: 20 }, async () => {
      while (next < READS) await reader(next++);
    });
    // The switch, once a third of the reads are done.
    while (done < READS / 3) await new Promise((r) => setTimeout(r, 5));
    const cut = await cutoverRelease(db, 'reads@1');
    expect(cut.ok).toBe(true);
    const atSwitch = done;
    await Promise.all(lanes);

    expect(done).toBe(READS);
    expect(outcomes.mixed).toBe(0);
    expect(outcomes.old + outcomes.new).toBe(READS);
    expect(outcomes.old).toBeGreaterThanOrEqual(atSwitch - 20);
    expect(outcomes.new).toBeGreaterThan(READS / 2);
    // The long reader still reads the old generation, the same rows, after the switch.
    const after = (await long.query(`SELECT order_id, tax_cents FROM public.orders_enriched ORDER BY order_id`)).rows;
    expect(after).toEqual(before);
    await long.query('COMMIT');
    const now = (await long.query(`SELECT order_id, tax_cents FROM public.orders_enriched ORDER BY order_id`)).rows;
    expect([...kinds(now)]).toEqual(['new']);
    await long.end();
  });
});
