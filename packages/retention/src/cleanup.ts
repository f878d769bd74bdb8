// Cleanup after verify (seed 004, step 10; issue 18 part 4), one step of the reconciler
// service's round. A release past its rollback window — RETIRED (its generation went after the
// window), or ROLLED_BACK / CANCELLED with that time plus its rollbackWindow passed
// (genfill.releases_due_for_cleanup, migration 0018) — loses what only dispatched or
// coordinated its work: its BullMQ queue with every job (@genfill/queue's removeReleaseDispatch),
// any Redis key left under its names (the throttle's leader key), and its throttle fencing row.
// Its receipts, reconciliations, rounds, decisions and logs stay: they are the evidence.
// Redis first, then genfill.record_release_cleanup logs it once; a round that dies between
// the two repeats the Redis half (a no-op by then). Without Redis nothing is recorded, so the
// next round with Redis does it.
import type { Logger } from '@genfill/observability';
import { type Dispatcher, redisAnswers, removeReleaseDispatch } from '@genfill/queue';
import type { Db } from '@genfill/registry';

export interface CleanupCandidate {
  release: string;
  state: string;
  since: string;
  windowEnd: string | null;
}

export async function releasesDueForCleanup(db: Pick<Db, 'query'>): Promise<CleanupCandidate[]> {
  const { rows } = await db.query<CleanupCandidate>(
    `SELECT release, state, to_json(since) #>> '{}' AS since, to_json(window_end) #>> '{}' AS "windowEnd" FROM genfill.releases_due_for_cleanup()`,
  );
  return rows;
}

export interface CleanupResult {
  cleaned: { release: string; state: string; queue: string; jobs: number; keys: number }[];
  failed: { release: string; error: string }[];
  /** Why nothing was cleaned (no Redis), or null. */
  skipped: string | null;
}

/** One cleanup round: every release due, Redis half then the registry half. */
export async function cleanupRound(db: Db, log: Logger, dispatcher: Dispatcher | null): Promise<CleanupResult> {
  const out: CleanupResult = { cleaned: [], failed: [], skipped: null };
  const due = await releasesDueForCleanup(db);
  if (due.length === 0) return out;
  // BullMQ waits for a connection without a limit: ask first.
  if (!dispatcher || !(await redisAnswers(dispatcher.redis, 3000))) {
    out.skipped = `Redis is not answering: ${due.length} release(s) past their rollback window keep their queues until a round with Redis`;
    log.warn({ releases: due.map((d) => d.release) }, out.skipped);
    return out;
  }
  for (const d of due) {
    try {
      const redis = await removeReleaseDispatch(dispatcher, d.release);
      const { rows } = await db.query<{ recorded: boolean }>('SELECT genfill.record_release_cleanup($1, $2) AS recorded', [
        d.release,
        JSON.stringify({ queue: redis.queue, jobs: redis.jobs, redisKeys: redis.keys, state: d.state, windowEnd: d.windowEnd }),
      ]);
      if (rows[0]!.recorded) {
        out.cleaned.push({ release: d.release, state: d.state, ...redis });
        log.info({ release: d.release, state: d.state, ...redis }, 'release cleaned up: queue and Redis keys removed, receipts kept');
      }
    } catch (err) {
      out.failed.push({ release: d.release, error: (err as Error).message });
      log.warn({ release: d.release, err: (err as Error).message }, 'release cleanup failed; the next round tries again');
    }
  }
  return out;
}
