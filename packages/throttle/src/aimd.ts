// The decision itself, pure: readings and the previous knobs in, new knobs out. Additive
// increase while every signal is comfortably inside its budget, multiplicative decrease as
// soon as one is over, and a pause when one is far over — the TCP recipe, which converges
// on a fair, stable share without knowing the capacity in advance.
import type { Reading, SignalName } from './signals.ts';

export interface Budget {
  workers: number;
  maxRowsPerSecond: number;
  replicaLagSeconds: number;
  foregroundP95Ms: number;
}

export interface Knobs {
  concurrency: number;
  rowsPerSecond: number;
  paused: boolean;
}

export type Action = 'increase' | 'hold' | 'decrease' | 'pause' | 'resume';

export interface Decision extends Knobs {
  action: Action;
  /** The signal with the highest value/budget ratio, 'cap' at the budget's caps, 'none' without readings. */
  binding: SignalName | 'cap' | 'none';
  ratio: number | null;
}

/** An error rate above this fraction of attempts counts as over budget. */
export const ERROR_RATE_BUDGET = 0.2;
/** Below this ratio every knob may grow; between it and 1 the controller holds. */
export const HEADROOM = 0.8;
/** At or above this ratio the release is paused (throttle_paused) until healthy again. */
export const FAR_OVER = 3;
const DECREASE = 0.5;
/** The additive step of the rate, as a fraction of the budget's cap. */
const RATE_STEP = 0.1;
/** The rate never drops below this fraction of the cap, so a recovery does not start from zero. */
const RATE_FLOOR = 0.02;
/**
 * Concurrency grows only while the fleet builds fewer rows/s than this fraction of the rate it
 * is admitted at: more partitions at once are wanted only when the workers cannot use the rate
 * they have. Otherwise the rate alone climbs: overlapping partition statements are bursts that
 * compete with the foreground for the same cores and WAL (measured, bench/throttle on 2 cores:
 * 1 worker × 1 built 133k rows/s with the foreground's p95 at 2.3× its baseline; 2 × 2 built
 * 67k rows/s at 4.6×).
 */
export const STARVED = 0.7;

export function budgetOf(name: SignalName, b: Budget): number {
  if (name === 'replica_lag') return b.replicaLagSeconds;
  if (name === 'foreground_p95' || name === 'foreground_sli') return b.foregroundP95Ms;
  return ERROR_RATE_BUDGET;
}

/**
 * The fewest partitions at once that still let every live worker use its share of the rate
 * (the share is rate ÷ live workers: a worker with no slot leaves its share unused).
 */
export function concurrencyFloor(b: Budget, liveWorkers: number): number {
  return Math.max(1, Math.min(b.workers, liveWorkers));
}

/**
 * Where a controller with no previous decision starts: one partition per live worker at one
 * additive step of the rate, then it climbs. Starting at half the cap hurt the foreground for
 * the first window of every build (measured, bench/throttle: the canary's p95 at 5× budget
 * within a second) before the first decrease could land.
 */
export function initialKnobs(b: Budget, liveWorkers = 1): Knobs {
  return { concurrency: concurrencyFloor(b, liveWorkers), rowsPerSecond: Math.max(1, b.maxRowsPerSecond * RATE_STEP), paused: false };
}

/** What the fleet did, besides the signals. */
export interface Observed {
  /** Rows built per second over the last window; null/absent: unknown, and concurrency climbs with the rate as if starved. */
  builtRowsPerSecond?: number | null;
  /** Workers serving the release (default 1). */
  liveWorkers?: number;
  /**
   * No decrease yet since this controller started from the initial knobs: the rate doubles
   * per step instead of adding a step (TCP's slow start), so a build reaches its level in a
   * few windows instead of ten; the first decrease ends it.
   */
  slowStart?: boolean;
}

/** The next knobs from the previous ones, the signals' readings and what the fleet did. */
export function decide(b: Budget, prev: Knobs, readings: Reading[], observed: Observed = {}): Decision {
  let binding: Decision['binding'] = 'none';
  let ratio: number | null = null;
  for (const r of readings) {
    if (r.value === null) continue;
    const x = r.value / budgetOf(r.name, b);
    if (ratio === null || x > ratio) {
      ratio = x;
      binding = r.name;
    }
  }
  const floor = Math.max(1, b.maxRowsPerSecond * RATE_FLOOR);
  const clampRate = (v: number) => Math.min(b.maxRowsPerSecond, Math.max(floor, v));
  const clampConc = (v: number) => Math.min(b.workers, Math.max(1, Math.round(v)));
  const minConc = concurrencyFloor(b, observed.liveWorkers ?? 1);
  const builtRowsPerSecond = observed.builtRowsPerSecond ?? null;
  const r = ratio ?? 0;

  if (r >= FAR_OVER) {
    return { concurrency: 1, rowsPerSecond: floor, paused: true, action: 'pause', binding, ratio };
  }
  if (r > 1) {
    // Multiplicative decrease in proportion to the overshoot, 1/ratio², at most halving: a
    // reading a few percent over (often noise in a windowed p95) trims the rate, one far over
    // halves it.
    const cut = Math.max(DECREASE, 1 / (r * r));
    return {
      // The rate does the cutting; concurrency falls only to one partition per live worker.
      concurrency: clampConc(Math.max(minConc, Math.floor(prev.concurrency * cut))),
      rowsPerSecond: clampRate(prev.rowsPerSecond * cut),
      // Over budget but not far over: a pause already set stays until the signal is healthy.
      paused: prev.paused,
      action: 'decrease',
      binding,
      ratio,
    };
  }
  // At or under budget: a pause is lifted first, and the knobs climb from where they were.
  if (prev.paused) return { ...prev, paused: false, action: 'resume', binding, ratio };
  if (r >= HEADROOM) return { ...prev, action: 'hold', binding, ratio };
  const starved = builtRowsPerSecond === null || builtRowsPerSecond < prev.rowsPerSecond * STARVED;
  const next = {
    concurrency: clampConc(prev.concurrency + (starved ? 1 : 0)),
    rowsPerSecond: clampRate(observed.slowStart ? prev.rowsPerSecond * 2 : prev.rowsPerSecond + b.maxRowsPerSecond * RATE_STEP),
    paused: false,
  };
  // At the caps: the rate at its cap, and concurrency either at its cap or not wanted.
  const atCap = next.rowsPerSecond === b.maxRowsPerSecond && (next.concurrency === b.workers || !starved);
  const grew = next.concurrency !== prev.concurrency || next.rowsPerSecond !== prev.rowsPerSecond;
  return { ...next, action: grew ? 'increase' : 'hold', binding: atCap && (ratio === null || r < HEADROOM) ? 'cap' : binding, ratio };
}
