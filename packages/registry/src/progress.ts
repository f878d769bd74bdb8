// Build progress of a release — its partitions by status, the source rows left by estimate,
// the rows its receipts wrote — and the one rule that turns two readings into rows/s and an
// ETA. `status --watch` and the demo sample it every interval (releaseProgress, ProgressMeter);
// the API's status page reads all releases at once and takes the receipts of its rate window as
// the earlier reading (partitionCounts, progressSample, progressRates). It is a read of registry
// tables only, so it lives beside the status read model (status.ts) that the same callers use,
// not in the planner, which none of them otherwise needs for it.
import { NotFoundError, type ReleaseState } from '@genfill/contracts';
import type { Db } from './db.ts';

export interface ProgressSample {
  release: string;
  state: ReleaseState;
  paused: { operator: boolean; throttle: boolean };
  total: number;
  built: number;
  running: number;
  failed: number;
  pending: number;
  /** Estimated source rows of the partitions not built yet (0 when never estimated). */
  estRowsRemaining: number;
  /** Rows written by every receipt so far. */
  rowsOut: number;
  /** Milliseconds since the epoch, as the sample was taken. */
  at: number;
}

/**
 * A lateral subquery of one release's partition counts and its estimated source rows not built
 * yet; `release` is the SQL expression of the release id in the outer query (`r.id`, `$1`).
 */
export function partitionCounts(release: string): string {
  return `SELECT count(*)::int AS total,
                 count(*) FILTER (WHERE status = 'BUILT')::int AS built,
                 count(*) FILTER (WHERE status = 'RUNNING')::int AS running,
                 count(*) FILTER (WHERE status = 'FAILED')::int AS failed,
                 count(*) FILTER (WHERE status = 'PENDING')::int AS pending,
                 coalesce(sum(est_rows) FILTER (WHERE status <> 'BUILT'), 0)::text AS est_remaining
            FROM genfill.partitions WHERE release = ${release}`;
}

/** A row with partitionCounts' columns, the release's state and pause flags, and the rows its receipts wrote. */
export interface ProgressRow {
  state: ReleaseState;
  operator_paused: boolean;
  throttle_paused: boolean;
  total: number;
  built: number;
  running: number;
  failed: number;
  pending: number;
  est_remaining: string;
  rows_out: string;
}

export function progressSample(release: string, r: ProgressRow, at: number): ProgressSample {
  return {
    release,
    state: r.state,
    paused: { operator: r.operator_paused, throttle: r.throttle_paused },
    total: r.total,
    built: r.built,
    running: r.running,
    failed: r.failed,
    pending: r.pending,
    estRowsRemaining: Number(r.est_remaining),
    rowsOut: Number(r.rows_out),
    at,
  };
}

export async function releaseProgress(db: Pick<Db, 'query'>, id: string): Promise<ProgressSample> {
  const { rows } = await db.query<ProgressRow>(
    `SELECT r.state, r.operator_paused, r.throttle_paused, p.*,
            (SELECT coalesce(sum(rows_out), 0) FROM genfill.receipts WHERE release = r.id)::text AS rows_out
       FROM genfill.releases r
      CROSS JOIN LATERAL (${partitionCounts('r.id')}) p
      WHERE r.id = $1`,
    [id],
  );
  const r = rows[0];
  if (!r) throw new NotFoundError(`release ${id} does not exist: check the id with \`genfill status\``);
  return progressSample(id, r, Date.now());
}

export interface Rates {
  rowsPerSecond: number | null;
  /** Seconds until every partition is built at the current pace; null while unknown. */
  etaSeconds: number | null;
}

export const NO_RATES: Rates = { rowsPerSecond: null, etaSeconds: null };

/**
 * The pace between two readings of a release and when it finishes at that pace: by the
 * estimated source rows left over rows/s, or without estimates by the partitions left over
 * partitions/s. No rate while no time has passed.
 */
export function progressRates(earlier: ProgressSample, now: ProgressSample): Rates {
  const seconds = (now.at - earlier.at) / 1000;
  if (seconds <= 0) return NO_RATES;
  const rowsPerSecond = Math.max(0, (now.rowsOut - earlier.rowsOut) / seconds);
  const partsPerSecond = Math.max(0, (now.built - earlier.built) / seconds);
  const left = now.total - now.built;
  let etaSeconds: number | null = null;
  if (left === 0) etaSeconds = 0;
  else if (now.estRowsRemaining > 0 && rowsPerSecond > 0) etaSeconds = now.estRowsRemaining / rowsPerSecond;
  else if (partsPerSecond > 0) etaSeconds = left / partsPerSecond;
  return { rowsPerSecond, etaSeconds };
}

/**
 * Rates over a sliding window of recent samples, so the ETA follows the current pace (the
 * throttle changes it) rather than the average since the watch began.
 */
export class ProgressMeter {
  readonly #samples: ProgressSample[] = [];
  constructor(private readonly window = 10) {}

  add(sample: ProgressSample): Rates {
    this.#samples.push(sample);
    if (this.#samples.length > this.window) this.#samples.shift();
    return progressRates(this.#samples[0]!, sample);
  }
}

/** Which pause flags are set, in the order every view names them. */
export function pausedBy(paused: { operator: boolean; throttle: boolean }): ('operator' | 'throttle')[] {
  return (['operator', 'throttle'] as const).filter((flag) => paused[flag]);
}

/** Seconds for people, an ETA or an age: `42s`, `2m05s`, `3h07m`, `—` when unknown (not the input grammar: see durationLiteral). */
export function formatDuration(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return '—';
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** One plain line per tick, for logs and for stdout that is not a terminal. */
export function progressLine(sample: ProgressSample, rates: Rates): string {
  const pct = sample.total === 0 ? 0 : (100 * sample.built) / sample.total;
  const paused = pausedBy(sample.paused);
  return (
    `${new Date(sample.at).toISOString()} ${sample.release} ${sample.state}: ` +
    `${sample.built}/${sample.total} partitions built (${pct.toFixed(1)}%), ${sample.running} running, ${sample.failed} failed; ` +
    `${rates.rowsPerSecond === null ? '—' : Math.round(rates.rowsPerSecond).toLocaleString('en-US')} rows/s; ` +
    `ETA ${formatDuration(rates.etaSeconds)}` +
    (paused.length ? `; PAUSED (${paused.join(', ')})` : '')
  );
}
