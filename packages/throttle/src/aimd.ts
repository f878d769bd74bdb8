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

export function budgetOf(name: SignalName, b: Budget): number {
  return name === 'replica_lag' ? b.replicaLagSeconds : name === 'foreground_p95' ? b.foregroundP95Ms : ERROR_RATE_BUDGET;
}

/** Where a controller with no previous decision starts: half the caps, then it climbs. */
export function initialKnobs(b: Budget): Knobs {
  return { concurrency: Math.max(1, Math.ceil(b.workers / 2)), rowsPerSecond: Math.max(1, b.maxRowsPerSecond / 2), paused: false };
}

export function decide(b: Budget, prev: Knobs, readings: Reading[]): Decision {
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
  const r = ratio ?? 0;

  if (r >= FAR_OVER) {
    return { concurrency: 1, rowsPerSecond: floor, paused: true, action: 'pause', binding, ratio };
  }
  if (r > 1) {
    return {
      concurrency: clampConc(Math.floor(prev.concurrency * DECREASE)),
      rowsPerSecond: clampRate(prev.rowsPerSecond * DECREASE),
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
  const next = {
    concurrency: clampConc(prev.concurrency + 1),
    rowsPerSecond: clampRate(prev.rowsPerSecond + b.maxRowsPerSecond * RATE_STEP),
    paused: false,
  };
  const atCap = next.concurrency === b.workers && next.rowsPerSecond === b.maxRowsPerSecond;
  const grew = next.concurrency !== prev.concurrency || next.rowsPerSecond !== prev.rowsPerSecond;
  return { ...next, action: grew ? 'increase' : 'hold', binding: atCap && (ratio === null || r < HEADROOM) ? 'cap' : binding, ratio };
}
