// `genfill cutover <release>` (SPEC invariants 9 and 11): every reader moves to the new
// generation in one step, after a freeze of seconds. Executed under a cutover lease (a RUNNING
// row of genfill.cutovers, renewed while it runs), in this order:
//   1. checks — every precondition, named (`--dry-run` stops here, sealing nothing);
//   2. before the seal, so the freeze stays short: a catch-up round toward the live frontier,
//      then the reconciler's check of exactly the keys changed since the approved
//      reconciliation (its catch-up frontier) up to the candidate's CF1;
//   3. the seal at B (APPROVED → INGRESS_SEALED): the freeze starts;
//   4. the round to B (→ CAUGHT_UP), its root recomputed from the log, and the check of the
//      keys changed in (CF1, B];
//   5. ONE REPEATABLE READ transaction: genfill.cutover_switch compares expected generation,
//      sealed epoch, barrier, manifest, the final round's root and the approvals, flips the
//      pointer and opens E+1 on the new generation; the same transaction applies (B, S_cut] to
//      the new generation (S_cut: its own snapshot) and moves the new frontier to S_cut — so
//      readers of the new generation see everything readers of the old one saw, and more; the
//      freeze ends at that commit.
// A failed precondition or a freeze past `maxFreezeMs` undoes the seal (ingress reopens on the
// old generation under a new epoch, the release is APPROVED again; exit 3 naming it); a
// mismatch in the tail does the same and moves the release to RECONCILIATION_REQUIRED with the
// keys (exit 4). A holder that dies leaves its lease to expire: the next one finishes (every
// step is idempotent; a committed flip is complete by construction) or, past the freeze
// bound, undoes it — recorded in the row either way.
import { hostname } from 'node:os';
import { ReconciliationRequiredError, RefusedError } from '@genfill/contracts';
import { verifyTail, type TailCheck } from '@genfill/reconcile';
import { casTransition, RELEASE_ACTIONS, rootAgg, rowHashExpr, withTransaction, type Db } from '@genfill/registry';
import { catchupRound, type CatchupRound } from './catchup.ts';
import { sealRelease } from './seal.ts';
import { LeaseLost, SwitchLease, type SwitchStepTime } from './switch-lease.ts';
import { loadDataset, applyStatement, countsOf, CREATE_EVENTS_TABLE, stageStatement, type ApplyCounts, type ApplyRow } from '@genfill/projector';

export const CUTOVER_DEFAULTS = { maxFreezeMs: 30_000, leaseMs: 10_000 } as const;

export type CutoverStep = 'checking' | 'pre-round' | 'pre-verify' | 'sealed' | 'caught-up' | 'verified' | 'switched' | 'done';

export interface CutoverCheck {
  name: string;
  ok: boolean;
  detail: string;
}

export interface CutoverOptions {
  maxFreezeMs?: number;
  dryRun?: boolean;
  holder?: string;
  leaseMs?: number;
  /** The request this cutover runs for (recorded). */
  request?: string | null;
  /** How long the seal waits for the projector to pass the build watermarks. */
  sealWaitMs?: number;
  /** Recovery of a cutover whose holder died outside a request: finish one that sealed, abort one that had not. */
  recoverOnly?: boolean;
  /** Called once each step is recorded (the fault suite kills the holder here). */
  onStep?: (step: CutoverStep) => void | Promise<void>;
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

/** Every precondition of a cutover, named; `recovering`: the release may already be sealed by itself. */
export async function cutoverChecks(db: Db, release: string, o: { recovering?: boolean } = {}): Promise<CutoverCheck[]> {
  const r = await loadRelease(db, release);
  const checks: CutoverCheck[] = [];
  const add = (name: string, ok: boolean, detail: string) => checks.push({ name, ok, detail });
  const sealedBySelf = r.ingress_state === 'SEALED' && r.epoch_release === release;
  const states = o.recovering ? ['APPROVED', 'INGRESS_SEALED', 'CAUGHT_UP'] : ['APPROVED'];
  add('state', states.includes(r.state), `release ${release} is ${r.state}${states.includes(r.state) ? '' : ': a cutover needs an APPROVED release (reconcile, then approve as a second role)'}`);
  add(
    'expected-generation',
    r.expected_active !== null && r.expected_active === r.active,
    r.expected_active === null
      ? `release ${release} builds a first generation: there is no live generation to switch from (adopt the dataset first)`
      : `expects ${r.expected_active} active; ${r.active ?? 'none'} is`,
  );
  add(
    'ingress',
    r.ingress_state === 'OPEN' || (o.recovering === true && sealedBySelf),
    r.ingress_state === 'OPEN' ? `epoch ${r.ingress_epoch} open` : `epoch ${r.ingress_epoch} sealed by ${r.epoch_release ?? '?'}`,
  );
  const { rows: m } = await db.query<{ total: number; bad: string[] }>(
    `SELECT count(*)::int AS total,
            coalesce((array_agg(p.id ORDER BY p.id) FILTER (WHERE p.status <> 'BUILT' OR NOT EXISTS (
              SELECT 1 FROM genfill.receipts rc WHERE rc.release = p.release AND rc.partition = p.id AND rc.release_digest = r.digest
                 AND NOT EXISTS (SELECT 1 FROM genfill.receipts n WHERE n.supersedes = rc.id))))[1:20], '{}') AS bad
       FROM genfill.partitions p JOIN genfill.releases r ON r.id = p.release WHERE p.release = $1`,
    [release],
  );
  add('manifest', m[0]!.total > 0 && m[0]!.bad.length === 0, m[0]!.bad.length === 0 ? `${m[0]!.total} partitions, each with a current receipt` : `partitions without a built, current receipt: ${m[0]!.bad.join(', ')}`);
  const { rows: a } = await db.query<{ latest: string | null; state: string | null; approvals: number; required: number; approved_on: string | null; voided: string | null; chain: string[]; cf: string | null }>(
    `SELECT x.latest::text, x.latest_state AS state, x.approvals, x.required, x.approved_on::text, x.voided_by::text AS voided, x.chain::text[] AS chain,
            (SELECT c.summary->'live'->>'catchupFrontier' FROM genfill.reconciliations c WHERE c.id = x.latest) AS cf
       FROM genfill.approval_chain($1) x`,
    [release],
  );
  const ap = a[0]!;
  const along = ap.chain.length > 1 ? ` (along the chain #${ap.chain.join(' ← #')})` : '';
  if (!ap.latest) add('approvals', false, 'no reconciliation: reconcile and approve first');
  else if (ap.voided) add('approvals', false, `the approvals are bound to reconciliation #${ap.approved_on ?? '?'}, voided by reconciliation #${ap.latest} (${ap.state})`);
  else add('approvals', ap.approvals >= ap.required, `${ap.approvals} of ${ap.required} approvals on reconciliation #${ap.latest}${along}`);
  add(
    'reconciliation-live',
    ap.cf !== null,
    ap.cf !== null ? `reconciliation #${ap.latest} verified the candidate at ${ap.cf}` : `reconciliation #${ap.latest ?? '?'} recorded no catch-up frontier: the tail since it cannot be verified (reconcile again)`,
  );
  const { rows: f } = await db.query<{ stale: boolean; stop: string | null; frontier: string | null; behind: number }>(
    `SELECT coalesce((SELECT fl.dependency_stale_since IS NOT NULL FROM genfill.dataset_flags fl WHERE fl.dataset = d.name), false) AS stale,
            (SELECT s.key::text FROM genfill.projector_stops s WHERE s.dataset = d.name) AS stop,
            fr.snapshot::text AS frontier,
            (SELECT count(DISTINCT rc.partition)::int FROM genfill.receipts rc WHERE rc.release = $1
                AND fr.snapshot IS NOT NULL AND NOT genfill.snapshot_contains(fr.snapshot, rc.watermark)) AS behind
       FROM genfill.datasets d LEFT JOIN genfill.frontiers fr ON fr.dataset = d.name AND fr.generation = d.active_generation
      WHERE d.name = $2`,
    [release, r.dataset],
  );
  add('dependencies', !f[0]!.stale, f[0]!.stale ? `dataset ${r.dataset} is DEPENDENCY_STALE` : 'no captured dependency changed');
  add(
    'projector',
    f[0]!.frontier !== null && f[0]!.stop === null,
    f[0]!.frontier === null
      ? `dataset ${r.dataset} has no projector frontier (adopt with capture)`
      : f[0]!.stop
        ? `the projector of ${r.dataset} stopped at key ${f[0]!.stop} (quarantine it or fix the transform)`
        : f[0]!.behind > 0
          ? `frontier ${f[0]!.frontier}; ${f[0]!.behind} partitions' watermarks are not yet in it (the seal waits for the projector)`
          : `frontier ${f[0]!.frontier}`,
  );
  return checks;
}

function failed(checks: CutoverCheck[]): CutoverCheck[] {
  return checks.filter((c) => !c.ok);
}

function precondition(checks: CutoverCheck[]): RefusedError {
  return new RefusedError(`cutover refused: ${failed(checks).map((c) => `precondition ${c.name}: ${c.detail}`).join('; ')}`);
}

const since = (t: number) => Math.round((performance.now() - t) * 10) / 10;

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

/**
 * Run (or, with `dryRun`, only check) the cutover of `release`. Returns the record; throws
 * RefusedError (exit 3) for a failed precondition or a freeze past its bound — ingress reopened
 * on the old generation — and ReconciliationRequiredError (exit 4) for a mismatch in the tail.
 */
export async function cutoverRelease(db: Db, release: string, opts: CutoverOptions = {}): Promise<CutoverResult> {
  const o = {
    maxFreezeMs: opts.maxFreezeMs ?? CUTOVER_DEFAULTS.maxFreezeMs,
    holder: opts.holder ?? `cutover:${hostname()}:${process.pid}`,
    leaseMs: opts.leaseMs ?? CUTOVER_DEFAULTS.leaseMs,
    request: opts.request ?? null,
  };
  const r = await loadRelease(db, release);
  if (opts.dryRun) {
    const checks = await cutoverChecks(db, release);
    return { release, dataset: r.dataset, dryRun: true, ok: failed(checks).length === 0, checks, steps: [], recovered: false };
  }
  const lease = { kind: 'cutover' as const, release, dataset: r.dataset, from: r.expected_active ?? '', to: r.generation, ...o };
  let held = await SwitchLease.recover<CutoverStep>(db, lease, opts.onStep);
  if (!held && opts.recoverOnly) throw new RefusedError(`no cutover of ${release} to recover`);
  let checks: CutoverCheck[] = [];
  if (!held) {
    if (r.state === 'ACTIVE') throw new RefusedError(`release ${release} is already ACTIVE: nothing to cut over`);
    checks = await cutoverChecks(db, release);
    if (failed(checks).length > 0) throw precondition(checks);
    held = await SwitchLease.start<CutoverStep>(db, lease, opts.onStep);
  }
  const h = held;
  const result: CutoverResult = {
    release,
    dataset: r.dataset,
    dryRun: false,
    ok: false,
    checks,
    cutover: h.id,
    from: r.expected_active ?? undefined,
    to: r.generation,
    steps: h.steps,
    recovered: h.recovered,
    rounds: {},
    tail: {},
  };
  const record = (step: CutoverStep, fields?: Record<string, unknown>) => h.record(step, fields);
  const finish = (state: 'DONE' | 'ABORTED', outcome: unknown, fields?: Record<string, unknown>) => h.finish(state, outcome, fields);
  /** Undo the seal (if this release holds it): ingress reopens on the old generation under a new epoch, APPROVED again. */
  const undo = async (reason: string, mismatch?: { keys: unknown[]; count: number }) => {
    const now = await loadRelease(db, release);
    let reopened: number | null = null;
    await withTransaction(db, async (conn) => {
      if (now.ingress_state === 'SEALED' && now.epoch_release === release && ['INGRESS_SEALED', 'CAUGHT_UP'].includes(now.state)) {
        const { rows } = await conn.query<{ epoch: string }>('SELECT epoch::text FROM genfill.unseal_epoch($1, $2)', [release, `cutover aborted: ${reason}`]);
        reopened = Number(rows[0]!.epoch);
      }
      if (mismatch) {
        await casTransition(conn, {
          release,
          from: 'APPROVED',
          to: 'RECONCILIATION_REQUIRED',
          action: RELEASE_ACTIONS.cutoverTailMismatch,
          reason: 'TAIL_MISMATCH',
          detail: { cutover: h.id, keys: mismatch.keys, count: mismatch.count },
        });
      }
    });
    await finish('ABORTED', { reason, reopenedEpoch: reopened, ...(mismatch ? { mismatches: mismatch.count, keys: mismatch.keys } : {}) });
    return reopened;
  };

  let sealedAt = 0;
  try {
    let cur = await loadRelease(db, release);
    // A recovery whose predecessor's switch committed: the flip is complete; record it.
    if (cur.state === 'ACTIVE') {
      await record('done');
      await finish('DONE', { recovered: true, note: 'the switch had committed before the previous holder died' });
      return { ...result, ok: true, recovered: true };
    }
    const sealedBySelf = cur.ingress_state === 'SEALED' && cur.epoch_release === release;
    if (h.recovered && !['APPROVED', 'INGRESS_SEALED', 'CAUGHT_UP'].includes(cur.state)) {
      await finish('ABORTED', { recovered: true, reason: `release is ${cur.state}` });
      throw new RefusedError(`cutover #${h.id} of ${release} was recovered with the release ${cur.state}: nothing to finish`);
    }

    if (opts.recoverOnly && !sealedBySelf) {
      await finish('ABORTED', { recovered: true, reason: 'its holder died before the seal: nothing to undo' });
      throw new RefusedError(`cutover #${h.id} of ${release}: its holder died before the seal; recorded as aborted (run cutover again)`);
    }
    // 2. Before the seal: a round toward the live frontier, and the keys changed since the approved reconciliation.
    let cf1: string | null = null;
    if (!sealedBySelf) {
      const pre = await catchupRound(db, release);
      result.rounds!.pre = { id: pre.id, events: pre.events, ms: pre.ms };
      await record('pre-round');
      const { rows: rc } = await db.query<{ cf: string }>(
        `SELECT c.summary->'live'->>'catchupFrontier' AS cf FROM genfill.reconciliations c WHERE c.release = $1 ORDER BY c.id DESC LIMIT 1`,
        [release],
      );
      const t = await verifyTail(db, release, rc[0]!.cf);
      const { mismatches, ...pre2 } = t;
      result.tail!.pre = pre2;
      cf1 = t.to;
      if (t.mismatchCount > 0) {
        await undo(`${t.mismatchCount} keys changed since the approved reconciliation do not match the transform of their latest image`, { keys: mismatches.map((m) => ({ ...m.key, kind: m.kind })), count: t.mismatchCount });
        throw new ReconciliationRequiredError(
          `cutover refused: ${t.mismatchCount} keys changed since the approved reconciliation do not match the transform of their latest image ` +
            `(${mismatches.slice(0, 10).map((m) => `${JSON.stringify(m.key)} ${m.kind}`).join(', ')}); ${release} is RECONCILIATION_REQUIRED — repair and reconcile again`,
        );
      }
      await record('pre-verify', { outcome: JSON.stringify({ preVerified: cf1 }) });

      // 3. The seal: the freeze starts.
      const s = await sealRelease(db, release, { waitForProjectorMs: opts.sealWaitMs ?? 30_000 });
      sealedAt = performance.now();
      result.barrier = s.barrier;
      result.closedEpoch = s.epoch;
      await record('sealed', { epoch: s.epoch, barrier: s.barrier, sealed_at: new Date().toISOString() });
    } else {
      const { rows } = await db.query<{ barrier: string; epoch: string; waited_ms: number; pre: string | null }>(
        `SELECT e.barrier::text, e.epoch::text, extract(epoch FROM clock_timestamp() - e.sealed_at) * 1000 AS waited_ms, c.outcome->>'preVerified' AS pre
           FROM genfill.datasets d JOIN genfill.epochs e ON e.dataset = d.name AND e.epoch = d.ingress_epoch, genfill.cutovers c
          WHERE d.name = $1 AND c.id = $2`,
        [r.dataset, h.id],
      );
      result.barrier = rows[0]!.barrier;
      result.closedEpoch = Number(rows[0]!.epoch);
      sealedAt = performance.now() - Number(rows[0]!.waited_ms);
      cf1 = rows[0]!.pre;
      if (!cf1) {
        // Sealed but never pre-verified by this cutover (sealed by hand): verify from the reconciliation.
        const { rows: rc } = await db.query<{ cf: string }>(
          `SELECT c.summary->'live'->>'catchupFrontier' AS cf FROM genfill.reconciliations c WHERE c.release = $1 ORDER BY c.id DESC LIMIT 1`,
          [release],
        );
        cf1 = rc[0]!.cf;
      }
    }
    const deadline = () => {
      const used = performance.now() - sealedAt;
      if (used > h.maxFreezeMs) throw new FreezeExceeded(used, h.maxFreezeMs);
      return h.maxFreezeMs - used;
    };
    deadline();

    // 4. The round to B, its root from the log, the tail's keys.
    cur = await loadRelease(db, release);
    if (cur.state === 'INGRESS_SEALED') {
      const fin = await catchupRound(db, release);
      if (!fin.caughtUp) throw new RefusedError(`the round to the barrier did not reach it (${fin.to} ≠ ${result.barrier})`);
    }
    const { rows: lr } = await db.query<{ id: string; events: number; root: string; ms: string }>(
      `SELECT cr.id::text AS id, events, root::text AS root, ms::text AS ms FROM genfill.catchup_rounds cr WHERE release = $1 AND to_barrier ORDER BY cr.id DESC LIMIT 1`,
      [release],
    );
    const last = lr[0]!;
    result.rounds!.final = { id: last.id, events: last.events, root: last.root, ms: Number(last.ms) };
    await record('caught-up');
    deadline();
    const roots = await roundRootFromLog(db, last.id);
    if (roots.stored !== roots.recomputed) {
      await undo(`the final round's catch-up root ${roots.stored} is not the one recomputed from the log (${roots.recomputed})`);
      throw new RefusedError(`cutover refused: precondition catch-up-root: round #${last.id} recorded ${roots.stored}, the log gives ${roots.recomputed}; ingress reopened`);
    }
    const post = await verifyTail(db, release, cf1!);
    const { mismatches: postMismatches, ...post2 } = post;
    result.tail!.post = post2;
    if (post.mismatchCount > 0) {
      await undo(`${post.mismatchCount} keys changed in the tail do not match the transform of their latest image`, {
        keys: postMismatches.map((m) => ({ ...m.key, kind: m.kind })),
        count: post.mismatchCount,
      });
      throw new ReconciliationRequiredError(
        `cutover refused: ${post.mismatchCount} keys changed in the tail do not match the transform of their latest image ` +
          `(${postMismatches.slice(0, 10).map((m) => `${JSON.stringify(m.key)} ${m.kind}`).join(', ')}); ingress reopened, ${release} is RECONCILIATION_REQUIRED`,
      );
    }
    await record('verified');
    const remaining = deadline();

    // 5. The switch, with (B, S_cut] applied to the new generation in the same transaction.
    await h.pause();
    const casStarted = performance.now();
    let sw!: { dataset: string; from_generation: string; to_generation: string; closed_epoch: string; opened_epoch: string; superseded: string | null };
    let sCut = '';
    let applied!: ApplyCounts;
    for (let attempt = 1; ; attempt++) {
      try {
        await withTransaction(
          db,
          async (conn) => {
            const { rows: snap } = await conn.query<{ s: string }>('SELECT pg_current_snapshot()::text AS s');
            sCut = snap[0]!.s;
            await conn.query(`SET LOCAL statement_timeout = ${Math.max(100, Math.floor(remaining))}`);
            try {
              const { rows } = await conn.query<typeof sw>('SELECT * FROM genfill.cutover_switch($1, $2, $3, $4::pg_snapshot, $5, $6)', [
                release,
                h.id,
                h.holder,
                result.barrier,
                last.id,
                last.root,
              ]);
              sw = rows[0]!;
            } catch (err) {
              const e = err as { code?: string; message: string };
              if (e.code === 'GFR01' || e.code === 'GFS01') throw new SwitchRefused(e.message);
              throw err;
            }
            const ds = await loadDataset(conn, r.dataset);
            if (ds.generation !== r.generation) throw new Error(`the switch left ${ds.generation} active, not ${r.generation}`);
            await conn.query(CREATE_EVENTS_TABLE);
            const stage = stageStatement(ds, { from: result.barrier!, to: sCut });
            await conn.query(stage.text, stage.values);
            const q = applyStatement(ds);
            const row = (await conn.query<ApplyRow>(q.text, q.values)).rows[0]!;
            if (row.fanout || row.stray) {
              throw new SwitchRefused(`an event after the barrier is poison for ${r.generation} (${row.fanout ? 'fan-out' : 'changed key'} at ${JSON.stringify((row.fanout ?? row.stray)![0])})`);
            }
            applied = countsOf(row);
            const moved = await conn.query(
              `UPDATE genfill.frontiers SET snapshot = $3::pg_snapshot, updated_at = clock_timestamp() WHERE dataset = $1 AND generation = $2 AND snapshot::text = $4`,
              [r.dataset, r.generation, sCut, result.barrier],
            );
            if (moved.rowCount !== 1) throw new Error('the new generation\'s frontier moved under the switch');
            await conn.query(`UPDATE genfill.cutovers SET s_cut = $2::pg_snapshot WHERE id = $1`, [h.id, sCut]);
          },
          'REPEATABLE READ',
        );
        break;
      } catch (err) {
        if ((err as { code?: string }).code === '40001' && attempt < 3) continue;
        throw err;
      }
    }
    const casMs = since(casStarted);
    const freezeMs = Math.round((performance.now() - sealedAt) * 10) / 10;
    h.resume();
    Object.assign(result, {
      ok: true,
      sCut,
      openedEpoch: Number(sw.opened_epoch),
      closedEpoch: Number(sw.closed_epoch),
      superseded: sw.superseded,
      freezeMs,
      casMs,
      appliedAtSwitch: applied,
    });
    await record('switched');
    await opts.onStep?.('done');
    await finish('DONE', { freezeMs, casMs, appliedAtSwitch: applied, superseded: sw.superseded }, { freeze_ms: freezeMs, cas_ms: casMs });
    return result;
  } catch (err) {
    if (err instanceof LeaseLost || err instanceof ReconciliationRequiredError || (err instanceof RefusedError && /^cutover (refused|#)/.test(err.message))) throw err;
    // Anything else before the switch committed (nothing switched: its transaction rolled
    // back): undo the seal while this holder is alive. A holder that dies instead leaves its
    // lease to run out, and the next one finishes or undoes.
    const known = err instanceof FreezeExceeded || err instanceof SwitchRefused;
    const reason = known ? (err as Error).message : `${(err as Error).message} (an error, not a precondition)`;
    const epoch = await undo(reason).catch((e: Error) => {
      throw new RefusedError(`cutover of ${release} failed (${reason}) and undoing the seal failed too: ${e.message}; run \`genfill unseal ${release}\``);
    });
    if (!known) throw err;
    throw new RefusedError(`cutover refused: ${reason}; ingress reopened on ${r.expected_active} under epoch ${epoch ?? '?'}, ${release} is APPROVED again`);
  } finally {
    await h.close();
  }
}

class FreezeExceeded extends Error {
  constructor(used: number, max: number) {
    super(`the freeze reached ${Math.round(used)} ms, past --max-freeze ${max} ms`);
  }
}

class SwitchRefused extends Error {}
