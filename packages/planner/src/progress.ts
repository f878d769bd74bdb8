// Build progress for `status --watch`: one cheap query per tick (counts, estimates, the rows
// the receipts recorded) and a meter that turns successive samples into rows/s and an ETA.
import { NotFoundError, type ReleaseState } from '@genfill/contracts';
import type { Db } from '@genfill/registry';

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

export async function releaseProgress(db: Db, id: string): Promise<ProgressSample> {
  const { rows } = await db.query<{
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
  }>(
    `SELECT r.state, r.operator_paused, r.throttle_paused,
            count(p.id)::int AS total,
            count(p.id) FILTER (WHERE p.status = 'BUILT')::int AS built,
            count(p.id) FILTER (WHERE p.status = 'RUNNING')::int AS running,
            count(p.id) FILTER (WHERE p.status = 'FAILED')::int AS failed,
            count(p.id) FILTER (WHERE p.status = 'PENDING')::int AS pending,
            coalesce(sum(p.est_rows) FILTER (WHERE p.status <> 'BUILT'), 0)::text AS est_remaining,
            (SELECT coalesce(sum(rows_out), 0) FROM genfill.receipts WHERE release = $1)::text AS rows_out
       FROM genfill.releases r LEFT JOIN genfill.partitions p ON p.release = r.id
      WHERE r.id = $1
      GROUP BY r.id`,
    [id],
  );
  const r = rows[0];
  if (!r) throw new NotFoundError(`release ${id} does not exist: check the id with \`genfill status\``);
  return {
    release: id,
    state: r.state,
    paused: { operator: r.operator_paused, throttle: r.throttle_paused },
    total: r.total,
    built: r.built,
    running: r.running,
    failed: r.failed,
    pending: r.pending,
    estRowsRemaining: Number(r.est_remaining),
    rowsOut: Number(r.rows_out),
    at: Date.now(),
  };
}

export interface Rates {
  rowsPerSecond: number | null;
  /** Seconds until every partition is built at the current pace; null while unknown. */
  etaSeconds: number | null;
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
    const first = this.#samples[0]!;
    const seconds = (sample.at - first.at) / 1000;
    if (seconds <= 0) return { rowsPerSecond: null, etaSeconds: null };
    const rowsPerSecond = Math.max(0, (sample.rowsOut - first.rowsOut) / seconds);
    const partsPerSecond = Math.max(0, (sample.built - first.built) / seconds);
    const left = sample.total - sample.built;
    let etaSeconds: number | null = null;
    if (left === 0) etaSeconds = 0;
    else if (sample.estRowsRemaining > 0 && rowsPerSecond > 0) etaSeconds = sample.estRowsRemaining / rowsPerSecond;
    else if (partsPerSecond > 0) etaSeconds = left / partsPerSecond;
    return { rowsPerSecond, etaSeconds };
  }
}

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
  const paused = [sample.paused.operator && 'operator', sample.paused.throttle && 'throttle'].filter(Boolean);
  return (
    `${new Date(sample.at).toISOString()} ${sample.release} ${sample.state}: ` +
    `${sample.built}/${sample.total} partitions built (${pct.toFixed(1)}%), ${sample.running} running, ${sample.failed} failed; ` +
    `${rates.rowsPerSecond === null ? '—' : Math.round(rates.rowsPerSecond).toLocaleString('en-US')} rows/s; ` +
    `ETA ${formatDuration(rates.etaSeconds)}` +
    (paused.length ? `; PAUSED (${paused.join(', ')})` : '')
  );
}
