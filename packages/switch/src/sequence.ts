// One phase sequence for both pointer switches — the cutover (SPEC invariants 9 and 11) and the
// rollback (invariant 13) — parameterised by what differs, as pgroll's Operation{Start,
// Complete, Rollback} is. Under a switch lease (switch-lease.ts: one RUNNING row of
// genfill.cutovers per dataset, renewed while it runs):
//   1. start    — the operation's refusals, named, before any lease is taken; or the lease a
//                 dead holder left, taken over (a recovery);
//   2. before   — unsealed work, so the freeze stays short: the cutover's catch-up round and
//                 tail check, the rollback's replay rounds;
//   3. seal     — ingress sealed at a barrier B: the freeze starts ('sealed');
//   4. after    — sealed work within the freeze bound: the cutover's round to B, its root and
//                 the tail's keys (a rollback has none);
//   5. switch   — ONE REPEATABLE READ transaction: the operation's compare-and-swap in SQL flips
//                 the pointer and opens the next epoch; the same transaction applies the log from
//                 where the generation readers move to stands, up to the transaction's own
//                 snapshot, and moves that generation's frontier there. The freeze ends at its
//                 commit ('switched').
// Any failure before the switch committed undoes the seal while this holder is alive: ingress
// reopens under a new epoch on the generation readers had (exit 3, naming why). A holder that
// dies leaves its lease to run out; the next one finishes (every step is idempotent; a switch
// that committed is complete by construction and is only recorded) or, past the freeze bound,
// undoes it.
import { hostname } from 'node:os';
import { DependencyChangedError, pgErrorCode, ReconciliationRequiredError, RefusedError, SQLSTATE, SwitchRefusedError } from '@genfill/contracts';
import { applyStep, loadDataset, markDependencyStale, type ApplyCounts, type ProjectedDataset } from '@genfill/projector';
import { withTransaction, type Conn, type Db } from '@genfill/registry';
import { poisonStop, recordStop, stopAdvice, type SwitchStop } from './stops.ts';
import { LeaseLost, SwitchLease, type LeaseOptions } from './switch-lease.ts';

// A SwitchRefusedError (contracts) is thrown once the sequence (or the phase that threw it)
// undid the seal and recorded the outcome, or before a lease was taken: it goes out as it is.

/**
 * Raised in a phase or the switch: undo the seal, then refuse (a SwitchRefusedError) with this
 * reason. A poison refusal carries its `stop`, recorded once the seal is undone (stops.ts).
 */
export class SwitchRefused extends Error {
  constructor(
    message: string,
    readonly check = 'switch',
    readonly stop?: SwitchStop,
    /** Dependencies that changed: flagged in the undo's transaction, refused as a DependencyChangedError. */
    readonly stale?: string[],
  ) {
    super(message);
  }
}

class FreezeExceeded extends SwitchRefused {
  constructor(message: string) {
    super(message, 'freeze');
  }
}

export const since = (t: number) => Math.round((performance.now() - t) * 10) / 10;

/** The release and its dataset's current epoch, as the sequence reads them at each decision. */
export interface SwitchNow {
  state: string;
  ingressState: string;
  epochRelease: string | null;
  sealedFrom: string | null;
  barrier: string | null;
  epoch: number;
  /** Milliseconds since the current epoch was sealed (null while it is open). */
  sealedMsAgo: number | null;
}

export interface UndoOptions {
  /** Written in the undo's transaction (the cutover's move to RECONCILIATION_REQUIRED). */
  also?: (conn: Conn) => Promise<void>;
  /** Recorded in the outcome beside the reason. */
  outcome?: Record<string, unknown>;
}

export interface SwitchContext<S extends string> {
  lease: SwitchLease<S>;
  /** The barrier, once sealed. */
  barrier: string;
  /** The release's state once sealed: the seal's (`sealedState`), or what a recovery found. */
  state: string;
  /** The ms the freeze may still last; throws (undo, then refuse) past the bound. */
  deadline(): number;
  /** Undo now, before throwing a refusal of the phase's own (a SwitchRefusedError or a ReconciliationRequiredError). */
  undo(reason: string, o?: UndoOptions): Promise<number | null>;
}

/** What the switch transaction hands back: the compare-and-swap's row and the apply. */
export interface SwitchCommit<Row> {
  row: Row;
  /** The transaction's own snapshot: where the generation readers move to now stands. */
  snapshot: string;
  applied: ApplyCounts;
  freezeMs: number;
  casMs: number;
}

export interface SwitchOperation<S extends string, Row> {
  lease: Omit<LeaseOptions, 'holder' | 'leaseMs' | 'maxFreezeMs' | 'request'>;
  /** The release state once this operation's switch committed. */
  doneState: string;
  /** The release state this operation's seal leaves. */
  sealedState: string;
  /** States a recovered holder may still finish from. */
  resumable: string[];
  /** Whether the dataset's current epoch was sealed by this operation. */
  sealedBySelf(now: SwitchNow): boolean;
  /** Refuse (throw) before a lease is taken; not asked of a recovery. */
  start(): Promise<void>;
  before(ctx: Omit<SwitchContext<S>, 'barrier' | 'state' | 'deadline'>): Promise<void>;
  seal(ctx: Omit<SwitchContext<S>, 'barrier' | 'state' | 'deadline'>): Promise<{ epoch: number; barrier: string }>;
  /** On recovery of a sealed operation: whatever `before` left that `after` needs. */
  resumeSealed?(ctx: SwitchContext<S>): Promise<void>;
  after(ctx: SwitchContext<S>): Promise<void>;
  /** In the switch transaction: the compare-and-swap (genfill.cutover_switch, genfill.rollback_switch). */
  compareAndSwap(conn: Conn, ctx: SwitchContext<S>): Promise<Row>;
  /** In the switch transaction, after the swap: where the apply starts (the barrier, or the old generation's frontier). */
  applyFrom(conn: Conn, ctx: SwitchContext<S>): Promise<string>;
  /**
   * In the switch transaction, after the apply: the dependencies' events in the applied range
   * (dependencies.ts) — flagged with the switch (a rollback), or refused (a cutover).
   */
  dependencies(conn: Conn, ds: ProjectedDataset, range: { from: string; to: string }): Promise<void>;
  /** In the undo's transaction: reopen ingress under a new epoch if this operation sealed it; the epoch, or null. */
  unseal(conn: Conn, reason: string): Promise<number | null>;
  /** The refusal's tail once undone: where ingress reopened and the release's state. */
  reopened(epoch: number | null): string;
}

/** What a caller of cutover or rollback may set; `runSwitch` fills the rest from the operation's defaults. */
export interface SequenceOptions<S extends string> {
  holder?: string;
  leaseMs?: number;
  maxFreezeMs?: number;
  /** The request this switch runs for (recorded). */
  request?: string | null;
  /** Recovery of a switch whose holder died outside a request: finish one that sealed, abort one that had not. */
  recoverOnly?: boolean;
  /** Called once each step is recorded (the fault suite kills the holder here). */
  onStep?: (step: S) => void | Promise<void>;
}

export type SequenceResult<S extends string, Row> =
  | { lease: SwitchLease<S>; done: 'recorded'; barrier?: undefined; closedEpoch?: undefined; commit?: undefined }
  | { lease: SwitchLease<S>; done: 'switched'; barrier: string; closedEpoch: number; commit: SwitchCommit<Row> };

async function readNow(db: Db, release: string): Promise<SwitchNow> {
  const { rows } = await db.query<{ state: string; ingress_state: string; epoch_release: string | null; sealed_from: string | null; barrier: string | null; epoch: string; sealed_ms_ago: number | null }>(
    `SELECT r.state, d.ingress_state, e.release AS epoch_release, e.sealed_from, e.barrier::text, d.ingress_epoch::text AS epoch,
            CASE WHEN d.ingress_state = 'SEALED' THEN extract(epoch FROM clock_timestamp() - e.sealed_at) * 1000 END AS sealed_ms_ago
       FROM genfill.releases r JOIN genfill.datasets d ON d.name = r.dataset
       LEFT JOIN genfill.epochs e ON e.dataset = d.name AND e.epoch = d.ingress_epoch
      WHERE r.id = $1`,
    [release],
  );
  const n = rows[0];
  if (!n) throw new RefusedError(`release ${release} does not exist`);
  return {
    state: n.state,
    ingressState: n.ingress_state,
    epochRelease: n.epoch_release,
    sealedFrom: n.sealed_from,
    barrier: n.barrier,
    epoch: Number(n.epoch),
    sealedMsAgo: n.sealed_ms_ago === null ? null : Number(n.sealed_ms_ago),
  };
}

/** Move the frontier of `generation` from `from` to `to`, fenced on `from`. */
export async function moveFrontier(conn: Conn, dataset: string, generation: string, from: string, to: string): Promise<void> {
  const moved = await conn.query(
    `UPDATE genfill.frontiers SET snapshot = $4::pg_snapshot, updated_at = clock_timestamp() WHERE dataset = $1 AND generation = $2 AND snapshot::text = $3`,
    [dataset, generation, from, to],
  );
  if (moved.rowCount !== 1) throw new Error(`the frontier of ${dataset}/${generation} moved under the switch (another holder?)`);
}

/** Run `op` to its end: the switch committed (or found committed), or refused with the seal undone. */
export async function runSwitch<S extends string, Row>(
  db: Db,
  op: SwitchOperation<S, Row>,
  o: SequenceOptions<S>,
  defaults: { leaseMs: number; maxFreezeMs: number },
): Promise<SequenceResult<S, Row>> {
  const { kind, release, dataset, to } = op.lease;
  const leaseOptions = {
    ...op.lease,
    holder: o.holder ?? `${kind}:${hostname()}:${process.pid}`,
    leaseMs: o.leaseMs ?? defaults.leaseMs,
    maxFreezeMs: o.maxFreezeMs ?? defaults.maxFreezeMs,
    request: o.request ?? null,
  };
  const onStep = o.onStep;
  let held = await SwitchLease.recover<S>(db, leaseOptions, onStep);
  if (!held && o.recoverOnly) throw new SwitchRefusedError(kind, 'recover', `no ${kind} of ${release} to recover`);
  if (!held) {
    await op.start();
    held = await SwitchLease.start<S>(db, leaseOptions, onStep);
  }
  const lease = held;
  const undo = async (reason: string, u: UndoOptions = {}): Promise<number | null> => {
    const reopened = await withTransaction(db, async (conn) => {
      const epoch = await op.unseal(conn, `${kind} aborted: ${reason}`);
      await u.also?.(conn);
      return epoch;
    });
    await lease.finish('ABORTED', { reason, reopenedEpoch: reopened, ...u.outcome });
    return reopened;
  };
  const ctx: SwitchContext<S> = {
    lease,
    barrier: '',
    state: '',
    undo,
    deadline: () => {
      throw new Error('the freeze has not started');
    },
  };

  try {
    const now = await readNow(db, release);
    // A recovery whose predecessor's switch committed: the flip is complete; record it.
    if (now.state === op.doneState) {
      await lease.record('done' as S);
      await lease.finish('DONE', { recovered: true, note: `the ${kind}'s switch had committed before the previous holder died` });
      return { lease, done: 'recorded' };
    }
    if (lease.recovered && !op.resumable.includes(now.state)) {
      await lease.finish('ABORTED', { recovered: true, reason: `release is ${now.state}` });
      throw new SwitchRefusedError(kind, 'recovered', `${kind} #${lease.id} of ${release} was recovered with the release ${now.state}: nothing to finish`);
    }
    const sealed = op.sealedBySelf(now);
    if (o.recoverOnly && !sealed) {
      await lease.finish('ABORTED', { recovered: true, reason: 'its holder died before the seal: nothing to undo' });
      throw new SwitchRefusedError(kind, 'holder-died', `${kind} #${lease.id} of ${release}: its holder died before the seal; recorded as aborted (run ${kind} again)`);
    }

    let sealedAt: number;
    let closedEpoch: number;
    if (!sealed) {
      await op.before(ctx);
      const s = await op.seal(ctx);
      sealedAt = performance.now();
      ctx.barrier = s.barrier;
      ctx.state = op.sealedState;
      closedEpoch = s.epoch;
      await lease.record('sealed' as S, { epoch: s.epoch, barrier: s.barrier, sealed_at: new Date().toISOString() });
    } else {
      ctx.barrier = now.barrier!;
      ctx.state = now.state;
      closedEpoch = now.epoch;
      sealedAt = performance.now() - (now.sealedMsAgo ?? 0);
    }
    ctx.deadline = () => {
      const used = performance.now() - sealedAt;
      if (used > lease.maxFreezeMs) throw new FreezeExceeded(`the freeze reached ${Math.round(used)} ms, past --max-freeze ${lease.maxFreezeMs} ms`);
      return lease.maxFreezeMs - used;
    };
    ctx.deadline();
    if (sealed) await op.resumeSealed?.(ctx);
    await op.after(ctx);
    const remaining = ctx.deadline();

    // The switch, with the log up to its own snapshot applied to the generation readers move to.
    await lease.pause();
    const casStarted = performance.now();
    let commit!: Omit<SwitchCommit<Row>, 'freezeMs' | 'casMs'>;
    for (let attempt = 1; ; attempt++) {
      try {
        commit = await withTransaction(
          db,
          async (conn) => {
            const { rows: snap } = await conn.query<{ s: string }>('SELECT pg_current_snapshot()::text AS s');
            const snapshot = snap[0]!.s;
            await conn.query(`SET LOCAL statement_timeout = ${Math.max(100, Math.floor(remaining))}`);
            let row: Row;
            try {
              row = await op.compareAndSwap(conn, ctx);
            } catch (err) {
              const code = pgErrorCode(err);
              if (code === SQLSTATE.refused || code === SQLSTATE.staleLease) throw new SwitchRefused((err as Error).message);
              throw err;
            }
            const from = await op.applyFrom(conn, ctx);
            const ds = await loadDataset(conn, dataset);
            if (ds.generation !== to) throw new Error(`the ${kind}'s switch left ${ds.generation} active, not ${to}`);
            const step = await applyStep(conn, ds, { from, to: snapshot });
            if (step.poison) {
              // The event it came from, while the events are staged; recorded after the undo.
              const stop = await poisonStop(conn, ds, step.poison, { kind, release, switchId: lease.id });
              throw new SwitchRefused(`an event after ${from} is poison for ${to} (${stop.what}, at key ${JSON.stringify(stop.key)})`, 'poison', stop);
            }
            await op.dependencies(conn, ds, { from, to: snapshot });
            await moveFrontier(conn, dataset, to, from, snapshot);
            await conn.query(`UPDATE genfill.cutovers SET s_cut = $2::pg_snapshot WHERE id = $1`, [lease.id, snapshot]);
            return { row, snapshot, applied: step.counts };
          },
          'REPEATABLE READ',
        );
        break;
      } catch (err) {
        const code = pgErrorCode(err);
        if (code === SQLSTATE.serializationFailure && attempt < 3) continue;
        // A wait inside the switch past the session's lock_timeout or the freeze left
        // (statement_timeout): nothing switched; a named refusal, and the seal is undone.
        if (code === SQLSTATE.lockNotAvailable || code === SQLSTATE.queryCanceled) {
          throw new SwitchRefused(
            `the switch transaction waited past ${code === SQLSTATE.queryCanceled ? `the freeze's remaining ${Math.round(remaining)} ms` : 'its lock timeout'} ` +
              `(${(err as Error).message}): nothing switched; a session holding a row of genfill.datasets, genfill.releases or genfill.cutovers ` +
              `(see pg_stat_activity) delayed it — run ${kind} again`,
          );
        }
        throw err;
      }
    }
    const casMs = since(casStarted);
    const freezeMs = since(sealedAt);
    lease.resume();
    await lease.record('switched' as S);
    await o.onStep?.('done' as S);
    return { lease, done: 'switched', barrier: ctx.barrier, closedEpoch, commit: { ...commit, freezeMs, casMs } };
  } catch (err) {
    // Already undone by the phase that threw it (or nothing to undo), or another holder's now.
    if (err instanceof LeaseLost || err instanceof SwitchRefusedError || err instanceof ReconciliationRequiredError) throw err;
    // Anything else before the switch committed (nothing switched: its transaction rolled
    // back): undo the seal while this holder is alive.
    const known = err instanceof SwitchRefused;
    const reason = known ? (err as Error).message : `${(err as Error).message} (an error, not a precondition)`;
    // A dependency that changed is flagged with the undo (its releases move once APPROVED again).
    const stale = known ? (err as SwitchRefused).stale : undefined;
    const epoch = await undo(reason, stale ? { also: (conn) => markDependencyStale(conn, dataset, stale).then(() => undefined), outcome: { dependencies: stale } } : {}).catch((e: Error) => {
      throw new SwitchRefusedError(kind, 'undo', `${kind} of ${release} failed (${reason}) and undoing the seal failed too: ${e.message}; run \`genfill unseal ${release}\``);
    });
    if (!known) throw err;
    const refused = err as SwitchRefused;
    // A poison key, recorded now that the switch's transaction rolled back and ingress reopened,
    // so genfill.quarantine_key takes it (migration 0029).
    const advice = refused.stop ? `: ${stopAdvice(refused.stop, await recordStop(db, refused.stop), kind)}` : '';
    if (stale) throw new DependencyChangedError(kind, stale, `${kind} refused: ${reason}; ${dataset} is DEPENDENCY_STALE; ${op.reopened(epoch)}`);
    throw new SwitchRefusedError(kind, refused.check, `${kind} refused: ${reason}${advice}; ${op.reopened(epoch)}`);
  } finally {
    await lease.close();
  }
}
