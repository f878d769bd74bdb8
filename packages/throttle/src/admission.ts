// A worker's share of the fleet's admission rate, metered by a local bottleneck limiter as a
// token bucket of rows: a partition pays its estimated rows before it is claimed, so a big
// partition waits longer than a small one and the fleet stays near the controller's rows/s.
// Local mode only: bottleneck's Redis clustering loses its state on Redis 7 once keys are
// lost, and the share is recomputed from the registry every quarter second anyway.
import { setTimeout as sleep } from 'node:timers/promises';
import Bottleneck from 'bottleneck';
import type { Db } from '@genfill/registry';
import { latestDecision } from './decisions.ts';

/**
 * How often a worker re-reads the latest decision (one indexed row). A quarter second, not a
 * second: the share a worker meters lagged each decision by up to a second, which was most of
 * what an idle throttled build lost to `--no-throttle` while the controller ramped to its cap.
 */
const REFRESH_MS = 250;
/** The bucket refills in steps this often; it holds at most one second of the share. */
const STEP_MS = 100;
/**
 * How often bottleneck's timer looks at the bucket. Bottleneck adds the refill step on this
 * heartbeat (default 250 ms), at most once per beat: with the default a 100 ms step landed
 * every 250–300 ms and a worker got about 40% of its share (measured). A beat well under the
 * step keeps the refill within 20% of the step.
 */
const HEARTBEAT_MS = 20;

export async function partitionEstimate(db: Db, release: string, partition: string): Promise<number> {
  const { rows } = await db.query<{ n: string | null }>(
    `SELECT est_rows::text AS n FROM genfill.partitions WHERE release = $1 AND id = $2`,
    [release, partition],
  );
  return Math.max(0, Number(rows[0]?.n ?? 0));
}

/** A token bucket of rows refilled at `share` rows/s, holding at most one second of it. */
export function shareBucket(share: number): Bottleneck {
  const step = Math.max(1, Math.floor((share * STEP_MS) / 1000));
  // heartbeatInterval is a real option of bottleneck's local store, missing from its typings.
  const opts = { reservoir: step, reservoirIncreaseInterval: STEP_MS, reservoirIncreaseAmount: step, reservoirIncreaseMaximum: share, heartbeatInterval: HEARTBEAT_MS };
  return new Bottleneck(opts as Bottleneck.ConstructorOptions);
}

interface Meter {
  limiter: Bottleneck;
  /** Rows per second this worker may start; null before the controller's first decision. */
  share: number | null;
  /** Partitions this worker should run at once: its part of the queue's global concurrency. */
  slots: number | null;
  checkedAt: number;
}

/**
 * A worker's part of the fleet's concurrency: ceil(concurrency ÷ live workers). The share is
 * per worker, so the slots must be spread too — BullMQ would happily put both of a fleet's two
 * slots on one worker, whose one share then pays for two partitions while the other worker's
 * share goes unused (measured: the fleet built half the decided rate).
 */
export function workerSlots(concurrency: number, liveWorkers: number): number {
  return Math.max(1, Math.ceil(concurrency / Math.max(1, liveWorkers)));
}

export class Admission {
  readonly #meters = new Map<string, Meter>();
  #closed = false;
  constructor(private readonly db: Db) {}

  #meter(release: string): Meter {
    let m = this.#meters.get(release);
    if (!m) {
      m = { limiter: new Bottleneck({ maxConcurrent: null }), share: null, slots: null, checkedAt: 0 };
      this.#meters.set(release, m);
    }
    return m;
  }

  /**
   * Follow the latest decision's per-worker share. A changed share gets a new bucket: the old
   * limiter is stopped, which rejects its waiting instalments, and their callers pay again
   * from the new one — an instalment sized for a larger share would otherwise never fit.
   */
  async #refresh(release: string, m: Meter): Promise<void> {
    if (Date.now() - m.checkedAt < REFRESH_MS) return;
    m.checkedAt = Date.now();
    const d = await latestDecision(this.db, release);
    const share = d ? Math.max(1, Math.floor(d.workerRowsPerSecond)) : null;
    m.slots = d ? workerSlots(d.concurrency, d.liveWorkers) : null;
    if (share === m.share) return;
    m.share = share;
    const old = m.limiter;
    m.limiter = share === null ? new Bottleneck({ maxConcurrent: null }) : shareBucket(share);
    void old.stop({ dropWaitingJobs: true }).catch(() => undefined);
  }

  /** How many partitions of `release` this worker should run at once; null before any decision. */
  async slots(release: string): Promise<number | null> {
    const m = this.#meter(release);
    await this.#refresh(release, m);
    return m.slots;
  }

  /** The current share of `release` (rows/s), or null when unmetered. */
  share(release: string): number | null {
    return this.#meters.get(release)?.share ?? null;
  }

  /**
   * Wait until this worker may start `partition`: its estimated rows paid from the bucket.
   * Before the controller's first decision nothing is admitted: a new build used to start
   * unmetered for that first interval, every worker at full speed (measured: the canary's p95
   * at 3× budget and a pause within two seconds).
   */
  async admit(release: string, partition: string): Promise<void> {
    const m = this.#meter(release);
    await this.#refresh(release, m);
    while (m.share === null && !this.#closed) {
      await sleep(REFRESH_MS);
      await this.#refresh(release, m);
    }
    if (m.share === null) return;
    let owed = await partitionEstimate(this.db, release, partition);
    // The bucket never holds more than one second of share, so a bigger partition pays in
    // instalments; each follows the current share, which may change while we wait.
    while (owed > 0 && !this.#closed) {
      await this.#refresh(release, m);
      if (m.share === null) return;
      const part = Math.min(owed, m.share);
      const paid = await m.limiter.schedule({ weight: part }, async () => true).catch(() => false);
      if (paid) owed -= part;
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all([...this.#meters.values()].map((m) => m.limiter.stop({ dropWaitingJobs: true }).catch(() => undefined)));
    this.#meters.clear();
  }
}
