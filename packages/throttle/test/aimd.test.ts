import { describe, expect, it } from 'vitest';
import { initialKnobs } from '../src/aimd.ts';
import { decide, FAR_OVER, quantile, type Budget, type Reading } from '../src/index.ts';
import { canaryStatements, StandbyLagEstimator } from '../src/signals.ts';

const budget: Budget = { workers: 8, maxRowsPerSecond: 10_000, replicaLagSeconds: 5, foregroundP95Ms: 25 };
const reading = (name: Reading['name'], value: number | null): Reading => ({ name, value, detail: {} });

describe('AIMD decisions', () => {
  it('climbs while every signal is inside its headroom, up to the caps', () => {
    let k = initialKnobs(budget);
    for (let i = 0; i < 20; i++) k = decide(budget, k, [reading('replica_lag', 0.1), reading('foreground_p95', 5)]);
    expect(k).toMatchObject({ concurrency: 8, rowsPerSecond: 10_000, paused: false });
    expect(decide(budget, k, [reading('foreground_p95', 5)]).binding).toBe('cap');
  });

  it('halves both knobs when one signal is over budget, naming it as binding', () => {
    const d = decide(budget, { concurrency: 8, rowsPerSecond: 10_000, paused: false }, [reading('replica_lag', 1), reading('foreground_p95', 40)]);
    expect(d).toMatchObject({ action: 'decrease', binding: 'foreground_p95', concurrency: 4, rowsPerSecond: 5_000, paused: false });
  });

  it('grows eightfold under no pressure, and by the room left between half the budget and the headroom', () => {
    const prev = { concurrency: 1, rowsPerSecond: 1_000, paused: false };
    // 5 ms of a 25 ms budget, or nothing measured: no pressure.
    expect(decide(budget, prev, [reading('foreground_p95', 5)], { builtRowsPerSecond: 990 }).rowsPerSecond).toBe(8_000);
    expect(decide(budget, prev, [reading('foreground_p95', null)], { builtRowsPerSecond: 990 }).rowsPerSecond).toBe(8_000);
    // 0.6 of the budget: 0.9 / 0.6 = 1.5×; 0.8: 1.125×; just under the headroom: at least 5%.
    expect(decide(budget, prev, [reading('foreground_p95', 15)], { builtRowsPerSecond: 990 }).rowsPerSecond).toBeCloseTo(1_500, 6);
    expect(decide(budget, prev, [reading('foreground_p95', 20)], { builtRowsPerSecond: 990 }).rowsPerSecond).toBeCloseTo(1_125, 6);
    expect(decide(budget, prev, [reading('foreground_p95', 22.4)], { builtRowsPerSecond: 990 }).rowsPerSecond).toBeCloseTo(1_050, 6);
    // Never past the cap.
    expect(decide(budget, { ...prev, rowsPerSecond: 8_000 }, [reading('foreground_p95', 13)], { builtRowsPerSecond: 7_900 }).rowsPerSecond).toBe(10_000);
  });

  it('cuts from what the fleet built when it built under half what it was admitted', () => {
    // Admitted at the cap after an idle ramp, the fleet built 3,000 rows/s: halving 10,000 would change nothing.
    const d = decide(budget, { concurrency: 2, rowsPerSecond: 10_000, paused: false }, [reading('foreground_p95', 50)], { builtRowsPerSecond: 3_000 });
    expect(d).toMatchObject({ action: 'decrease', rowsPerSecond: 1_500 });
    // …but from no less than a quarter of the admitted rate: a window's receipts are lumpy.
    expect(decide(budget, { concurrency: 2, rowsPerSecond: 10_000, paused: false }, [reading('foreground_p95', 50)], { builtRowsPerSecond: 1_000 }).rowsPerSecond).toBe(1_250);
    // Building at the admitted rate (or unknown): the cut applies to the admitted rate.
    expect(decide(budget, { concurrency: 2, rowsPerSecond: 4_000, paused: false }, [reading('foreground_p95', 50)], { builtRowsPerSecond: 4_100 }).rowsPerSecond).toBe(2_000);
  });

  it('cuts in proportion to the overshoot: a little over trims, far over halves', () => {
    const prev = { concurrency: 4, rowsPerSecond: 10_000, paused: false };
    const trimmed = decide(budget, prev, [reading('foreground_p95', 27.5)]); // 1.1× budget
    expect(trimmed).toMatchObject({ action: 'decrease', concurrency: 3 });
    expect(trimmed.rowsPerSecond).toBeCloseTo(10_000 / 1.21, 0);
    expect(decide(budget, prev, [reading('foreground_p95', 50)])).toMatchObject({ action: 'decrease', concurrency: 2, rowsPerSecond: 5_000 });
  });

  it('pauses far over budget and resumes once healthy, without growing in the same step', () => {
    const p = decide(budget, { concurrency: 8, rowsPerSecond: 10_000, paused: false }, [reading('replica_lag', 5 * FAR_OVER)]);
    expect(p).toMatchObject({ action: 'pause', paused: true, concurrency: 1, binding: 'replica_lag' });
    expect(decide(budget, p, [reading('replica_lag', 6)])).toMatchObject({ action: 'decrease', paused: true });
    expect(decide(budget, p, [reading('replica_lag', 0)])).toMatchObject({ action: 'resume', paused: false, concurrency: 1 });
  });

  it('holds in the band between the headroom (0.9) and the budget', () => {
    expect(decide(budget, { concurrency: 3, rowsPerSecond: 3_000, paused: false }, [reading('foreground_p95', 22.5)]).action).toBe('hold');
    expect(decide(budget, { concurrency: 3, rowsPerSecond: 3_000, paused: false }, [reading('foreground_p95', 25)]).action).toBe('hold');
    expect(decide(budget, { concurrency: 3, rowsPerSecond: 3_000, paused: false }, [reading('foreground_p95', 22)]).action).toBe('increase');
  });

  it('adds concurrency only while the workers build under 70% of the rate they are admitted at', () => {
    const prev = { concurrency: 2, rowsPerSecond: 4_000, paused: false };
    const healthy = [reading('foreground_p95', 5)];
    // Starved: the fleet used 2,000 of 4,000 rows/s, so another partition at once is wanted.
    expect(decide(budget, prev, healthy, { builtRowsPerSecond: 2_000 })).toMatchObject({ action: 'increase', concurrency: 3, rowsPerSecond: 10_000 });
    // Keeping up with the rate: only the rate climbs; overlapping partitions would be bursts.
    expect(decide(budget, prev, healthy, { builtRowsPerSecond: 3_900 })).toMatchObject({ action: 'increase', concurrency: 2, rowsPerSecond: 10_000 });
    // The rate at its cap and used: the cap binds, concurrency stays where it is.
    const capped = decide(budget, { concurrency: 2, rowsPerSecond: 10_000, paused: false }, healthy, { builtRowsPerSecond: 9_800 });
    expect(capped).toMatchObject({ action: 'hold', concurrency: 2, rowsPerSecond: 10_000, binding: 'cap' });
    // Over budget: both knobs are cut whatever the throughput.
    expect(decide(budget, prev, [reading('foreground_p95', 40)], { builtRowsPerSecond: 3_900 })).toMatchObject({ action: 'decrease', concurrency: 1, rowsPerSecond: 2_000 });
    // …but not below one partition per live worker: a worker without a slot cannot use its share.
    expect(decide(budget, { concurrency: 6, rowsPerSecond: 4_000, paused: false }, [reading('foreground_p95', 40)], { liveWorkers: 4 })).toMatchObject({ concurrency: 4, rowsPerSecond: 2_000 });
  });

  it('starts with one partition per live worker at 2% of the rate cap', () => {
    expect(initialKnobs(budget)).toEqual({ concurrency: 1, rowsPerSecond: 200, paused: false });
    expect(initialKnobs(budget, 3)).toEqual({ concurrency: 3, rowsPerSecond: 200, paused: false });
    expect(initialKnobs(budget, 20).concurrency).toBe(8);
  });

  it('treats missing readings as no evidence of trouble', () => {
    expect(decide(budget, { concurrency: 3, rowsPerSecond: 3_000, paused: false }, [reading('replica_lag', null)])).toMatchObject({ action: 'increase', binding: 'none' });
  });
});

describe('signals', () => {
  it('splits a canary script into its statements, one round trip each', async () => {
    const script = `BEGIN;
-- the account, as the foreground touches it
UPDATE accounts SET balance = balance + 0 WHERE id = (SELECT 1 + (random() * 9)::int);
SELECT 'a;b' AS "x;y";
COMMIT`;
    expect(await canaryStatements(script)).toEqual([
      'BEGIN',
      // A comment between statements is not sent.
      'UPDATE accounts SET balance = balance + 0 WHERE id = (SELECT 1 + (random() * 9)::int)',
      `SELECT 'a;b' AS "x;y"`,
      'COMMIT',
    ]);
    expect(await canaryStatements('SELECT 1')).toEqual(['SELECT 1']);
  });

  it('takes nearest-rank quantiles', () => {
    const xs = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(quantile(xs, 0.95)).toBe(95);
    expect(quantile(xs, 0.99)).toBe(99);
    expect(quantile([], 0.95)).toBeNull();
  });

  it('estimates standby lag as the age of the WAL being replayed, not of the last commit', () => {
    const e = new StandbyLagEstimator();
    const at = (receiveLsn: number, replayLsn: number, t: number) =>
      e.observe({ inRecovery: true, receiveLsn, replayLsn, paused: false, sinceReplaySeconds: 3600 }, t);
    // Idle primary: nothing waiting, however old the last commit is.
    expect(at(100, 100, 0).lagSeconds).toBe(0);
    // Replay frozen at 100 while WAL arrives: the lag grows from when 200 was first seen.
    expect(at(200, 100, 1_000).lagSeconds).toBe(0);
    expect(at(300, 100, 3_000).lagSeconds).toBe(2);
    expect(at(400, 100, 5_000)).toEqual({ lagSeconds: 4, bytes: 300 });
    // Replaying again: it has reached what was received at 3 s.
    expect(at(400, 300, 6_000).lagSeconds).toBe(1);
    expect(at(400, 400, 7_000).lagSeconds).toBe(0);
  });
});
