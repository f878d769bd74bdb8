// Catch-up rounds (SPEC invariant 8): a built candidate follows the change log from its
// catch-up frontier (the minimum of its receipts' watermarks) to the projector's frontier, then
// to the barrier after the seal; the same round twice changes nothing; the round's root is
// recomputable from the log.
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '@genfill/observability';
import { repairRelease } from '@genfill/builder';
import { projectDataset } from '@genfill/projector';
import { createPool, rootAgg, rowHashExpr } from '@genfill/registry';
import { builtRelease, candidate, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { EXAMPLE_TRANSFORM } from './support/fixtures.ts';
import { catchupRound, sealRelease, unsealRelease } from '@genfill/switch';

const tdb = await createTestDatabase('catchup');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'catchup-test', 8);
const env = { DATABASE_URL: tdb.url };
const log = createLogger('catchup-test', 'silent');
const FROM = '2025-07-01T00:00:00Z';
const TO = '2025-07-03T00:00:00Z';
const drain = () => projectDataset('orders_enriched', { db, log, untilIdle: true, id: 'catchup-test', leaseMs: 60_000 });

/** The release's transform over the source rows inside the range, against the candidate's live rows there. */
async function diffInRange(): Promise<{ missing: number; extra: number }> {
  const expected = `SELECT t.* FROM (${EXAMPLE_TRANSFORM.replace('FROM source AS s', `FROM (SELECT * FROM public.orders WHERE created_at >= '${FROM}' AND created_at < '${TO}') AS s`)}) AS t`;
  const cand = `SELECT order_id, created_at, region, amount_cents, tax_cents FROM ${candidate('g3')} WHERE NOT _gf_deleted AND created_at >= '${FROM}' AND created_at < '${TO}'`;
  const { rows } = await tdb.pool.query(
    `SELECT (SELECT count(*)::int FROM (${expected} EXCEPT ${cand}) a) AS missing, (SELECT count(*)::int FROM (${cand} EXCEPT ${expected}) b) AS extra`,
  );
  return rows[0];
}

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 3, perDay: 96 });
  await builtRelease(db, { id: 'cu@1', generation: 'g3', from: FROM, to: TO });
});
beforeEach(() => keepOnFailure(tdb));

describe('a candidate catching up', () => {
  it('applies what changed after its watermarks: updates, deletes, rows moving between days and out of the range, back-dated inserts', async () => {
    await tdb.pool.query(`
      UPDATE public.orders SET amount_cents = amount_cents + 7 WHERE order_id BETWEEN 5 AND 15;
      DELETE FROM public.orders WHERE order_id IN (20, 21);
      UPDATE public.orders SET created_at = created_at + interval '1 day' WHERE order_id = 30;
      UPDATE public.orders SET created_at = '2025-07-05 00:00Z' WHERE order_id = 31;
      INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents) VALUES (5000, 1, 'north', '2025-07-01 00:00:01Z', 4242);`);
    expect((await diffInRange()).missing).toBeGreaterThan(0);
    await drain();
    const res = await runCli(['catchup', 'cu@1', '--json'], env);
    expect(res.stderr).toBe('');
    const r = JSON.parse(res.stdout);
    expect(r).toMatchObject({ release: 'cu@1', generation: 'g3', toBarrier: false, caughtUp: false });
    expect(r.events).toBeGreaterThanOrEqual(16);
    expect(r.tombstones).toBeGreaterThanOrEqual(2);
    expect(await diffInRange()).toEqual({ missing: 0, extra: 0 });
    // The row that left the range is no longer a live row of the range; deleted keys are tombstones.
    const { rows } = await db.query(`SELECT order_id, _gf_deleted FROM ${candidate('g3')} WHERE order_id IN (20, 21) ORDER BY order_id`);
    expect(rows).toEqual([{ order_id: '20', _gf_deleted: true }, { order_id: '21', _gf_deleted: true }]);
    expect(await db.query(`SELECT state FROM genfill.releases WHERE id = 'cu@1'`).then((x) => x.rows[0].state)).toBe('BUILT');
  });

  it('the same round twice changes nothing', async () => {
    const r = await catchupRound(db, 'cu@1');
    expect(r.events).toBe(0);
    expect(r.upserted + r.tombstones).toBe(0);
    expect(await diffInRange()).toEqual({ missing: 0, extra: 0 });
  });

  it('never passes the projector: events the projector has not consumed wait for the next round', async () => {
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = 40`);
    const r = await catchupRound(db, 'cu@1');
    expect(r.events).toBe(0);
    expect((await diffInRange()).missing).toBe(1);
    await drain();
    expect((await catchupRound(db, 'cu@1')).events).toBe(1);
    expect(await diffInRange()).toEqual({ missing: 0, extra: 0 });
  });

  it('after the seal, one round to the barrier moves INGRESS_SEALED → CAUGHT_UP; its root is recomputable from the log', async () => {
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id IN (41, 42)`);
    await drain();
    const seal = await sealRelease(db, 'cu@1');
    const r = await catchupRound(db, 'cu@1');
    expect(r).toMatchObject({ toBarrier: true, caughtUp: true, to: seal.barrier, events: 2 });
    expect(await db.query(`SELECT state FROM genfill.releases WHERE id = 'cu@1'`).then((x) => x.rows[0].state)).toBe('CAUGHT_UP');
    const { rows } = await db.query(
      `SELECT ${rootAgg(rowHashExpr(['key', 'revision'], 'e'))}::text AS root
         FROM (SELECT DISTINCT ON (key) key, revision FROM genfill.change_log
                WHERE source_table = 'public.orders' AND pg_visible_in_snapshot(txid, $2::pg_snapshot) AND NOT pg_visible_in_snapshot(txid, $1::pg_snapshot)
                ORDER BY key, event_id DESC) AS e`,
      [r.from, r.to],
    );
    expect(rows[0].root).toBe(r.root);
    const { rows: log } = await db.query(`SELECT action, from_state, to_state FROM genfill.release_log WHERE release = 'cu@1' ORDER BY id DESC LIMIT 1`);
    expect(log[0]).toEqual({ action: 'caught-up', from_state: 'INGRESS_SEALED', to_state: 'CAUGHT_UP' });
    expect(await diffInRange()).toEqual({ missing: 0, extra: 0 });
  });

  it('keeps a key through the repair sequence that loses it under "the key\'s partition watermark": build P1, move k to P2, repair P2, repair P1', async () => {
    // The dataset is sealed by cu@1 (above): reopen it so the projector moves on.
    await unsealRelease(db, 'cu@1', 'next test');
    await builtRelease(db, { id: 'seq@1', generation: 'g4', from: FROM, to: TO });
    // Order 10 (2025-07-01) moves into the next day after the build.
    await tdb.pool.query(`UPDATE public.orders SET created_at = '2025-07-02 12:00Z' WHERE order_id = 10`);
    await drain();
    const repair = async (partition: string) => {
      await db.query(`UPDATE genfill.releases SET state = 'RECONCILIATION_REQUIRED' WHERE id = 'seq@1'`);
      await repairRelease(db, { release: 'seq@1', partitions: [partition] });
    };
    await repair('b-20250702T000000Z'); // keeps the stale row of 10 (still in P1's range): the build skips the key
    await repair('b-20250701T000000Z'); // deletes P1's rows, 10 included, and rebuilds P1 without it
    const { rows: lost } = await db.query(`SELECT count(*)::int AS n FROM ${candidate('g4')} WHERE order_id = 10`);
    expect(lost[0].n).toBe(0);
    // Every current watermark contains the move; CF, the minimum of all of them (superseded
    // receipts included), does not: the round applies it again.
    const r = await catchupRound(db, 'seq@1');
    expect(r.events).toBeGreaterThanOrEqual(1);
    const { rows } = await db.query(`SELECT created_at, _gf_deleted FROM ${candidate('g4')} WHERE order_id = 10`);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ _gf_deleted: false });
    expect(rows[0].created_at.toISOString()).toBe('2025-07-02T12:00:00.000Z');
  });

  it('refuses a release that is not built, naming its state', async () => {
    const res = await runCli(['catchup', 'nope@1'], env);
    expect(res.code).toBe(3);
    expect(res.stderr).toMatch(/release nope@1 does not exist/);
  });
});
