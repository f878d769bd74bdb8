// The decision itself, pure: readings and the previous knobs in, new knobs out. Increase while
// every signal is comfortably inside its budget — by the room left, once a window, or straight
// up when nothing shows any pressure — multiplicative decrease as soon as one is over, and a
// pause when one is far over: TCP's recipe, with the increase scaled to the rate instead of
// fixed steps of the cap, which were too coarse to find a foreground's limit (see below).
// The Pacer at the end paces the steps in time and is what the controller holds.
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
/**
 * Below this ratio every knob may grow; between it and 1 the controller holds. 0.9, not the
 * 0.8 it was: a budget of 1.25 × the foreground's own baseline puts an idle foreground at 0.8
 * of it already, so with 0.8 the controller would hold at its start rate whenever noise lifted
 * the reading a little, before the build had cost the foreground anything.
 */
export const HEADROOM = 0.9;
/**
 * Below this ratio (or with nothing measured, and no signal failing to read) nothing shows
 * pressure: a release's first decision is the cap, and later the rate grows IDLE_GROWTH-fold
 * every tick without waiting a window (from the floor after a pause: the cap within 2 ticks of
 * the resume). An idle build is not slowed by its throttle (measured before, the demo's
 * throttled build took 21 s, 13 s without the throttle). A quarter, not a half: with the
 * budget at 1.25 × the foreground's own baseline, a noisy reading at half the budget is a few
 * ticks of luck, and eight-fold steps on it overshot to 1.3 × the budget for a window
 * (measured, bench/throttle).
 */
export const NO_PRESSURE = 0.25;
const IDLE_GROWTH = 8;
/** At or above this ratio the release is paused (throttle_paused) until healthy again. */
export const FAR_OVER = 3;
const DECREASE = 0.5;
/**
 * Between NO_PRESSURE and HEADROOM the rate grows once per window by HEADROOM / ratio, the
 * room left, within these bounds: a step that is a fraction of the rate itself, not of the cap
 * (a step of 10% of a 200,000 rows/s cap was bigger than the whole 12,000 rows/s the bench's
 * foreground could take at 1.25 × its baseline), and slower the nearer the budget.
 */
const MIN_GROWTH = 1.05;
const MAX_GROWTH = 2;
/**
 * A release's first rate when something shows pressure, as a fraction of the cap: the floor,
 * because no step's effect has been seen yet (bench/throttle on the shared machine: the rate
 * its foreground could take at 1.25 × its baseline was 1,500–9,000 rows/s, under 5% of the
 * 200,000 rows/s cap, so a start at 5% — 10,000 rows/s — began above it).
 * With no pressure at all the first decision is the cap itself (see Pacer.propose).
 */
const RATE_START = 0.02;
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
 * Where a controller with no previous decision starts when something shows pressure: one
 * partition per live worker at 2% of the rate cap, then it climbs by the room left once a
 * window (with no pressure the Pacer starts at the cap instead). Starting at half the cap hurt the foreground for
 * the first window of every build (measured, bench/throttle: the canary's p95 at 5× budget
 * within a second) before the first decrease could land.
 */
export function initialKnobs(b: Budget, liveWorkers = 1): Knobs {
  return { concurrency: concurrencyFloor(b, liveWorkers), rowsPerSecond: Math.max(1, b.maxRowsPerSecond * RATE_START), paused: false };
}

/** What the fleet did, besides the signals. */
export interface Observed {
  /** Rows built per second over the last window; null/absent: unknown, and concurrency climbs with the rate as if starved. */
  builtRowsPerSecond?: number | null;
  /** Workers serving the release (default 1). */
  liveWorkers?: number;
}

/** The highest value/budget over the readings that have a value, and its signal. */
export function bindingOf(b: Budget, readings: Reading[]): { binding: Decision['binding']; ratio: number | null } {
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
  return { binding, ratio };
}

/**
 * No pressure at all: every signal under NO_PRESSURE of its budget, or nothing measured — but
 * not when a signal failed to read (a Prometheus that is down says nothing either way: the
 * rate still climbs, once a window, instead of jumping to the cap).
 */
export function unpressured(b: Budget, readings: Reading[]): boolean {
  if (readings.some((r) => r.value === null && r.detail.error !== undefined)) return false;
  const { ratio } = bindingOf(b, readings);
  return ratio === null || ratio < NO_PRESSURE;
}

/** The next knobs from the previous ones, the signals' readings and what the fleet did. */
export function decide(b: Budget, prev: Knobs, readings: Reading[], observed: Observed = {}): Decision {
  const { binding, ratio } = bindingOf(b, readings);
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
    // halves it. The cut applies to what the fleet built when that is under half its admitted
    // rate: after an idle ramp to the cap the admitted rate can be several times what the
    // workers manage, and halving an unused rate would leave the foreground's load as it was.
    // Not below a quarter of the admitted rate: receipts land a partition at a time, so a
    // window's built rate is lumpy at low rates.
    const overAdmitted = builtRowsPerSecond !== null && builtRowsPerSecond > 0 && builtRowsPerSecond < prev.rowsPerSecond / 2;
    const used = overAdmitted ? Math.max(builtRowsPerSecond, prev.rowsPerSecond / 4) : prev.rowsPerSecond;
    const cut = Math.max(DECREASE, 1 / (r * r));
    return {
      // The rate does the cutting; concurrency falls only to one partition per live worker.
      concurrency: clampConc(Math.max(minConc, Math.floor(prev.concurrency * cut))),
      rowsPerSecond: clampRate(used * cut),
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
  const growth = unpressured(b, readings) ? IDLE_GROWTH : Math.min(MAX_GROWTH, Math.max(MIN_GROWTH, HEADROOM / r));
  const next = {
    concurrency: clampConc(prev.concurrency + (starved ? 1 : 0)),
    rowsPerSecond: clampRate(prev.rowsPerSecond * growth),
    paused: false,
  };
  // At the caps: the rate at its cap, and concurrency either at its cap or not wanted.
  const atCap = next.rowsPerSecond === b.maxRowsPerSecond && (next.concurrency === b.workers || !starved);
  const grew = next.concurrency !== prev.concurrency || next.rowsPerSecond !== prev.rowsPerSecond;
  return { ...next, action: grew ? 'increase' : 'hold', binding: atCap && (ratio === null || r < HEADROOM) ? 'cap' : binding, ratio };
}

/**
 * One step per window, except under no pressure. A decrease waits for the last decrease to
 * show in the windowed signals, an increase for the last step of either kind — TCP moves once
 * per round trip; the round trip here is the signal's window (a Prometheus `rate()` over a
 * range, plus a scrape interval, plus the workers' one-second look at the share). An increase
 * while nothing shows pressure does not wait: there is no earlier step whose effect could
 * still be on its way that matters, and waiting made an idle build crawl up to its cap.
 */
export function mayStep(action: Action, free: boolean, sinceStepMs: number, sinceDecreaseMs: number, windowMs: number): boolean {
  if (action === 'decrease') return sinceDecreaseMs >= windowMs;
  if (action === 'increase') return free || sinceStepMs >= windowMs;
  return true;
}

/**
 * The controller's memory between ticks: the knobs in force and when it last stepped. Pure but
 * for the clock passed in, so the ramp and the pacing are tested with simulated time.
 * `propose` says what this tick would decide; `accept` records it once the decision has landed
 * (a fenced write that landed nowhere must not move the controller's belief).
 */
export class Pacer {
  #knobs: Knobs | null;
  #lastStepAt = Number.NEGATIVE_INFINITY;
  #lastDecreaseAt = Number.NEGATIVE_INFINITY;

  /** `start`: the last recorded decision's knobs, or null for a release's first controller. */
  constructor(
    readonly windowMs: number,
    start: Knobs | null,
  ) {
    this.#knobs = start;
  }

  get knobs(): Knobs | null {
    return this.#knobs;
  }

  /**
   * A release's first decision is the initial knobs themselves (workers admit nothing until it
   * exists), at the cap when nothing shows pressure; every later one is decide() paced by mayStep(): a step that comes too early is a
   * hold at the previous knobs.
   */
  propose(b: Budget, readings: Reading[], observed: Observed, now: number, throttlePaused = false): Decision {
    const prev = this.#knobs;
    if (prev === null) {
      const start = { ...initialKnobs(b, observed.liveWorkers ?? 1), paused: throttlePaused };
      // Nothing shows pressure (every signal under a quarter of its budget, or none measured):
      // start at the cap. Stepping up to it from 2% cost an idle build a second or two — what
      // the demo's throttled build lost to --no-throttle — and a build that does hurt shows it
      // in the signals one window later whichever rate it started at; the first cut then halves.
      if (unpressured(b, readings)) start.rowsPerSecond = b.maxRowsPerSecond;
      return { ...start, action: 'hold', binding: 'none', ratio: null };
    }
    const d = decide(b, prev, readings, observed);
    if (mayStep(d.action, unpressured(b, readings), now - this.#lastStepAt, now - this.#lastDecreaseAt, this.windowMs)) return d;
    return { ...d, ...prev, action: 'hold' };
  }

  accept(d: Decision, now: number): void {
    if (this.#knobs === null) this.#lastStepAt = now;
    if (d.action === 'increase' || d.action === 'decrease') this.#lastStepAt = now;
    if (d.action === 'decrease') this.#lastDecreaseAt = now;
    this.#knobs = { concurrency: d.concurrency, rowsPerSecond: d.rowsPerSecond, paused: d.paused };
  }
}
