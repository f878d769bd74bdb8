// The controller's pacing with injected readings and a simulated clock (no database, no timing
// thresholds): an idle throttle reaches the release's rate cap within 3 s of its first
// decision; under pressure it steps once per window, backs off from the foreground's SLI and
// holds in the band just under the budget.
import { describe, expect, it } from 'vitest';
import { mayStep, Pacer, type Budget } from '@genfill/throttle';

const budget: Budget = { workers: 4, maxRowsPerSecond: 200_000, replicaLagSeconds: 5, foregroundP95Ms: 5 };
const TICK_MS = 1_000;
const WINDOW_MS = 5_000;
type Readings = Parameters<Pacer['propose']>[1];
const sli = (ms: number | null): Readings => [
  { name: 'replica_lag', value: null, detail: {} },
  { name: 'foreground_sli', value: ms, detail: {} },
  { name: 'error_rate', value: null, detail: {} },
];

/** Ticks every TICK_MS from t = 0 with the readings `at(t)` gives; the decisions with their time. */
function run(p: Pacer, ticks: number, at: (t: number, rate: number) => Readings, built = (rate: number) => rate * 0.5) {
  const out = [];
  for (let i = 0; i < ticks; i++) {
    const t = i * TICK_MS;
    const rate = p.knobs?.rowsPerSecond ?? 0;
    const d = p.propose(budget, at(t, rate), { builtRowsPerSecond: p.knobs ? built(rate) : null, liveWorkers: 2 }, t);
    p.accept(d, t);
    out.push({ t, ...d });
  }
  return out;
}

describe('throttle pacing', () => {
  it('reaches the rate cap within 3 s of its first decision when nothing shows pressure', () => {
    for (const readings of [sli(null), sli(0.4), []]) {
      const decisions = run(new Pacer(WINDOW_MS, null), 4, () => readings);
      // Nothing showed pressure before the build: the first decision is the cap already.
      expect(decisions[0]).toMatchObject({ action: 'hold', rowsPerSecond: 200_000, concurrency: 2 });
      const atCap = decisions.find((d) => d.rowsPerSecond === budget.maxRowsPerSecond);
      expect(atCap?.t).toBeLessThanOrEqual(3_000);
      // The fleet builds half its rate: starved, so concurrency climbs with the rate to the budget's workers.
      expect(decisions.at(-1)).toMatchObject({ rowsPerSecond: 200_000, concurrency: 4, binding: 'cap' });
    }
  });

  it('resumes from a pause and is back at the cap within 3 s once the pressure is gone', () => {
    const p = new Pacer(WINDOW_MS, { concurrency: 4, rowsPerSecond: 100_000, paused: false });
    const [paused] = run(p, 1, () => sli(20));
    expect(paused).toMatchObject({ action: 'pause', paused: true, rowsPerSecond: 4_000 });
    const after = run(p, 4, () => sli(1));
    expect(after.slice(0, 3).map((d) => d.action)).toEqual(['resume', 'increase', 'increase']);
    expect(after[2]!.rowsPerSecond).toBe(200_000);
  });

  it('climbs once per window while the foreground is between a quarter of the budget and the headroom', () => {
    // 4 ms of a 5 ms budget (0.8): each step grows the rate by 0.9 / 0.8, five ticks apart.
    const decisions = run(new Pacer(WINDOW_MS, null), 16, () => sli(4));
    expect(decisions[0]!.rowsPerSecond).toBe(4_000);
    const steps = decisions.filter((d) => d.action === 'increase');
    expect(steps.map((d) => d.t)).toEqual([5_000, 10_000, 15_000]);
    expect(steps[0]!.rowsPerSecond).toBeCloseTo(4_000 * 1.125, 6);
    expect(steps[2]!.rowsPerSecond).toBeCloseTo(4_000 * 1.125 ** 3, 6);
  });

  it('comes down to the band under the budget on a foreground whose p95 follows the rate, and holds there', () => {
    // A foreground like bench/throttle's: 4 ms idle, +1 ms per 30,000 rows/s built, the SLI one
    // tick behind the rate (a rate() window). Budget 5 ms: the frontier is at 30,000 rows/s.
    // A controller taking over at the cap must cut down to the hold band (0.9–1 of the budget)
    // and stay there, neither far below it nor over it (it comes from above: within 1% over).
    const fg = (rate: number) => 4 + rate / 30_000;
    const p = new Pacer(WINDOW_MS, { concurrency: 2, rowsPerSecond: 200_000, paused: false });
    let shown = 200_000;
    const decisions = run(
      p,
      120,
      (_t, rate) => {
        const ms = sli(fg(shown));
        shown = rate;
        return ms;
      },
      (rate) => rate,
    );
    expect(decisions[0]).toMatchObject({ action: 'decrease', rowsPerSecond: 100_000 });
    for (const d of decisions.slice(-60)) {
      expect(fg(d.rowsPerSecond)).toBeLessThanOrEqual(5 * 1.01);
      expect(fg(d.rowsPerSecond)).toBeGreaterThanOrEqual(4.5);
    }
  });

  it('waits a window between decreases and before an increase that has pressure to watch', () => {
    expect(mayStep('decrease', false, 1_000, 1_000, WINDOW_MS)).toBe(false);
    expect(mayStep('decrease', false, 1_000, 5_000, WINDOW_MS)).toBe(true);
    expect(mayStep('increase', false, 1_000, 60_000, WINDOW_MS)).toBe(false);
    expect(mayStep('increase', false, 5_000, 60_000, WINDOW_MS)).toBe(true);
    // No pressure: every tick.
    expect(mayStep('increase', true, 0, 0, WINDOW_MS)).toBe(true);
    // A pause never waits.
    expect(mayStep('pause', false, 0, 0, WINDOW_MS)).toBe(true);
  });

  it('does not take a foreground SLI that fails to read, nor one at half the budget, for no pressure', () => {
    const down: Readings = [{ name: 'foreground_sli', value: null, detail: { error: 'fetch failed' } }];
    const slow = run(new Pacer(WINDOW_MS, null), 6, () => down);
    // Nothing says the foreground is hurt, so it climbs — once a window, doubling, not eight-fold a tick.
    expect(slow.map((d) => d.rowsPerSecond)).toEqual([4_000, 4_000, 4_000, 4_000, 4_000, 8_000]);
    const half = run(new Pacer(WINDOW_MS, null), 6, () => sli(2.5));
    expect(half.map((d) => d.action)).toEqual(['hold', 'hold', 'hold', 'hold', 'hold', 'increase']);
    expect(half.at(-1)!.rowsPerSecond).toBeCloseTo(7_200, 6);
  });

  it('cuts at once on a foreground over budget after an idle ramp, from what the fleet built', () => {
    const p = new Pacer(WINDOW_MS, null);
    run(p, 3, () => sli(1));
    expect(p.knobs?.rowsPerSecond).toBe(200_000);
    // The fleet builds 60,000 of its 200,000 rows/s and the foreground is 1.5× its budget.
    const d = p.propose(budget, sli(7.5), { builtRowsPerSecond: 60_000, liveWorkers: 2 }, 3_000);
    expect(d).toMatchObject({ action: 'decrease', binding: 'foreground_sli' });
    expect(d.rowsPerSecond).toBe(30_000);
  });
});
