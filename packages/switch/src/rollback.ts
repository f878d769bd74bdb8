// `genfill rollback <release>` (SPEC invariant 13): readers go back to the generation the
// release replaced, and nothing written since the cutover is lost — the switch sequence
// (sequence.ts), as a cutover runs it, with:
//   start  — genfill.rollback_refusal names why it may not (a retired old generation, …);
//   before — unsealed replay rounds: the events after the old generation's frontier (B, where
//            the cutover sealed it) up to the active generation's committed frontier are applied
//            to the RETAINED old generation through its own transform map — the apply step every
//            projector batch runs — and its own frontier moves; rounds repeat until one has
//            little left, so the freeze covers only the tail;
//   seal   — epoch E+1 at B′ (genfill.rollback_seal): the projector of the new generation stops;
//   switch — genfill.rollback_switch compares (the release ACTIVE, the old generation still
//            RETAINED, no open release built on the new one, the epoch sealed by this rollback at
//            B′), switches the pointer back and opens E+2 on the old generation; the same
//            transaction applies the rest of the log to the old generation.
// A refusal or a freeze past `maxFreezeMs` reopens ingress on the new generation under a new
// epoch; the release stays ACTIVE. Roll forward again = a new release expecting the old
// generation (docs/projector.md).
import { setTimeout as sleep } from 'node:timers/promises';
import { errorFromPg, NotFoundError, pgErrorCode, RefusedError, SQLSTATE, SwitchRefusedError } from '@genfill/contracts';
import { applyStep, loadDataset, type ApplyCounts } from '@genfill/projector';
import { withTransaction, type Db } from '@genfill/registry';
import { moveFrontier, runSwitch, type SequenceOptions, since, SwitchRefused, type SwitchOperation } from './sequence.ts';
import { checkDependencies } from './dependencies.ts';
import { poisonStop } from './stops.ts';
import type { SwitchStepTime } from './switch-lease.ts';

export const ROLLBACK_DEFAULTS = { maxFreezeMs: 30_000, leaseMs: 10_000, tailEvents: 2_000, maxRounds: 20 } as const;

export type RollbackStep = 'replayed' | 'sealed' | 'switched' | 'done';

export interface RollbackOptions extends SequenceOptions<RollbackStep> {
  /** Replay rounds stop once one applies at most this many events (the rest is the tail). */
  tailEvents?: number;
  maxRounds?: number;
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

/** One unsealed replay round into the old generation: (its frontier, the active generation's committed frontier]. */
async function replayRound(db: Db, release: string, rollback: string, dataset: string, generation: string): Promise<ApplyCounts & { ms: number }> {
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
      const ds = await loadDataset(conn, dataset, { generation });
      const step = await applyStep(conn, ds, { from: f, to: s });
      if (step.poison) {
        // The event it came from, while the events are staged; the sequence records it after the undo.
        const stop = await poisonStop(conn, ds, step.poison, { kind: 'rollback', release, switchId: rollback });
        throw new SwitchRefused(`an event after ${f} is poison for ${generation} (${stop.what}, at key ${JSON.stringify(stop.key)})`, 'poison', stop);
      }
      // Replayed events are applied events: a dependency's flags the dataset (issue 29).
      await checkDependencies(conn, ds, { from: f, to: s }, 'flag');
      await moveFrontier(conn, dataset, generation, f, s);
      return { ...step.counts, ms: since(started) };
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
      // The seal lock not granted within its second (GFK01, genfill.take_lock): try again.
      const code = pgErrorCode(err);
      if ((code === SQLSTATE.lockWaitTimeout || code === SQLSTATE.lockNotAvailable) && attempt < 5) {
        await sleep(backoff);
        backoff *= 2;
        continue;
      }
      throw errorFromPg(err, { release });
    }
  }
}

interface SwitchRow {
  closed_epoch: string;
  opened_epoch: string;
  reactivated: string | null;
}

interface Rel {
  dataset: string;
  generation: string;
  state: string;
  old: string | null;
  why: string | null;
}

/** The rollback's phases of the switch sequence; `result` collects the replay. */
function rollbackOperation(db: Db, release: string, r: Rel, result: RollbackResult, opts: RollbackOptions): SwitchOperation<RollbackStep, SwitchRow> {
  const old = r.old ?? '';
  return {
    lease: { kind: 'rollback', release, dataset: r.dataset, from: r.generation, to: old },
    doneState: 'ROLLED_BACK',
    sealedState: 'ACTIVE',
    resumable: ['ACTIVE'],
    sealedBySelf: (now) => now.ingressState === 'SEALED' && now.epochRelease === release && now.sealedFrom === 'ACTIVE',
    async start() {
      if (r.why) throw new SwitchRefusedError('rollback', 'rollback-refusal', `rollback refused: ${r.why}`);
    },
    async before(ctx) {
      // Replay, unsealed: readers of the new generation are not held up by any of it.
      const t = performance.now();
      const tail = opts.tailEvents ?? ROLLBACK_DEFAULTS.tailEvents;
      for (let i = 0; i < (opts.maxRounds ?? ROLLBACK_DEFAULTS.maxRounds); i++) {
        const round = await replayRound(db, release, ctx.lease.id, r.dataset, old);
        result.replay.rounds += 1;
        result.replay.events += round.events;
        result.replay.upserted += round.upserted;
        result.replay.tombstones += round.flagged + round.remembered;
        result.replay.noops += round.noops;
        if (round.events <= tail) break;
      }
      result.replay.ms = since(t);
      await ctx.lease.record('replayed', { outcome: JSON.stringify({ replay: result.replay }) });
    },
    seal: async () => seal(db, release),
    async after() {},
    async compareAndSwap(conn, ctx) {
      const { rows } = await conn.query<SwitchRow>('SELECT * FROM genfill.rollback_switch($1, $2, $3, $4::pg_snapshot)', [release, ctx.lease.id, ctx.lease.holder, ctx.barrier]);
      return rows[0]!;
    },
    async applyFrom(conn) {
      const { rows } = await conn.query<{ f: string }>('SELECT snapshot::text AS f FROM genfill.frontiers WHERE dataset = $1 AND generation = $2', [r.dataset, old]);
      return rows[0]!.f;
    },
    // The rest of the log over (F, S_rb], applied with the switch: a dependency's event flags
    // the dataset with it (a rollback is not refused for one).
    dependencies: async (conn, ds, range) => {
      await checkDependencies(conn, ds, range, 'flag');
    },
    async unseal(conn, reason) {
      const { rows } = await conn.query<{ e: string | null }>('SELECT genfill.rollback_unseal($1, $2)::text AS e', [release, reason]);
      return rows[0]!.e === null ? null : Number(rows[0]!.e);
    },
    reopened: (epoch) => `${epoch ? `ingress reopened on ${r.generation} under epoch ${epoch}, ` : ''}${release} is still ACTIVE`,
  };
}

export async function rollbackRelease(db: Db, release: string, opts: RollbackOptions = {}): Promise<RollbackResult> {
  const started = performance.now();
  const { rows: rel } = await db.query<Rel>(
    `SELECT r.dataset, r.generation, r.state, genfill.rollback_refusal(r.id) AS why,
            (SELECT c.from_generation FROM genfill.cutovers c WHERE c.release = r.id AND c.kind = 'cutover' AND c.state = 'DONE' ORDER BY c.id DESC LIMIT 1) AS old
       FROM genfill.releases r WHERE r.id = $1`,
    [release],
  );
  const r = rel[0];
  if (!r) throw new NotFoundError(`release ${release} does not exist`);
  const result: RollbackResult = {
    release,
    dataset: r.dataset,
    ok: false,
    rollback: '',
    from: r.generation,
    to: r.old ?? '',
    replay: { rounds: 0, events: 0, upserted: 0, tombstones: 0, noops: 0, ms: 0 },
    steps: [],
    recovered: false,
  };
  const out = await runSwitch(db, rollbackOperation(db, release, r, result, opts), opts, ROLLBACK_DEFAULTS);
  Object.assign(result, { rollback: out.lease.id, steps: out.lease.steps, recovered: out.lease.recovered });
  if (out.done === 'recorded') return { ...result, ok: true };
  const { row, freezeMs, casMs, applied } = out.commit;
  Object.assign(result, {
    ok: true,
    barrier: out.barrier,
    sRollback: out.commit.snapshot,
    openedEpoch: Number(row.opened_epoch),
    closedEpoch: Number(row.closed_epoch),
    reactivated: row.reactivated,
    appliedAtSwitch: applied,
    freezeMs,
    casMs,
    totalMs: since(started),
  });
  await out.lease.finish('DONE', { freezeMs, casMs, replay: result.replay, appliedAtSwitch: applied }, { freeze_ms: freezeMs, cas_ms: casMs });
  return result;
}
