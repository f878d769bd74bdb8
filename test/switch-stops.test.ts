// The key a catch-up round or a cutover's switch refused on as poison is recorded
// (genfill.switch_stops, migration 0029), so the operator can quarantine it: since issue 28
// genfill.quarantine_key takes only a key something named, and this one used to be named only in
// the refusal's text — the operator's one way out was a transform fix. Run as plain logins: the
// fleet (a genfill_service login) runs the projector, the catch-up, the reconciler and the
// cutover; an operator login calls genfill.quarantine_key. The candidate's transform fans out
// the orders whose amount is 7 cents — none while it is built and reconciled, so it is approved —
// and an update to 7 cents is poison for it later: before the seal (a catch-up round), and after
// the seal (the switch's own apply of the events after the barrier).
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SwitchRefusedError } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { planRelease, startBuilding, submitRelease } from '@genfill/planner';
import { projectDataset } from '@genfill/projector';
import { reconcile } from '@genfill/reconcile';
import { createPool, type Db } from '@genfill/registry';
import { catchupRound, cutoverRelease } from '@genfill/switch';
import { buildAll, candidate, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { EXAMPLE_TRANSFORM, exampleRelease, workspace, writeRelease } from './support/fixtures.ts';

const tdb = await createTestDatabase('switch-stops');
const DS = 'orders_enriched';
const FROM = '2025-07-01T00:00:00Z';
const RELEASE = 'stops@1';
/** Cluster-wide logins of this file: the fleet and an operator. */
const SVC = 'genfill_ss_svc';
const OPER = 'genfill_ss_oper';
const log = createLogger('switch-stops-test', 'silent');
/** The admin's pool: seeding, the submission (its login is mapped to a person), and the "live writer". */
const admin = createPool({ DATABASE_URL: tdb.url } as never, 'switch-stops-admin', 4);
let fleet: Db;
let bob: Db;
let oper: pg.Client;

/** The example's fixed tax, and every order of 7 cents twice. */
const FANS_OUT_AT_7 = `${EXAMPLE_TRANSFORM.trim()}\n  LEFT JOIN (VALUES (1), (2)) AS twice (n) ON s.amount_cents = 7\n`;

const one = async <T = Record<string, unknown>>(q: string, v: unknown[] = []) => (await admin.query(q, v)).rows[0] as T;
const drain = () => projectDataset(DS, { db: fleet, log, untilIdle: true, id: 'switch-stops-test', leaseMs: 60_000 });
const dataset = () => one<{ active: string; ingress: string }>(`SELECT active_generation AS active, ingress_state AS ingress FROM genfill.datasets WHERE name = $1`, [DS]);
const state = async () => (await one<{ state: string }>(`SELECT state FROM genfill.releases WHERE id = $1`, [RELEASE])).state;
const stops = async () =>
  (
    await admin.query(
      `SELECT kind, release, generation, key, event_id IS NOT NULL AS has_event, revision::text AS revision, principal, switch IS NOT NULL AS has_switch
         FROM genfill.switch_stops ORDER BY id`,
    )
  ).rows;
const quarantine = (key: Record<string, unknown>, reason: string) =>
  oper.query(`SELECT id::text, up_to_revision::text FROM genfill.quarantine_key($1, $2, $3)`, [DS, JSON.stringify(key), reason]).then(
    (r) => ({ ok: true as const, row: r.rows[0] as { id: string; up_to_revision: string } }),
    (e: { code?: string; message: string }) => ({ ok: false as const, code: e.code, message: e.message }),
  );
const latestRevision = async (order: number) =>
  (await one<{ r: string }>(`SELECT max(revision)::text AS r FROM genfill.change_log WHERE source_table = 'public.orders' AND key = $1`, [JSON.stringify({ order_id: order })])).r;

beforeAll(async () => {
  await seedAdopted(tdb, admin, { from: FROM, days: 4, perDay: 24 });
  for (const login of [SVC, OPER]) {
    await tdb.pool.query(`DO $$ BEGIN CREATE ROLE ${login} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
  }
  await tdb.pool.query(`GRANT genfill_service TO ${SVC}`);
  await tdb.pool.query(`GRANT genfill_operator TO ${OPER}`);
  // What a deployment grants its fleet login on the tables it backfills.
  await tdb.pool.query(`GRANT SELECT ON public.orders, public.tax_rates TO ${SVC}`);
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
  fleet = createPool({ DATABASE_URL: urlAs(tdb, SVC) } as never, 'switch-stops-fleet', 6);
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
  oper = new pg.Client({ connectionString: urlAs(tdb, OPER) });
  oper.on('error', () => undefined);
  await oper.connect();

  // Days 2 and 3 into g3 with the transform that fans out at 7 cents: no order costs 7 cents.
  expect((await one<{ n: number }>(`SELECT count(*)::int AS n FROM public.orders WHERE amount_cents = 7`)).n).toBe(0);
  const r = exampleRelease();
  r.release = RELEASE;
  r.target.generation = 'g3';
  r.target.expectedActive = 'g2';
  r.range = { from: '2025-07-02T00:00:00Z', to: '2025-07-04T00:00:00Z' };
  r.partition = { every: 'P1D' };
  r.approvals = 1;
  await submitRelease(writeRelease(workspace(), r, { transform: FANS_OUT_AT_7 }), admin);
  await planRelease(fleet, RELEASE);
  await startBuilding(fleet, RELEASE);
  await buildAll(fleet, RELEASE);
  await drain();
  await catchupRound(fleet, RELEASE);
  const rec = await reconcile(fleet, RELEASE);
  expect(rec.state).toBe('RECONCILED');
  await bob.query('SELECT * FROM genfill.approve($1, $2)', [RELEASE, rec.id]);
  expect(await state()).toBe('APPROVED');
});
beforeEach(() => keepOnFailure(tdb));
afterAll(async () => {
  await oper.end().catch(() => undefined);
  await bob.end();
  await fleet.end();
  await admin.end();
});

describe('a catch-up round refused on poison', () => {
  it('records the key it refused on, which the operator then quarantines; the next round skips it', async () => {
    // Order 60 (day 3, inside the release) now costs 7 cents: the legacy transform of g2 is fine with it.
    await admin.query(`UPDATE public.orders SET amount_cents = 7 WHERE order_id = 60`);
    await drain();
    const refused = await catchupRound(fleet, RELEASE).then(
      () => null,
      (e: Error) => e,
    );
    expect(refused?.message).toMatch(/catch-up of stops@1: the transform produced key \{"order_id":\s?60\} more than once \(fan-out\), at key \{"order_id":\s?60\}; nothing was applied/);
    expect(refused?.message).toMatch(/is recorded in genfill\.switch_stops: quarantine it with `genfill quarantine orders_enriched --key '\{"order_id":60\}' --reason …`/);
    expect(await stops()).toEqual([
      { kind: 'catchup', release: RELEASE, generation: 'g3', key: { order_id: 60 }, has_event: true, revision: await latestRevision(60), principal: SVC, has_switch: false },
    ]);
    // Refused again on the same event (the projector service rounds every poll): recorded once.
    await expect(catchupRound(fleet, RELEASE)).rejects.toThrow(/fan-out/);
    expect(await stops()).toHaveLength(1);
    expect(await state()).toBe('APPROVED');

    const q = await quarantine({ order_id: 60 }, 'a 7-cent order the transform doubles; fixed in the next release');
    expect(q).toMatchObject({ ok: true, row: { up_to_revision: await latestRevision(60) } });
    const round = await catchupRound(fleet, RELEASE);
    expect(round.quarantined).toBe(1);
    expect((await one<{ a: string }>(`SELECT amount_cents::text AS a FROM ${candidate('g3')} WHERE order_id = 60`)).a).not.toBe('7');
  });
});

describe('a cutover refused on poison in its switch', () => {
  it('records the key; the operator quarantines it; the cutover run again switches, the key reported and not applied; another key stays refused (GFQ06)', async () => {
    // Order 61 changes to 7 cents after the seal (a live writer during the freeze): the switch's
    // apply of the events after the barrier meets it.
    let written = false;
    const err = await cutoverRelease(fleet, RELEASE, {
      onStep: async (step) => {
        if (step === 'verified' && !written) {
          written = true;
          await admin.query(`UPDATE public.orders SET amount_cents = 7 WHERE order_id = 61`);
        }
      },
    }).then(
      () => null,
      (e: Error) => e,
    );
    expect(written).toBe(true);
    expect(err).toBeInstanceOf(SwitchRefusedError);
    expect(err).toMatchObject({ kind: 'cutover', check: 'poison' });
    expect(err!.message).toMatch(/^cutover refused: an event after .* is poison for g3 \(the transform produced key \{"order_id":\s?61\} more than once \(fan-out\), at key \{"order_id":\s?61\}\)/);
    expect(err!.message).toMatch(/quarantine it with `genfill quarantine orders_enriched --key '\{"order_id":61\}' --reason …` or fix the transform, then run cutover again; ingress reopened on g2/);
    // Nothing switched; the key is recorded with the event and the cutover it refused.
    expect(await dataset()).toMatchObject({ active: 'g2', ingress: 'OPEN' });
    expect(await state()).toBe('APPROVED');
    expect((await stops()).at(-1)).toEqual({
      kind: 'cutover',
      release: RELEASE,
      generation: 'g3',
      key: { order_id: 61 },
      has_event: true,
      revision: await latestRevision(61),
      principal: SVC,
      has_switch: true,
    });

    // An arbitrary key with events is still refused; the recorded one is quarantined.
    await admin.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = 62`);
    const quarantinedBefore = (await one<{ n: number }>(`SELECT count(*)::int AS n FROM genfill.quarantined_keys`)).n;
    const arbitrary = await quarantine({ order_id: 62 }, 'hide it');
    expect(arbitrary).toMatchObject({ ok: false, code: 'GFQ06', message: expect.stringMatching(/neither the key its projector stopped on .* nor one a reconciliation named, nor one a cutover, rollback or catch-up refused on/) });
    expect((await one<{ n: number }>(`SELECT count(*)::int AS n FROM genfill.quarantined_keys`)).n).toBe(quarantinedBefore);
    const q = await quarantine({ order_id: 61 }, 'a 7-cent order the transform doubles');
    expect(q).toMatchObject({ ok: true });
    expect(await one(`SELECT stopped_by->>'kind' AS kind, stopped_by->>'table' AS t, principal FROM genfill.quarantined_keys WHERE id = $1`, [(q as { row: { id: string } }).row.id])).toEqual({
      kind: 'cutover',
      t: 'switch_stops',
      principal: OPER,
    });

    // Run again: the quarantined key is reported by the tail check, not applied, and the cutover switches.
    await drain();
    const done = await cutoverRelease(fleet, RELEASE);
    expect(done.ok).toBe(true);
    expect((done.tail?.pre?.quarantined ?? 0) + (done.tail?.post?.quarantined ?? 0)).toBeGreaterThanOrEqual(1);
    expect(await dataset()).toMatchObject({ active: 'g3', ingress: 'OPEN' });
    expect(await state()).toBe('ACTIVE');
    const row61 = await one<{ a: string; n: number }>(`SELECT min(amount_cents)::text AS a, count(*)::int AS n FROM ${candidate('g3')} WHERE order_id = 61`);
    expect(row61.n).toBe(1);
    expect(row61.a).not.toBe('7');
    // The other key's change reached the new generation.
    expect(
      (await one<{ same: boolean }>(`SELECT (SELECT amount_cents FROM ${candidate('g3')} WHERE order_id = 62) = (SELECT amount_cents FROM public.orders WHERE order_id = 62) AS same`)).same,
    ).toBe(true);
  });
});
