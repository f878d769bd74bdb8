// `genfill rollback <release>` (SPEC invariant 13): readers go back to the generation the
// release replaced, and nothing written since the cutover is lost. Under the same lease as a
// cutover (switch-lease.ts, kind rollback):
//   1. unsealed replay rounds: the events after the old generation's frontier (B, where the
//      cutover sealed it) up to the active generation's committed frontier are applied to the
//      RETAINED old generation through its own transform map — version-aware, by each row's
//      time, the statement every projector batch runs — and its own frontier moves; rounds
//      repeat until one has little left, so the freeze covers only the tail;
//   2. the seal of epoch E+1 at B′ (genfill.rollback_seal): the projector of the new
//      generation stops at B′;
//   3. ONE REPEATABLE READ transaction: genfill.rollback_switch compares (the release ACTIVE,
//      the old generation still RETAINED, no open release built on the new one, the epoch sealed
//      by this rollback at B′), switches the pointer back and opens E+2 on the old generation;
//      the same transaction applies the rest of the log — up to its own snapshot — to the old
//      generation and moves its frontier there. The freeze ends at that commit.
// A refusal or a freeze past `maxFreezeMs` reopens ingress on the new generation under a new
// epoch; the release stays ACTIVE. Roll forward again = a new release expecting the old
// generation (docs/projector.md).
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { RefusedError } from '@genfill/contracts';
import { verbError, withTransaction, type Conn, type Db } from '@genfill/registry';
import { loadDataset, applyStatement, countsOf, CREATE_EVENTS_TABLE, stageStatement, type ApplyCounts, type ApplyRow } from '@genfill/projector';
import { LeaseLost, SwitchLease, type SwitchStepTime } from './switch-lease.ts';

export const ROLLBACK_DEFAULTS = { maxFreezeMs: 30_000, leaseMs: 10_000, tailEvents: 2_000, maxRounds: 20 } as const;

export type RollbackStep = 'replayed' | 'sealed' | 'switched' | 'done';

export interface RollbackOptions {
  maxFreezeMs?: number;
  holder?: string;
  leaseMs?: number;
  request?: string | null;
  /** Replay rounds stop once one applies at most this many events (the rest is the tail). */
  tailEvents?: number;
  maxRounds?: number;
  recoverOnly?: boolean;
  onStep?: (step: RollbackStep) => void | Promise<void>;
}

export interface RollbackResult {
  release: string;
  dataset: string;
  ok: boolean;
  rollback: string;
  /** The generation readers leave, and the one they go back to. */
  from: string;
  to: string;
  closedEpoch?: number;
  openedEpoch?: number;
  barrier?: string;
  sRollback?: string;
  reactivated?: string | null;
  replay: { rounds: number; events: number; upserted: number; tombstones: number; noops: number; ms: number };
  appliedAtSwitch?: ApplyCounts;
  freezeMs?: number;
  casMs?: number;
  totalMs?: number;
  steps: SwitchStepTime<RollbackStep>[];
  recovered: boolean;
}

class SwitchRefused extends Error {}

class FreezeExceeded extends Error {}

const since = (t: number) => Math.round((performance.now() - t) * 10) / 10;

/** Stage and apply (from, to] of the log to `generation` through its own transform map; refuses poison. */
async function applyRange(conn: Conn, dataset: string, generation: string, range: { from: string; to: string }): Promise<ApplyCounts> {
  const ds = await loadDataset(conn, dataset, { generation });
  await conn.query(CREATE_EVENTS_TABLE);
  const stage = stageStatement(ds, range);
  await conn.query(stage.text, stage.values);
  const q = applyStatement(ds);
  const row = (await conn.query<ApplyRow>(q.text, q.values)).rows[0]!;
  if (row.fanout || row.stray) {
    throw new SwitchRefused(
      `an event is poison for ${generation} (${row.fanout ? 'fan-out' : 'changed key'} at ${JSON.stringify((row.fanout ?? row.stray)![0])}): quarantine the key or fix the transform, then roll back again`,
    );
  }
  return countsOf(row);
}

/** Move the frontier of `generation` from `from` to `to`, fenced on `from`. */
async function moveFrontier(conn: Conn, dataset: string, generation: string, from: string, to: string): Promise<void> {
  const moved = await conn.query(
    `UPDATE genfill.frontiers SET snapshot = $4::pg_snapshot, updated_at = clock_timestamp() WHERE dataset = $1 AND generation = $2 AND snapshot::text = $3`,
    [dataset, generation, from, to],
  );
  if (moved.rowCount !== 1) throw new Error(`the frontier of ${dataset}/${generation} moved under the rollback (another holder?)`);
}

/** One unsealed replay round into the old generation: (its frontier, the active generation's committed frontier]. */
async function replayRound(db: Db, dataset: string, generation: string): Promise<ApplyCounts & { ms: number }> {
  const started = performance.now();
  return withTransaction(
    db,
    async (conn) => {
      const { rows } = await conn.query<{ f: string | null; s: string | null }>(
        `SELECT (SELECT snapshot::text FROM genfill.frontiers WHERE dataset = $1 AND generation = $2) AS f,
                (SELECT f.snapshot::text FROM genfill.datasets d JOIN genfill.frontiers f ON f.dataset = d.name AND f.generation = d.active_generation WHERE d.name = $1) AS s`,
        [dataset, generation],
      );
      const { f, s } = rows[0]!;
      if (!f || !s) throw new RefusedError(`${dataset} has no frontier for ${f ? 'its active generation' : generation}: nothing to replay from`);
      const counts = await applyRange(conn, dataset, generation, { from: f, to: s });
      await moveFrontier(conn, dataset, generation, f, s);
      return { ...counts, ms: since(started) };
    },
    'REPEATABLE READ',
  );
}

/** The rollback's seal, retried with backoff while the seal lock is not granted within its timeout. */
async function seal(db: Db, release: string): Promise<{ epoch: number; barrier: string }> {
  let backoff = 100;
  for (let attempt = 1; ; attempt++) {
    try {
      return await withTransaction(db, async (conn) => {
        const { rows } = await conn.query<{ epoch: string; barrier: string }>('SELECT epoch::text, barrier FROM genfill.rollback_seal($1, $2)', [release, 1000]);
        return { epoch: Number(rows[0]!.epoch), barrier: rows[0]!.barrier };
      });
    } catch (err) {
      if ((err as { code?: string }).code === '55P03' && attempt < 5) {
        await sleep(backoff);
        backoff *= 2;
        continue;
      }
      throw verbError(err, { release });
    }
  }
}

export async function rollbackRelease(db: Db, release: string, opts: RollbackOptions = {}): Promise<RollbackResult> {
  const started = performance.now();
  const o = {
    maxFreezeMs: opts.maxFreezeMs ?? ROLLBACK_DEFAULTS.maxFreezeMs,
    holder: opts.holder ?? `rollback:${hostname()}:${process.pid}`,
    leaseMs: opts.leaseMs ?? ROLLBACK_DEFAULTS.leaseMs,
    request: opts.request ?? null,
  };
  const { rows: rel } = await db.query<{ dataset: string; generation: string; state: string; old: string | null; why: string | null }>(
    `SELECT r.dataset, r.generation, r.state, genfill.rollback_refusal(r.id) AS why,
            (SELECT c.from_generation FROM genfill.cutovers c WHERE c.release = r.id AND c.kind = 'cutover' AND c.state = 'DONE' ORDER BY c.id DESC LIMIT 1) AS old
       FROM genfill.releases r WHERE r.id = $1`,
    [release],
  );
  const r = rel[0];
  if (!r) throw new RefusedError(`release ${release} does not exist`);
  const lease = { kind: 'rollback' as const, release, dataset: r.dataset, from: r.generation, to: r.old ?? '', ...o };
  let held = await SwitchLease.recover<RollbackStep>(db, lease, opts.onStep);
  if (!held && opts.recoverOnly) throw new RefusedError(`no rollback of ${release} to recover`);
  if (!held) {
    if (r.why) throw new RefusedError(`rollback refused: ${r.why}`);
    held = await SwitchLease.start<RollbackStep>(db, lease, opts.onStep);
  }
  const h = held;
  const old = r.old!;
  const result: RollbackResult = {
    release,
    dataset: r.dataset,
    ok: false,
    rollback: h.id,
    from: r.generation,
    to: old,
    replay: { rounds: 0, events: 0, upserted: 0, tombstones: 0, noops: 0, ms: 0 },
    steps: h.steps,
    recovered: h.recovered,
  };
  const undo = async (reason: string): Promise<number | null> => {
    const epoch = await withTransaction(db, async (conn) => {
      const { rows } = await conn.query<{ e: string | null }>('SELECT genfill.rollback_unseal($1, $2)::text AS e', [release, `rollback aborted: ${reason}`]);
      return rows[0]!.e === null ? null : Number(rows[0]!.e);
    });
    await h.finish('ABORTED', { reason, reopenedEpoch: epoch });
    return epoch;
  };

  let sealedAt: number;
  try {
    const { rows: now } = await db.query<{ state: string; sealed: boolean; barrier: string | null; epoch: string; waited_ms: number }>(
      `SELECT r.state, d.ingress_state = 'SEALED' AND e.release = r.id AND e.sealed_from = 'ACTIVE' AS sealed, e.barrier::text, e.epoch::text,
              extract(epoch FROM clock_timestamp() - e.sealed_at) * 1000 AS waited_ms
         FROM genfill.releases r JOIN genfill.datasets d ON d.name = r.dataset
         LEFT JOIN genfill.epochs e ON e.dataset = d.name AND e.epoch = d.ingress_epoch
        WHERE r.id = $1`,
      [release],
    );
    const cur = now[0]!;
    if (cur.state === 'ROLLED_BACK') {
      await h.record('done');
      await h.finish('DONE', { recovered: true, note: 'the switch back had committed before the previous holder died' });
      return { ...result, ok: true };
    }
    if (opts.recoverOnly && !cur.sealed) {
      await h.finish('ABORTED', { recovered: true, reason: 'its holder died before the seal: nothing to undo' });
      throw new RefusedError(`rollback #${h.id} of ${release}: its holder died before the seal; recorded as aborted (run rollback again)`);
    }
    if (!cur.sealed) {
      // 1. Replay, unsealed: readers of the new generation are not held up by any of it.
      const t = performance.now();
      const tail = opts.tailEvents ?? ROLLBACK_DEFAULTS.tailEvents;
      for (let i = 0; i < (opts.maxRounds ?? ROLLBACK_DEFAULTS.maxRounds); i++) {
        const round = await replayRound(db, r.dataset, old);
        result.replay.rounds += 1;
        result.replay.events += round.events;
        result.replay.upserted += round.upserted;
        result.replay.tombstones += round.flagged + round.remembered;
        result.replay.noops += round.noops;
        if (round.events <= tail) break;
      }
      result.replay.ms = since(t);
      await h.record('replayed', { outcome: JSON.stringify({ replay: result.replay }) });
      // 2. The seal at B′.
      const s = await seal(db, release);
      sealedAt = performance.now();
      result.barrier = s.barrier;
      result.closedEpoch = s.epoch;
      await h.record('sealed', { epoch: s.epoch, barrier: s.barrier, sealed_at: new Date().toISOString() });
    } else {
      result.barrier = cur.barrier!;
      result.closedEpoch = Number(cur.epoch);
      sealedAt = performance.now() - Number(cur.waited_ms);
    }
    const remaining = h.maxFreezeMs - (performance.now() - sealedAt);
    if (remaining <= 0) throw new FreezeExceeded(`the freeze reached ${Math.round(performance.now() - sealedAt)} ms, past --max-freeze ${h.maxFreezeMs} ms`);

    // 3. The switch back, with the rest of the log applied to the old generation in it.
    await h.pause();
    const casStarted = performance.now();
    let sw!: { closed_epoch: string; opened_epoch: string; reactivated: string | null };
    let sRb = '';
    let applied!: ApplyCounts;
    for (let attempt = 1; ; attempt++) {
      try {
        await withTransaction(
          db,
          async (conn) => {
            const { rows: snap } = await conn.query<{ s: string; f: string }>(
              `SELECT pg_current_snapshot()::text AS s, (SELECT snapshot::text FROM genfill.frontiers WHERE dataset = $1 AND generation = $2) AS f`,
              [r.dataset, old],
            );
            sRb = snap[0]!.s;
            await conn.query(`SET LOCAL statement_timeout = ${Math.max(100, Math.floor(remaining))}`);
            try {
              sw = (await conn.query<typeof sw>('SELECT * FROM genfill.rollback_switch($1, $2, $3, $4::pg_snapshot)', [release, h.id, h.holder, result.barrier])).rows[0]!;
            } catch (err) {
              const e = err as { code?: string; message: string };
              if (e.code === 'GFR01' || e.code === 'GFS01') throw new SwitchRefused(e.message);
              throw err;
            }
            applied = await applyRange(conn, r.dataset, old, { from: snap[0]!.f, to: sRb });
            await moveFrontier(conn, r.dataset, old, snap[0]!.f, sRb);
            await conn.query(`UPDATE genfill.cutovers SET s_cut = $2::pg_snapshot WHERE id = $1`, [h.id, sRb]);
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
    const freezeMs = since(sealedAt);
    h.resume();
    Object.assign(result, {
      ok: true,
      sRollback: sRb,
      openedEpoch: Number(sw.opened_epoch),
      closedEpoch: Number(sw.closed_epoch),
      reactivated: sw.reactivated,
      appliedAtSwitch: applied,
      freezeMs,
      casMs,
      totalMs: since(started),
    });
    await h.record('switched');
    await h.finish('DONE', { freezeMs, casMs, replay: result.replay, appliedAtSwitch: applied }, { freeze_ms: freezeMs, cas_ms: casMs });
    return result;
  } catch (err) {
    if (err instanceof LeaseLost || (err instanceof RefusedError && /^rollback #/.test(err.message))) throw err;
    // Nothing switched (the switch transaction rolled back, or never ran): reopen ingress on the
    // new generation if this rollback sealed it.
    const reason = err instanceof SwitchRefused || err instanceof FreezeExceeded ? err.message : `${(err as Error).message} (an error, not a precondition)`;
    const epoch = await undo(reason).catch((e: Error) => {
      throw new RefusedError(`rollback of ${release} failed (${reason}) and reopening ingress failed too: ${e.message}`);
    });
    if (err instanceof SwitchRefused || err instanceof FreezeExceeded) {
      throw new RefusedError(`rollback refused: ${reason}${epoch ? `; ingress reopened on ${r.generation} under epoch ${epoch}` : ''}, ${release} is still ACTIVE`);
    }
    throw err;
  } finally {
    await h.close();
  }
}
