// The cutover (SPEC invariants 9 and 11): every precondition named and checked again inside the
// switch — a refusal after the seal reopens ingress on the old generation under a new epoch and
// leaves the release APPROVED; a mismatch among the keys changed since the approved
// reconciliation moves it to RECONCILIATION_REQUIRED naming them; under a live writer the new
// generation ends equal to the transform map of the source, events after the barrier reach it
// once, and no row of the old generation changes after the switch (nor does an old-epoch
// projector batch or a stale worker write anything).
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { buildPartition, claimPartition } from '@genfill/builder';
import { createLogger } from '@genfill/observability';
import { projectDataset, runBatch } from '@genfill/projector';
import { reconcile } from '@genfill/reconcile';
import { createPool, rootAgg, rowHashExpr, type Db } from '@genfill/registry';
import { builtRelease, candidate, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { EXAMPLE_TRANSFORM } from './support/fixtures.ts';
import { catchupRound, cutoverRelease } from '@genfill/switch';

const tdb = await createTestDatabase('cutover');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'cutover-test', 10);
const env = { DATABASE_URL: tdb.url };
const log = createLogger('cutover-test', 'silent');
const DS = 'orders_enriched';
const FROM = '2025-07-01T00:00:00Z';
let bob: Db;

const drain = () => projectDataset(DS, { db, log, untilIdle: true, id: 'cutover-test', leaseMs: 60_000 });
const one = async <T = Record<string, unknown>>(q: string, v: unknown[] = []) => (await db.query(q, v)).rows[0] as T;
const state = async (id: string) => (await one<{ state: string }>(`SELECT state FROM genfill.releases WHERE id = $1`, [id])).state;
const dataset = () => one<{ active: string; ingress: string; epoch: number }>(`SELECT active_generation AS active, ingress_state AS ingress, ingress_epoch::int AS epoch FROM genfill.datasets WHERE name = $1`, [DS]);
const genHash = async (g: string) =>
  (await one<{ h: string; n: number }>(`SELECT ${rootAgg(rowHashExpr(['order_id', 'created_at', 'region', 'amount_cents', 'tax_cents', '_gf_rev', '_gf_deleted'], 'c'))}::text AS h, count(*)::int AS n FROM ${candidate(g)} AS c`));

/** Release `id` of [from, to) into `generation`: built, caught up, reconciled, approved by bob. */
async function approved(id: string, generation: string, from: string, to: string): Promise<void> {
  await builtRelease(db, { id, generation, from, to });
  await drain();
  await catchupRound(db, id);
  const r = await reconcile(db, id);
  expect(r.state).toBe('RECONCILED');
  await bob.query('SELECT * FROM genfill.approve($1, $2)', [id, r.id]);
  expect(await state(id)).toBe('APPROVED');
}

/** The user's view against the transform map of the source: the new transform inside [from, to), the legacy one outside. */
async function viewDiff(from: string, to: string): Promise<{ missing: number; extra: number }> {
  const inside = EXAMPLE_TRANSFORM.replace('FROM source AS s', `FROM (SELECT * FROM public.orders WHERE created_at >= '${from}' AND created_at < '${to}') AS s`);
  const outside = `SELECT s.order_id, s.created_at, s.region, s.amount_cents, trunc(s.amount_cents * coalesce(t.rate, 0))::bigint AS tax_cents
                     FROM public.orders s LEFT JOIN public.tax_rates t ON t.region = s.region WHERE NOT (s.created_at >= '${from}' AND s.created_at < '${to}')`;
  const expected = `SELECT * FROM ((${inside}) UNION ALL (${outside})) AS a`;
  const view = `SELECT order_id, created_at, region, amount_cents, tax_cents FROM public.orders_enriched`;
  const d = await one<{ missing: number; extra: number }>(`SELECT (SELECT count(*)::int FROM (${expected} EXCEPT ${view}) a) AS missing, (SELECT count(*)::int FROM (${view} EXCEPT ${expected}) b) AS extra`);
  return d;
}

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 4, perDay: 48 });
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
});
beforeEach(() => keepOnFailure(tdb));
afterAll(async () => {
  await bob.end();
  await db.end();
});

describe('preconditions', () => {
  it('a dry run of a built release names every failed precondition and seals nothing (exit 3)', async () => {
    await builtRelease(db, { id: 'dry@1', generation: 'g3', from: FROM, to: '2025-07-02T00:00:00Z' });
    const res = await runCli(['cutover', 'dry@1', '--dry-run', '--json'], env);
    expect(res.code).toBe(3);
    const r = JSON.parse(res.stdout);
    expect(r).toMatchObject({ dryRun: true, ok: false });
    const bad = r.checks.filter((c: { ok: boolean }) => !c.ok).map((c: { name: string }) => c.name);
    expect(bad).toEqual(['state', 'approvals', 'reconciliation-live']);
    expect(res.stderr).toMatch(/precondition state: release dry@1 is BUILT/);
    expect(await dataset()).toMatchObject({ ingress: 'OPEN', epoch: 1 });
    const plain = await runCli(['cutover', 'dry@1'], env);
    expect(plain.code).toBe(3);
    expect(plain.stderr).toMatch(/cutover refused: precondition state/);
    expect(await one(`SELECT count(*)::int AS n FROM genfill.cutovers`)).toEqual({ n: 0 });
    await runCli(['cancel', 'dry@1', '--reason', 'done with it'], env);
  });

  // Each of these holds before the seal (the checks) and is changed after it, so the switch's own
  // compare refuses it: the superuser stands in for a bug or a concurrent actor.
  const cases: [string, RegExp, () => Promise<void>, () => Promise<void>][] = [
    [
      'a missing receipt',
      /precondition manifest: partitions without a built, current receipt of this release: \["b-20250701T000000Z"\]/,
      async () => {
        await tdb.pool.query(`ALTER TABLE genfill.partitions DISABLE TRIGGER USER`);
        await tdb.pool.query(`UPDATE genfill.partitions SET status = 'PENDING' WHERE release = 'pre@1' AND id = 'b-20250701T000000Z'`);
        await tdb.pool.query(`ALTER TABLE genfill.partitions ENABLE TRIGGER USER`);
      },
      async () => {
        await tdb.pool.query(`ALTER TABLE genfill.partitions DISABLE TRIGGER USER`);
        await tdb.pool.query(`UPDATE genfill.partitions SET status = 'BUILT' WHERE release = 'pre@1' AND id = 'b-20250701T000000Z'`);
        await tdb.pool.query(`ALTER TABLE genfill.partitions ENABLE TRIGGER USER`);
      },
    ],
    [
      'short approvals',
      /precondition approvals: 0 of 1 approvals on reconciliation #\d+/,
      async () => {
        await tdb.pool.query(`ALTER TABLE genfill.approvals DISABLE TRIGGER USER`);
        await tdb.pool.query(`CREATE TABLE public.kept_approvals AS SELECT * FROM genfill.approvals WHERE release = 'pre@1'`);
        await tdb.pool.query(`DELETE FROM genfill.approvals WHERE release = 'pre@1'`);
        await tdb.pool.query(`ALTER TABLE genfill.approvals ENABLE TRIGGER USER`);
      },
      async () => {
        // As they were: the principal trigger would record the superuser instead.
        await tdb.pool.query(`ALTER TABLE genfill.approvals DISABLE TRIGGER USER; INSERT INTO genfill.approvals SELECT * FROM public.kept_approvals;
          ALTER TABLE genfill.approvals ENABLE TRIGGER USER; DROP TABLE public.kept_approvals`);
      },
    ],
    [
      'approvals bound to a voided reconciliation',
      /precondition approvals: the approvals are bound to reconciliation #\d+, voided by reconciliation #\d+ \(RECONCILIATION_REQUIRED\)/,
      async () => {
        await tdb.pool.query(
          `INSERT INTO genfill.reconciliations (release, snapshot, from_state, release_digest, state, summary, findings_count)
           SELECT release, snapshot, from_state, release_digest, 'RECONCILIATION_REQUIRED', summary, 1 FROM genfill.reconciliations WHERE release = 'pre@1' ORDER BY id DESC LIMIT 1`,
        );
      },
      async () => {
        await tdb.pool.query(`ALTER TABLE genfill.reconciliations DISABLE TRIGGER USER`);
        await tdb.pool.query(`DELETE FROM genfill.reconciliations WHERE release = 'pre@1' AND state = 'RECONCILIATION_REQUIRED'`);
        await tdb.pool.query(`ALTER TABLE genfill.reconciliations ENABLE TRIGGER USER`);
      },
    ],
    [
      'a changed expected generation',
      /precondition expected-generation: release pre@1 expects g2 active, but g9 is/,
      async () => {
        await tdb.pool.query(`INSERT INTO genfill.generations (dataset, generation, state) VALUES ('${DS}', 'g9', 'CANDIDATE') ON CONFLICT DO NOTHING`);
        await tdb.pool.query(`UPDATE genfill.datasets SET active_generation = 'g9' WHERE name = '${DS}'`);
      },
      async () => {
        await tdb.pool.query(`UPDATE genfill.datasets SET active_generation = 'g2' WHERE name = '${DS}'`);
      },
    ],
  ];

  it('refused inside the switch, each named: ingress reopens on the old generation under a new epoch, the release is APPROVED again', async () => {
    await approved('pre@1', 'g4', FROM, '2025-07-02T00:00:00Z');
    for (const [what, message, breakIt, fixIt] of cases) {
      const before = await dataset();
      const err = await cutoverRelease(db, 'pre@1', {
        onStep: async (step) => {
          if (step === 'verified') await breakIt();
        },
      }).catch((e: Error) => e);
      await fixIt();
      expect(err, what).toBeInstanceOf(Error);
      expect((err as Error).message, what).toMatch(message);
      expect((err as Error).message, what).toMatch(/ingress reopened on g2 under epoch \d+, pre@1 is APPROVED again/);
      expect(await state('pre@1'), what).toBe('APPROVED');
      const after = await dataset();
      expect(after, what).toEqual({ active: 'g2', ingress: 'OPEN', epoch: before.epoch + 1 });
      const rec = await one<{ state: string; outcome: { reason: string } }>(`SELECT state, outcome FROM genfill.cutovers ORDER BY id DESC LIMIT 1`);
      expect(rec.state, what).toBe('ABORTED');
      expect(rec.outcome.reason, what).toMatch(message);
    }
  });

  it('a key changed since the approval that does not match its latest image: RECONCILIATION_REQUIRED naming it (exit 4), nothing sealed', async () => {
    await tdb.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 5 WHERE order_id = 7`);
    await drain();
    await catchupRound(db, 'pre@1');
    // Damage the candidate's row of that key by hand after catch-up wrote it.
    await tdb.pool.query(`UPDATE ${candidate('g4')} SET tax_cents = tax_cents + 1 WHERE order_id = 7`);
    const epoch = (await dataset()).epoch;
    const res = await runCli(['cutover', 'pre@1'], env);
    expect(res.code).toBe(4);
    expect(res.stderr).toMatch(/1 keys changed since the approved reconciliation do not match.*\{"order_id":7\} value/);
    expect(await state('pre@1')).toBe('RECONCILIATION_REQUIRED');
    expect(await dataset()).toEqual({ active: 'g2', ingress: 'OPEN', epoch });
    const log = await one<{ detail: { keys: unknown[] } }>(`SELECT detail FROM genfill.release_log WHERE release = 'pre@1' AND action = 'cutover-tail-mismatch'`);
    expect(log.detail.keys).toEqual([{ order_id: 7, kind: 'value' }]);
    await runCli(['cancel', 'pre@1', '--reason', 'damaged on purpose'], env);
  });
});

describe('the switch under a live writer', () => {
  const TO = '2025-07-03T00:00:00Z';
  let writing = true;
  let writes = 0;
  let writer: Promise<void> = Promise.resolve();
  let stop = new AbortController();
  let projector: Promise<unknown> = Promise.resolve();
  afterAll(async () => {
    writing = false;
    stop.abort();
    await Promise.all([writer, projector]);
  });

  it('moves every reader in one step; what arrived after the barrier reaches the new generation once; the old generation never changes again', async () => {
    await approved('live@1', 'g5', FROM, TO);
    // Changes after the approval: inside the range, outside it, across its edge, deletes, back-dated inserts.
    const w = new pg.Client({ connectionString: tdb.url });
    await w.connect();
    let next = 100_000;
    writer = (async () => {
      while (writing) {
        const id = 1 + (writes % 150);
        await w.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id = $1`, [id]);
        if (writes % 7 === 0) await w.query(`INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents) VALUES ($1, 1, 'north', '2025-07-01 12:00Z', 777)`, [next++]);
        if (writes % 11 === 0) await w.query(`DELETE FROM public.orders WHERE order_id = $1`, [next - 1]);
        if (writes % 13 === 0) await w.query(`UPDATE public.orders SET created_at = created_at + interval '1 day' WHERE order_id = $1`, [151 + (writes % 40)]);
        writes += 1;
        await new Promise((r) => setTimeout(r, 2));
      }
      await w.end();
    })();
    // The projector runs throughout (a batch every 20 ms), but for the moment a batch of the
    // old epoch takes its snapshot and its writes (short of its tail, where it is held).
    projector = projectDataset(DS, { db, log, id: 'cutover-live', leaseMs: 60_000, pollMs: 20, signal: stop.signal });
    await new Promise((r) => setTimeout(r, 500));
    stop.abort();
    await projector;
    const oldBefore = await genHash('g2');
    let release!: () => void;
    const hold = new Promise<void>((r) => (release = r));
    let started!: () => void;
    const isStarted = new Promise<void>((r) => (started = r));
    const zombie = runBatch(db, DS, {
      lease: { holder: 'zombie', token: 0n },
      maxEvents: 1000,
      statementTimeoutMs: 30_000,
      beforeTail: async () => {
        started();
        await hold;
      },
    });
    const early = await Promise.race([isStarted.then(() => null), zombie]);
    expect(early).toBeNull(); // it holds its snapshot and its writes, short of its tail
    stop = new AbortController();
    projector = projectDataset(DS, { db, log, id: 'cutover-live', leaseMs: 60_000, pollMs: 20, signal: stop.signal });

    const res = await runCli(['cutover', 'live@1', '--json'], env);
    release();
    const z = await zombie;
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    const r = JSON.parse(res.stdout);
    expect(r).toMatchObject({ ok: true, from: 'g2', to: 'g5', superseded: null, recovered: false });
    expect(r.freezeMs).toBeGreaterThan(0);
    expect(r.casMs).toBeLessThanOrEqual(r.freezeMs);
    expect(r.steps.map((s: { step: string }) => s.step)).toEqual(['pre-round', 'pre-verify', 'sealed', 'caught-up', 'verified', 'switched']);
    expect(r.tail.pre.mismatchCount + r.tail.post.mismatchCount).toBe(0);
    expect(r.tail.pre.keys).toBeGreaterThan(0);
    // Writes continued through the freeze: what arrived after the barrier was applied inside the switch.
    expect(r.appliedAtSwitch.events).toBeGreaterThan(0);
    const oldAtSwitch = await genHash('g2');

    expect(await state('live@1')).toBe('ACTIVE');
    expect(await dataset()).toMatchObject({ active: 'g5', ingress: 'OPEN' });
    expect(await one(`SELECT generation, state FROM genfill.generations WHERE dataset = $1 AND generation IN ('g2', 'g5') ORDER BY generation`, [DS])).toEqual({ generation: 'g2', state: 'RETAINED' });
    expect(await one(`SELECT state FROM genfill.generations WHERE dataset = $1 AND generation = 'g5'`, [DS])).toEqual({ state: 'ACTIVE' });
    const rec = await one<{ state: string; step: string; freeze_ms: string; barrier: string; s_cut: string }>(
      `SELECT state, step, freeze_ms::text, barrier::text, s_cut::text FROM genfill.cutovers WHERE release = 'live@1'`,
    );
    expect(rec).toMatchObject({ state: 'DONE', step: 'switched', barrier: r.barrier, s_cut: r.sCut });
    const st = await runCli(['status', 'live@1'], env);
    expect(st.stdout).toMatch(new RegExp(`cutover +#${r.cutover} g2 → g5: DONE, freeze ${r.freezeMs} ms \\(switch ${r.casMs} ms\\)`));
    const aborted = JSON.parse((await runCli(['status', 'pre@1', '--json'], env)).stdout).switches;
    // The four refusals inside the switch, then the mismatch found before the seal.
    expect(aborted.map((x: { state: string }) => x.state)).toEqual(['ABORTED', 'ABORTED', 'ABORTED', 'ABORTED', 'ABORTED']);
    expect(aborted.slice(0, 4).every((x: { reason: string }) => /^precondition/.test(x.reason))).toBe(true);
    expect(aborted[4].reason).toMatch(/1 keys changed since the approved reconciliation do not match/);
    const epochs = (await db.query(`SELECT epoch::int, generation, opened_for, release, barrier::text, closed_at IS NOT NULL AS closed FROM genfill.epochs WHERE dataset = $1 ORDER BY epoch DESC LIMIT 2`, [DS])).rows;
    expect(epochs).toEqual([
      { epoch: r.openedEpoch, generation: 'g5', opened_for: 'cutover of live@1', release: null, barrier: null, closed: false },
      { epoch: r.closedEpoch, generation: expect.any(String), opened_for: expect.any(String), release: 'live@1', barrier: r.barrier, closed: true },
    ]);
    expect(r.openedEpoch).toBe(r.closedEpoch + 1);

    // The old-epoch batch commits after the switch: it writes nothing.
    expect(z.kind).toBe('fenced');
    expect(z.kind === 'fenced' && z.reason).toMatch(/changed under the batch's snapshot|epoch is no longer open/);
    // A stale worker of the release: its commit writes nothing.
    const stale = await claimPartition(db, { release: 'live@1', partition: 'b-20250701T000000Z', worker: 'stale', leaseMs: 60_000 });
    expect(stale.kind).not.toBe('claimed');
    const receipts = await one<{ n: number }>(`SELECT count(*)::int AS n FROM genfill.receipts WHERE release = 'live@1'`);
    await expect(buildPartition(db, { release: 'live@1', partition: 'b-20250701T000000Z', attempt: 1 })).rejects.toThrow(/ACTIVE|not BUILDING|stale|fenced/i);
    expect(await one(`SELECT count(*)::int AS n FROM genfill.receipts WHERE release = 'live@1'`)).toEqual(receipts);

    await new Promise((r) => setTimeout(r, 700));
    writing = false;
    await writer;
    await new Promise((r) => setTimeout(r, 300));
    stop.abort();
    await projector;
    await drain();
    expect(writes).toBeGreaterThan(50);
    // Zero writes to the old generation after the switch.
    expect(await genHash('g2')).toEqual(oldAtSwitch);
    expect(oldAtSwitch.n).toBeGreaterThanOrEqual(oldBefore.n);
    // The view reads g5, equal to the transform map of the source; each key's row is its latest event (nothing applied twice or lost).
    expect(await viewDiff(FROM, TO)).toEqual({ missing: 0, extra: 0 });
    const { rows: revs } = await db.query(
      `SELECT count(*)::int AS n FROM ${candidate('g5')} c
         JOIN LATERAL (SELECT max(l.event_id) AS e FROM genfill.change_log l WHERE l.key = jsonb_build_object('order_id', c.order_id)) l ON true
        WHERE l.e IS NOT NULL AND c._gf_rev <> l.e`,
    );
    expect(revs[0].n).toBe(0);
    expect(await one(`SELECT count(*)::int AS n FROM public.orders_enriched`)).toEqual(await one(`SELECT count(*)::int AS n FROM public.orders`));
  });
});
