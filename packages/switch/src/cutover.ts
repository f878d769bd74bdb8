// `genfill cutover <release>` (SPEC invariants 9 and 11): every reader moves to the new
// generation in one step, after a freeze of seconds — the switch sequence (sequence.ts) with:
//   start  — every precondition, named (`--dry-run` stops here, sealing nothing);
//   before — a catch-up round toward the live frontier, then the reconciler's check of exactly
//            the keys changed since the approved reconciliation (its catch-up frontier) up to
//            the candidate's CF1;
//   seal   — at B (APPROVED → INGRESS_SEALED);
//   after  — the round to B (→ CAUGHT_UP), its root recomputed from the log, and the check of
//            the keys changed in (CF1, B];
//   switch — genfill.cutover_switch compares expected generation, sealed epoch, barrier,
//            manifest, the final round's root and the approvals, flips the pointer and opens E+1
//            on the new generation; the same transaction applies (B, S_cut] to the new
//            generation, so its readers see everything readers of the old one saw, and more.
// Dependencies (dependencies.ts): `before` recomputes each declared dependency's content hash
// against the pin; the round to B and the switch refuse on a captured dependency event (the
// switch also on one of the release's own in (pin, S_cut]); the refusal flags the dataset
// DEPENDENCY_STALE once the seal is undone (DependencyChangedError, exit 3).
// A failed precondition or a freeze past `maxFreezeMs` undoes the seal (ingress reopens on the
// old generation under a new epoch, the release is APPROVED again; exit 3 naming it); a
// mismatch in the tail does the same and moves the release to RECONCILIATION_REQUIRED with the
// keys (exit 4).
import { ReconciliationRequiredError, RefusedError, SwitchRefusedError } from '@genfill/contracts';
import { changedDependencies, type ApplyCounts } from '@genfill/projector';
import { verifyTail, type TailCheck, type TailMismatch } from '@genfill/reconcile';
import { casTransition, RELEASE_ACTIONS, rootAgg, rowHashExpr, type Db } from '@genfill/registry';
import { catchupRound, type CatchupRound } from './catchup.ts';
import { checkNotStale, checkPinnedEvents, checkPinnedHashes, dependenciesChanged } from './dependencies.ts';
import { sealRelease } from './seal.ts';
import { runSwitch, type SequenceOptions, type SwitchContext, type SwitchOperation } from './sequence.ts';
import type { SwitchStepTime } from './switch-lease.ts';

export const CUTOVER_DEFAULTS = { maxFreezeMs: 30_000, leaseMs: 10_000 } as const;

export type CutoverStep = 'checking' | 'pre-round' | 'pre-verify' | 'sealed' | 'caught-up' | 'verified' | 'switched' | 'done';

export interface CutoverCheck {
  name: string;
  ok: boolean;
  detail: string;
}

export interface CutoverOptions extends SequenceOptions<CutoverStep> {
  dryRun?: boolean;
  /** How long the seal waits for the projector to pass the build watermarks. */
  sealWaitMs?: number;
}

export type CutoverStepTime = SwitchStepTime<CutoverStep>;

export interface CutoverResult {
  release: string;
  dataset: string;
  dryRun: boolean;
  ok: boolean;
  checks: CutoverCheck[];
  cutover?: string;
  from?: string;
  to?: string;
  closedEpoch?: number;
  openedEpoch?: number;
  barrier?: string;
  sCut?: string;
  superseded?: string | null;
  /** From the seal's commit to the commit of the switch (the first commit of E+1). */
  freezeMs?: number;
  /** The switch transaction, BEGIN to COMMIT. */
  casMs?: number;
  /** Events after the barrier applied to the new generation inside the switch. */
  appliedAtSwitch?: ApplyCounts;
  rounds?: { pre?: Pick<CatchupRound, 'id' | 'events' | 'ms'>; final?: Pick<CatchupRound, 'id' | 'events' | 'root' | 'ms'> };
  tail?: { pre?: Omit<TailCheck, 'mismatches'>; post?: Omit<TailCheck, 'mismatches'> };
  steps: CutoverStepTime[];
  recovered: boolean;
}

interface Rel {
  id: string;
  dataset: string;
  generation: string;
  expected_active: string | null;
  state: string;
  active: string | null;
  ingress_state: string;
  ingress_epoch: string;
  epoch_release: string | null;
}

async function loadRelease(db: Db, release: string): Promise<Rel> {
  const { rows } = await db.query<Rel>(
    `SELECT r.id, r.dataset, r.generation, r.expected_active, r.state, d.active_generation AS active, d.ingress_state, d.ingress_epoch::text,
            e.release AS epoch_release
       FROM genfill.releases r JOIN genfill.datasets d ON d.name = r.dataset
       LEFT JOIN genfill.epochs e ON e.dataset = d.name AND e.epoch = d.ingress_epoch
      WHERE r.id = $1`,
    [release],
  );
  if (!rows[0]) throw new RefusedError(`release ${release} does not exist`);
  return rows[0];
}

/**
 * Every precondition of a cutover, named, in the order the dry run prints them: the one list
 * genfill.cutover_preconditions defines, which genfill.cutover_switch checks again (phase
 * 'switch') inside the switch transaction.
 */
export async function cutoverChecks(db: Pick<Db, 'query'>, release: string): Promise<CutoverCheck[]> {
  const { rows } = await db.query<CutoverCheck>(`SELECT name, ok, detail FROM genfill.cutover_preconditions($1, 'start')`, [release]);
  return rows;
}

function failed(checks: CutoverCheck[]): CutoverCheck[] {
  return checks.filter((c) => !c.ok);
}

function precondition(checks: CutoverCheck[]): RefusedError {
  const bad = failed(checks);
  return new SwitchRefusedError('cutover', bad.map((c) => c.name).join(','), `cutover refused: ${bad.map((c) => `precondition ${c.name}: ${c.detail}`).join('; ')}`);
}

/** The root of the latest events per key in (from, to], recomputed from the log (the round's is checked against it). */
async function roundRootFromLog(db: Db, round: string): Promise<{ stored: string; recomputed: string }> {
  const { rows } = await db.query<{ stored: string; recomputed: string }>(
    `WITH r AS (SELECT cr.*, d.source_table, c.source_table AS log, c.mode FROM genfill.catchup_rounds cr
                  JOIN genfill.releases rel ON rel.id = cr.release JOIN genfill.datasets d ON d.name = rel.dataset
                  JOIN genfill.captures c ON c.relid = to_regclass(d.source_table) WHERE cr.id = $1),
          e AS (SELECT DISTINCT ON (l.key) l.key, l.revision FROM genfill.change_log l, r
                 WHERE l.source_table = r.log AND l.txid >= pg_snapshot_xmin(r.from_snapshot)
                   AND NOT pg_visible_in_snapshot(l.txid, r.from_snapshot) AND pg_visible_in_snapshot(l.txid, r.to_snapshot)
                 ORDER BY l.key, CASE WHEN r.mode = 'ingress' THEN l.revision ELSE l.event_id END DESC, l.event_id DESC)
     SELECT (SELECT root::text FROM r) AS stored, (SELECT ${rootAgg(rowHashExpr(['key', 'revision'], 'e'))}::text FROM e) AS recomputed`,
    [round],
  );
  return rows[0]!;
}

/** The catch-up frontier the approved (latest) reconciliation verified the candidate at. */
async function reconciledFrontier(db: Db, release: string): Promise<string> {
  const { rows } = await db.query<{ cf: string }>(
    `SELECT c.summary->'live'->>'catchupFrontier' AS cf FROM genfill.reconciliations c WHERE c.release = $1 ORDER BY c.id DESC LIMIT 1`,
    [release],
  );
  return rows[0]!.cf;
}

interface SwitchRow {
  dataset: string;
  from_generation: string;
  to_generation: string;
  closed_epoch: string;
  opened_epoch: string;
  superseded: string | null;
}

const keysOf = (mismatches: TailMismatch[]) => mismatches.map((m) => ({ ...m.key, kind: m.kind }));
const listed = (mismatches: TailMismatch[]) => mismatches.slice(0, 10).map((m) => `${JSON.stringify(m.key)} ${m.kind}`).join(', ');

/** The cutover's phases of the switch sequence; `result` collects the rounds and tail checks. */
function cutoverOperation(db: Db, r: Rel, result: CutoverResult, opts: CutoverOptions): SwitchOperation<CutoverStep, SwitchRow> {
  const release = r.id;
  /** CF1: where the pre-seal tail check left the candidate (recorded on the cutover row for a recovery). */
  let cf1: string | null = null;
  const refuseMismatch = async (ctx: Pick<SwitchContext<CutoverStep>, 'undo'>, t: TailCheck, where: string, tail: string) => {
    await ctx.undo(`${t.mismatchCount} keys changed ${where} do not match the transform of their latest image`, {
      also: (conn) =>
        casTransition(conn, {
          release,
          from: 'APPROVED',
          to: 'RECONCILIATION_REQUIRED',
          action: RELEASE_ACTIONS.cutoverTailMismatch,
          reason: 'TAIL_MISMATCH',
          detail: { cutover: result.cutover, keys: keysOf(t.mismatches), count: t.mismatchCount },
        }).then(() => undefined),
      outcome: { mismatches: t.mismatchCount, keys: keysOf(t.mismatches) },
    });
    throw new ReconciliationRequiredError(
      `cutover refused: ${t.mismatchCount} keys changed ${where} do not match the transform of their latest image (${listed(t.mismatches)}); ${tail}`,
    );
  };
  return {
    lease: { kind: 'cutover', release, dataset: r.dataset, from: r.expected_active ?? '', to: r.generation },
    doneState: 'ACTIVE',
    sealedState: 'INGRESS_SEALED',
    resumable: ['APPROVED', 'INGRESS_SEALED', 'CAUGHT_UP'],
    sealedBySelf: (now) => now.ingressState === 'SEALED' && now.epochRelease === release,
    async start() {
      if (r.state === 'ACTIVE') throw new SwitchRefusedError('cutover', 'state', `release ${release} is already ACTIVE: nothing to cut over`);
      result.checks = await cutoverChecks(db, release);
      if (failed(result.checks).length > 0) throw precondition(result.checks);
    },
    async before(ctx) {
      // The dependencies as they were pinned at plan (outside the freeze: a whole-table hash).
      await checkPinnedHashes(db, release);
      const pre = await catchupRound(db, release);
      await checkNotStale(db, r.dataset);
      result.rounds!.pre = { id: pre.id, events: pre.events, ms: pre.ms };
      await ctx.lease.record('pre-round');
      const t = await verifyTail(db, release, await reconciledFrontier(db, release));
      const { mismatches: _, ...summary } = t;
      result.tail!.pre = summary;
      cf1 = t.to;
      if (t.mismatchCount > 0) await refuseMismatch(ctx, t, 'since the approved reconciliation', `${release} is RECONCILIATION_REQUIRED — repair and reconcile again`);
      await ctx.lease.record('pre-verify', { outcome: JSON.stringify({ preVerified: cf1 }) });
    },
    seal: async () => sealRelease(db, release, { waitForProjectorMs: opts.sealWaitMs ?? 30_000 }),
    async resumeSealed(ctx) {
      const { rows } = await db.query<{ pre: string | null }>(`SELECT c.outcome->>'preVerified' AS pre FROM genfill.cutovers c WHERE c.id = $1`, [ctx.lease.id]);
      // Sealed but never pre-verified by this cutover (sealed by hand): verify from the reconciliation.
      cf1 = rows[0]?.pre ?? (await reconciledFrontier(db, release));
    },
    async after(ctx) {
      if (ctx.state === 'INGRESS_SEALED') {
        const fin = await catchupRound(db, release);
        if (!fin.caughtUp) throw new RefusedError(`the round to the barrier did not reach it (${fin.to} ≠ ${ctx.barrier})`);
      }
      const { rows: lr } = await db.query<{ id: string; events: number; root: string; ms: string }>(
        `SELECT cr.id::text AS id, events, root::text AS root, ms::text AS ms FROM genfill.catchup_rounds cr WHERE release = $1 AND to_barrier ORDER BY cr.id DESC LIMIT 1`,
        [release],
      );
      const last = lr[0]!;
      result.rounds!.final = { id: last.id, events: last.events, root: last.root, ms: Number(last.ms) };
      await ctx.lease.record('caught-up');
      ctx.deadline();
      const roots = await roundRootFromLog(db, last.id);
      if (roots.stored !== roots.recomputed) {
        await ctx.undo(`the final round's catch-up root ${roots.stored} is not the one recomputed from the log (${roots.recomputed})`);
        throw new SwitchRefusedError('cutover', 'catch-up-root', `cutover refused: precondition catch-up-root: round #${last.id} recorded ${roots.stored}, the log gives ${roots.recomputed}; ingress reopened`);
      }
      const post = await verifyTail(db, release, cf1!);
      const { mismatches: _, ...summary } = post;
      result.tail!.post = summary;
      if (post.mismatchCount > 0) await refuseMismatch(ctx, post, 'in the tail', `ingress reopened, ${release} is RECONCILIATION_REQUIRED`);
      await ctx.lease.record('verified');
    },
    async compareAndSwap(conn, ctx) {
      const final = result.rounds!.final!;
      const { rows } = await conn.query<SwitchRow>('SELECT * FROM genfill.cutover_switch($1, $2, $3, $4::pg_snapshot, $5, $6)', [
        release,
        ctx.lease.id,
        ctx.lease.holder,
        ctx.barrier,
        final.id,
        final.root,
      ]);
      return rows[0]!;
    },
    applyFrom: async (_conn, ctx) => ctx.barrier,
    async dependencies(conn, ds, range) {
      // Every watched dependency over (B, S_cut] (the round to B checked up to B), and the
      // release's own over (pin, S_cut]: only their captured events, never their content.
      const changed = new Set([...(await changedDependencies(conn, ds.dependencies, range)), ...(await checkPinnedEvents(conn, release, range.to))]);
      if (changed.size > 0) {
        const relations = [...changed].sort();
        throw dependenciesChanged(relations, `dependency ${relations.join(', ')} changed after ${release} pinned it (an event in (pin, ${range.to}])`);
      }
    },
    async unseal(conn, reason) {
      const { rows } = await conn.query<{ epoch: string }>(
        `SELECT u.epoch::text FROM genfill.releases r JOIN genfill.datasets d ON d.name = r.dataset
           JOIN genfill.epochs e ON e.dataset = d.name AND e.epoch = d.ingress_epoch,
           LATERAL genfill.unseal_epoch(r.id, $2) AS u
          WHERE r.id = $1 AND d.ingress_state = 'SEALED' AND e.release = r.id AND r.state IN ('INGRESS_SEALED', 'CAUGHT_UP')`,
        [release, reason],
      );
      return rows[0] ? Number(rows[0].epoch) : null;
    },
    reopened: (epoch) => `ingress reopened on ${r.expected_active} under epoch ${epoch ?? '?'}, ${release} is APPROVED again`,
  };
}

/**
 * Run (or, with `dryRun`, only check) the cutover of `release`. Returns the record; throws
 * RefusedError (exit 3) for a failed precondition or a freeze past its bound — ingress reopened
 * on the old generation — and ReconciliationRequiredError (exit 4) for a mismatch in the tail.
 */
export async function cutoverRelease(db: Db, release: string, opts: CutoverOptions = {}): Promise<CutoverResult> {
  const r = await loadRelease(db, release);
  if (opts.dryRun) {
    const checks = await cutoverChecks(db, release);
    return { release, dataset: r.dataset, dryRun: true, ok: failed(checks).length === 0, checks, steps: [], recovered: false };
  }
  const result: CutoverResult = { release, dataset: r.dataset, dryRun: false, ok: false, checks: [], from: r.expected_active ?? undefined, to: r.generation, steps: [], recovered: false, rounds: {}, tail: {} };
  const op = cutoverOperation(db, r, result, opts);
  const out = await runSwitch(db, op, opts, CUTOVER_DEFAULTS);
  Object.assign(result, { cutover: out.lease.id, steps: out.lease.steps, recovered: out.lease.recovered });
  if (out.done === 'recorded') return { ...result, ok: true, recovered: true };
  const { row, freezeMs, casMs, applied } = out.commit;
  Object.assign(result, {
    ok: true,
    barrier: out.barrier,
    sCut: out.commit.snapshot,
    openedEpoch: Number(row.opened_epoch),
    closedEpoch: Number(row.closed_epoch),
    superseded: row.superseded,
    freezeMs,
    casMs,
    appliedAtSwitch: applied,
  });
  await out.lease.finish('DONE', { freezeMs, casMs, appliedAtSwitch: applied, superseded: row.superseded }, { freeze_ms: freezeMs, cas_ms: casMs });
  return result;
}
