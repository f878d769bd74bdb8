// What the switch adds to the projector service (apps/projector wires it in as a
// ProjectorExtension): the seal, unseal, catch-up, cutover and rollback requests people submit,
// the recovery of a cutover or rollback whose holder died outside a request, and the catch-up
// rounds that keep built candidates near the live frontier (and take the sealed one to its
// barrier).
import type { Logger } from '@genfill/observability';
import type { ProjectorExtension } from '@genfill/projector';
import type { Db, ServiceHandlers } from '@genfill/registry';
import { catchupCandidates, catchupRound } from './catchup.ts';
import { cutoverRelease } from './cutover.ts';
import { rollbackRelease } from './rollback.ts';
import { sealRelease, unsealRelease } from './seal.ts';

export interface SwitchServiceOptions {
  /**
   * Called after each step a cutover or rollback records (sealed, switched, …). Tests inject a
   * hook that SIGKILLs the process at one step, to prove the next holder finishes or undoes it.
   */
  onStep?: (step: string) => void;
}

/** The seal, unseal, catch-up, cutover and rollback requests the projector service executes for a person. */
export function switchRequestHandlers(o: { holder?: string; leaseMs?: number } & SwitchServiceOptions = {}): ServiceHandlers<'projector'> {
  return {
    rollback: async (db, req) => {
      const r = await rollbackRelease(db, req.release, {
        ...(req.args.maxFreezeMs ? { maxFreezeMs: req.args.maxFreezeMs } : {}),
        request: req.id,
        ...(o.holder ? { holder: `${o.holder}:request-${req.id}` } : {}),
        ...(o.leaseMs ? { leaseMs: o.leaseMs } : {}),
        onStep: o.onStep,
      });
      return { result: r };
    },
    cutover: async (db, req) => {
      const r = await cutoverRelease(db, req.release, {
        dryRun: req.args.dryRun === true,
        ...(req.args.maxFreezeMs ? { maxFreezeMs: req.args.maxFreezeMs } : {}),
        request: req.id,
        ...(o.holder ? { holder: `${o.holder}:request-${req.id}` } : {}),
        ...(o.leaseMs ? { leaseMs: o.leaseMs } : {}),
        onStep: o.onStep,
      });
      return { result: r, exitCode: r.ok ? 0 : 3 };
    },
    seal: async (db, req) => ({ result: await sealRelease(db, req.release, req.args.waitMs ? { waitForProjectorMs: req.args.waitMs } : {}) }),
    unseal: async (db, req) => ({ result: await unsealRelease(db, req.release, req.args.reason) }),
    catchup: async (db, req) => ({ result: await catchupRound(db, req.release) }),
  };
}

/**
 * Cutovers left RUNNING by a holder that died outside a request (a service login ran it in its
 * own process): once their lease has run out, finish or undo them here. A cutover run for a
 * request is recovered by whoever takes the request again.
 */
export async function recoverCutovers(db: Db, o: { holder: string; leaseMs: number; log: Logger } & SwitchServiceOptions): Promise<number> {
  const { rows } = await db.query<{ release: string; id: string; kind: string }>(
    `SELECT c.release, c.id::text, c.kind FROM genfill.cutovers c LEFT JOIN genfill.requests q ON q.id = c.request
      WHERE c.state = 'RUNNING' AND c.lease_expires_at < clock_timestamp() AND (q.id IS NULL OR q.state IN ('DONE', 'FAILED'))
      ORDER BY c.id`,
  );
  for (const c of rows) {
    try {
      const how = { holder: `${o.holder}:recovery`, leaseMs: o.leaseMs, recoverOnly: true, onStep: o.onStep };
      const r = c.kind === 'rollback' ? await rollbackRelease(db, c.release, how) : await cutoverRelease(db, c.release, how);
      o.log.warn({ release: c.release, kind: c.kind, record: c.id, freezeMs: r.freezeMs }, `recovered a ${c.kind} whose holder died: finished`);
    } catch (err) {
      o.log.warn({ err, release: c.release, kind: c.kind, record: c.id }, `recovered a ${c.kind} whose holder died: undone or refused`);
    }
  }
  return rows.length;
}

/** One catch-up round for every built candidate behind the live frontier (or, sealed, its barrier). */
export async function catchupCandidatesRound(db: Db, o: { log: Logger; datasets?: string[] }): Promise<void> {
  for (const c of await catchupCandidates(db, o.datasets)) {
    if (!c.behind) continue;
    try {
      const r = await catchupRound(db, c.release);
      if (r.events > 0 || r.caughtUp) o.log.info({ release: c.release, round: r.id, events: r.events, upserted: r.upserted, tombstones: r.tombstones, noops: r.noops, caughtUp: r.caughtUp }, 'catch-up round');
    } catch (err) {
      o.log.warn({ err, release: c.release }, 'catch-up round failed; the next round tries again');
    }
  }
}

/** The switch's part of the projector service: its requests, then each round recovery and catch-up. */
export function switchExtension(o: SwitchServiceOptions = {}): ProjectorExtension {
  return ({ holder, leaseMs, log, datasets }) => ({
    handlers: switchRequestHandlers({ holder, leaseMs, onStep: o.onStep }),
    round: async (db) => {
      await recoverCutovers(db, { holder, leaseMs, log, onStep: o.onStep });
      await catchupCandidatesRound(db, { log, datasets });
    },
  });
}
