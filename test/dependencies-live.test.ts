// Dependencies are checked wherever events are applied (issue 29, findings 3 and 4): a change to
// a table the transform reads besides its source, committed while a cutover holds its seal, is
// flagged and refuses the cutover naming the table; a dependency only the candidate declares
// (the active map of an adopted generation names no release) is watched by the projector; `plan`
// refuses a dependency that is not captured, printing the command for the table's owner; and a
// dependency changed between plan and cutover is caught by the content hash pinned at plan.
// Each test has a database of its own: a DEPENDENCY_STALE flag is cleared only by a rebuild.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { removeCapture } from '@genfill/capture';
import { DependencyChangedError, RefusedError } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { planRelease, submitRelease } from '@genfill/planner';
import { projectDataset } from '@genfill/projector';
import { reconcile } from '@genfill/reconcile';
import { createPool, type Db } from '@genfill/registry';
import { catchupRound, cutoverRelease, rollbackRelease } from '@genfill/switch';
import { builtRelease, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs, type TestDatabase } from './support/db.ts';
import { exampleRelease, workspace, writeRelease } from './support/fixtures.ts';

const log = createLogger('dependencies-live-test', 'silent');
const DS = 'orders_enriched';
const FROM = '2025-07-01T00:00:00Z';
const DAY2 = '2025-07-02T00:00:00Z';
const DAY3 = '2025-07-03T00:00:00Z';

let tdb: TestDatabase;
let db: Db;
let bob: Db;
const one = async <T = Record<string, unknown>>(q: string, v: unknown[] = []) => (await db.query(q, v)).rows[0] as T;
const state = async (id: string) => (await one<{ state: string }>(`SELECT state FROM genfill.releases WHERE id = $1`, [id])).state;
const dataset = () => one<{ active: string; ingress: string; epoch: number }>(`SELECT active_generation AS active, ingress_state AS ingress, ingress_epoch::int AS epoch FROM genfill.datasets WHERE name = $1`, [DS]);
const flags = () => one<{ since: string | null; relations: string[] | null } | undefined>(`SELECT dependency_stale_since::text AS since, stale_relations AS relations FROM genfill.dataset_flags WHERE dataset = $1`, [DS]);
const drain = () => projectDataset(DS, { db, log, untilIdle: true, id: 'dependencies-live-test', leaseMs: 60_000 });
const rateChange = () => tdb.pool.query(`UPDATE public.tax_rates SET rate = rate + 0.01 WHERE region = 'north'`);

/** Release `id` of [from, to) into `generation`, expecting `expectedActive`: built, caught up, reconciled, approved by bob. */
async function approved(id: string, generation: string, from: string, to: string, expectedActive = 'g2'): Promise<void> {
  await builtRelease(db, { id, generation, from, to, expectedActive });
  await drain();
  await catchupRound(db, id);
  const r = await reconcile(db, id);
  expect(r.state).toBe('RECONCILED');
  await bob.query('SELECT * FROM genfill.approve($1, $2)', [id, r.id]);
  expect(await state(id)).toBe('APPROVED');
}

beforeEach(async (ctx) => {
  tdb = await createTestDatabase(`deps-${ctx.task.name.slice(0, 12)}`);
  db = createPool({ DATABASE_URL: tdb.url } as never, 'dependencies-live-test', 10);
  await seedAdopted(tdb, db, { from: FROM, days: 3, perDay: 24 });
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
  keepOnFailure(tdb);
});
afterEach(async () => {
  await bob.end();
  await db.end();
});

describe('dependencies are checked wherever events are applied', () => {
  it('an UPDATE of tax_rates committed while the cutover holds its seal flags the dataset and refuses the cutover naming the table', async () => {
    await approved('freeze@1', 'g3', FROM, DAY2);
    const epoch = (await dataset()).epoch;
    let updated = false;
    const err = await cutoverRelease(db, 'freeze@1', {
      onStep: async (step) => {
        // Between the seal and the switch: the event lands in (B, S_cut].
        if (step === 'sealed') {
          await rateChange();
          updated = true;
        }
      },
    }).catch((e: Error) => e);
    expect(updated).toBe(true);
    expect(err).toBeInstanceOf(DependencyChangedError);
    expect((err as DependencyChangedError).relations).toEqual(['public.tax_rates']);
    expect((err as Error).message).toMatch(/cutover refused: dependency public\.tax_rates changed after freeze@1 pinned it/);
    expect((err as Error).message).toMatch(/ingress reopened on g2 under epoch \d+/);
    // Nothing switched; the flag outlives the refusal; the release's pin no longer holds.
    expect(await dataset()).toEqual({ active: 'g2', ingress: 'OPEN', epoch: epoch + 1 });
    const f = await flags();
    expect(f?.since).not.toBeNull();
    expect(f?.relations).toEqual(['public.tax_rates']);
    expect(await state('freeze@1')).toBe('RECONCILIATION_REQUIRED');
    const rec = await one<{ state: string; outcome: { dependencies: string[] } }>(`SELECT state, outcome FROM genfill.cutovers ORDER BY id DESC LIMIT 1`);
    expect(rec).toMatchObject({ state: 'ABORTED', outcome: { dependencies: ['public.tax_rates'] } });
  });

  it('after a rollback to the adopted generation, a rate change flags the release that alone declares tax_rates and its cutover is refused', async () => {
    await approved('first@1', 'g3', FROM, DAY2);
    expect((await cutoverRelease(db, 'first@1')).ok).toBe(true);
    expect((await rollbackRelease(db, 'first@1')).ok).toBe(true);
    // g2's map names no release and the adopt recorded no dependency: only the candidate declares it.
    expect(await dataset()).toMatchObject({ active: 'g2', ingress: 'OPEN' });
    expect(await one(`SELECT jsonb_path_query_array(transform_map, '$[*].release') AS r FROM genfill.generations WHERE dataset = $1 AND generation = 'g2'`, [DS])).toEqual({ r: [null] });
    expect(await one(`SELECT count(*)::int AS n FROM genfill.dataset_dependencies WHERE dataset = $1`, [DS])).toEqual({ n: 0 });
    await approved('second@1', 'g4', DAY2, DAY3);
    expect((await flags())?.since ?? null).toBeNull();

    await rateChange();
    await drain();
    expect((await flags())?.relations).toEqual(['public.tax_rates']);
    expect(await state('second@1')).toBe('RECONCILIATION_REQUIRED');
    const err = await cutoverRelease(db, 'second@1').catch((e: Error) => e);
    expect(err).toBeInstanceOf(RefusedError);
    expect((err as Error).message).toMatch(/precondition (state|dependencies)/);
    expect((err as Error).message).toMatch(/DEPENDENCY_STALE|RECONCILIATION_REQUIRED/);
    expect(await dataset()).toMatchObject({ active: 'g2', ingress: 'OPEN' });
  });

  it('an UPDATE of tax_rates committed while a rollback holds its seal is applied by its switch and flags the dataset', async () => {
    await approved('one@1', 'g3', FROM, DAY2);
    expect((await cutoverRelease(db, 'one@1')).ok).toBe(true);
    await approved('two@1', 'g4', DAY2, DAY3, 'g3');
    expect((await cutoverRelease(db, 'two@1')).ok).toBe(true);
    expect((await flags())?.since ?? null).toBeNull();
    let updated = false;
    const rb = await rollbackRelease(db, 'two@1', {
      onStep: async (step) => {
        // Between the rollback's seal and its switch: the event lands in (F, S_rb].
        if (step === 'sealed') {
          await rateChange();
          updated = true;
        }
      },
    });
    expect(updated).toBe(true);
    // A rollback is not refused for it: back on g3 (whose map names one@1, which declares
    // tax_rates), flagged in the switch's own transaction.
    expect(rb.ok).toBe(true);
    expect(await dataset()).toMatchObject({ active: 'g3', ingress: 'OPEN' });
    expect((await flags())?.relations).toEqual(['public.tax_rates']);
    expect(await one(`SELECT count(*)::int AS n FROM genfill.dataset_log WHERE dataset = $1 AND action = 'dependency-stale'`, [DS])).toEqual({ n: 1 });
  });

  it('plan of a release with an uncaptured dependency is refused with the capture command, and nothing is written', async () => {
    await removeCapture(tdb.pool, { table: 'public.tax_rates' });
    const r = exampleRelease();
    r.release = 'uncaptured@1';
    r.target.generation = 'g3';
    r.target.expectedActive = 'g2';
    r.range = { from: FROM, to: DAY2 };
    r.partition = { every: 'P1D' };
    expect(r.dependencies).toEqual(['public.tax_rates']);
    await submitRelease(writeRelease(workspace(), r), db);
    const count = async () =>
      one(
        `SELECT (SELECT count(*) FROM genfill.dependency_pins)::int AS pins, (SELECT count(*) FROM genfill.manifests)::int AS manifests,
                (SELECT count(*) FROM genfill.partitions)::int AS partitions, (SELECT count(*) FROM genfill.generations)::int AS generations,
                (SELECT count(*) FROM genfill.release_floors)::int AS floors, (SELECT count(*) FROM genfill.release_log)::int AS log`,
      );
    const before = await count();

    const err = await planRelease(db, 'uncaptured@1').catch((e: Error) => e);
    expect(err).toBeInstanceOf(RefusedError);
    expect((err as Error).message).toMatch(/declares a dependency that is not captured \(public\.tax_rates\)/);
    expect((err as Error).message).toContain("As the table's owner run `genfill capture install public.tax_rates`, then plan again");
    const cli = await runCli(['plan', 'uncaptured@1'], { DATABASE_URL: tdb.url });
    expect(cli.code).toBe(3);
    expect(cli.stderr).toContain('genfill capture install public.tax_rates');
    expect(await state('uncaptured@1')).toBe('DRAFT');
    expect(await count()).toEqual(before);
  });

  it('a dependency changed between plan and cutover is refused by the content hash pinned at plan, before the seal', async () => {
    await approved('pinned@1', 'g3', FROM, DAY2);
    const epoch = (await dataset()).epoch;
    // No projector batch after it: nothing but the cutover's own check can see it.
    await rateChange();
    const steps: string[] = [];
    const err = await cutoverRelease(db, 'pinned@1', { onStep: (s) => void steps.push(s) }).catch((e: Error) => e);
    expect(err).toBeInstanceOf(DependencyChangedError);
    expect((err as DependencyChangedError).relations).toEqual(['public.tax_rates']);
    expect((err as Error).message).toMatch(/the content of dependency public\.tax_rates is not the one pinned when pinned@1 was planned/);
    expect(steps).not.toContain('sealed');
    expect(await dataset()).toEqual({ active: 'g2', ingress: 'OPEN', epoch });
    expect((await flags())?.relations).toEqual(['public.tax_rates']);
    expect(await state('pinned@1')).toBe('RECONCILIATION_REQUIRED');
  });
});
