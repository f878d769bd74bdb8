// Test setup for retention and pruning: a release cut over with a rollback window of our
// choosing (the real path: submit, plan, build, catch up, reconcile, approve as another
// principal, cutover), a change log split into narrow partitions so a test can move past a
// few of them, and a way to spend transaction ids quickly.
import pg from 'pg';
import { expect } from 'vitest';
import { planRelease, startBuilding, submitRelease } from '@genfill/planner';
import { createLogger } from '@genfill/observability';
import { projectDataset } from '@genfill/projector';
import { reconcile } from '@genfill/reconcile';
import type { Db } from '@genfill/registry';
import { buildAll } from '../../packages/reconcile/test/fixtures.ts';
import { exampleRelease, workspace, writeRelease } from './fixtures.ts';
import { catchupRound, cutoverRelease } from '@genfill/switch';

export const DS = 'orders_enriched';

export interface CutOver {
  id: string;
  generation: string;
  expectedActive: string;
  from: string;
  to: string;
  rollbackWindow: string;
}

/** Drain the projector of the example dataset once. */
export function drain(db: Db, id = 'retention-test') {
  return projectDataset(DS, { db, log: silent, untilIdle: true, id, leaseMs: 60_000 });
}

const silent = createLogger('retention-test', 'silent');

/** A release of the example transform over [from, to), submitted, planned and built. */
export async function built(db: Db, c: CutOver): Promise<void> {
  const r = exampleRelease();
  r.release = c.id;
  r.target.generation = c.generation;
  r.target.expectedActive = c.expectedActive;
  r.range = { from: c.from, to: c.to };
  r.partition = { every: 'P1D' };
  r.approvals = 1;
  r.rollbackWindow = c.rollbackWindow;
  await submitRelease(writeRelease(workspace(), r), db);
  await planRelease(db, c.id);
  await startBuilding(db, c.id);
  await buildAll(db, c.id);
}

/** A release of the example transform over [from, to) built, approved by `approver` and cut over. */
export async function cutOver(db: Db, approver: Db, c: CutOver): Promise<void> {
  await built(db, c);
  await drain(db);
  await catchupRound(db, c.id);
  const rec = await reconcile(db, c.id);
  expect(rec.state).toBe('RECONCILED');
  await approver.query('SELECT * FROM genfill.approve($1, $2)', [c.id, rec.id]);
  const cut = await cutoverRelease(db, c.id);
  expect(cut.ok).toBe(true);
}

/** Spend `n` transaction ids (each a committed transaction of its own). */
export async function burnXids(pool: pg.Pool, n: number): Promise<void> {
  await pool.query(`CREATE OR REPLACE PROCEDURE public.gf_burn_xids(n integer) LANGUAGE plpgsql AS $$
    BEGIN FOR i IN 1 .. n LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$`);
  await pool.query('CALL public.gf_burn_xids($1)', [n]);
}

/**
 * Re-partition the change log into `width`-txid partitions from the current xid on, `ahead` of
 * them (the shipped width is 10 million: no test spends that many). Every event is kept:
 * those below the first new partition land in the DEFAULT partition, as events of a range
 * nobody made a partition for do.
 */
export async function narrowLogPartitions(pool: pg.Pool, width: number, ahead: number): Promise<void> {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await c.query('CREATE TEMPORARY TABLE gf_kept_log ON COMMIT DROP AS SELECT * FROM genfill.change_log');
    const { rows } = await c.query<{ p: string }>('SELECT partition AS p FROM genfill.change_log_partitions() WHERE NOT is_default');
    for (const { p } of rows) await c.query(`ALTER TABLE genfill.change_log DETACH PARTITION ${p}; DROP TABLE ${p}`);
    await c.query('DELETE FROM genfill.change_log_default');
    await c.query('SELECT genfill.change_log_add_partitions($1, $2)', [ahead, width]);
    await c.query('INSERT INTO genfill.change_log SELECT * FROM gf_kept_log');
    await c.query('COMMIT');
  } catch (err) {
    await c.query('ROLLBACK');
    throw err;
  } finally {
    c.release();
  }
}

/** A login role of this test only (roles are cluster-wide): made now, dropped with `drop`. */
export async function tempLogin(admin: pg.Pool, adminUrl: string, name: string, grants: string[] = []): Promise<{ name: string; drop(): Promise<void> }> {
  await admin.query(`DO $$ BEGIN CREATE ROLE ${name} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`);
  for (const g of grants) await admin.query(g.replace(/\$ROLE/g, name));
  return {
    name,
    async drop() {
      await admin.query(`DROP OWNED BY ${name}`);
      const a = new pg.Client({ connectionString: adminUrl });
      await a.connect();
      try {
        await a.query(`DROP ROLE IF EXISTS ${name}`);
      } finally {
        await a.end();
      }
    },
  };
}

