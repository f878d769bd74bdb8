import { describe, expect, it } from 'vitest';
import { decide, FAR_OVER, initialKnobs, quantile, StandbyLagEstimator, type Budget, type Reading } from '../src/index.ts';

const budget: Budget = { workers: 8, maxRowsPerSecond: 10_000, replicaLagSeconds: 5, foregroundP95Ms: 25 };
const reading = (name: Reading['name'], value: number | null): Reading => ({ name, value, detail: {} });

describe('AIMD decisions', () => {
  it('climbs additively while every signal is inside its headroom, up to the caps', () => {
    let k = initialKnobs(budget);
    for (let i = 0; i < 20; i++) k = decide(budget, k, [reading('replica_lag', 0.1), reading('foreground_p95', 5)]);
    expect(k).toMatchObject({ concurrency: 8, rowsPerSecond: 10_000, paused: false });
    expect(decide(budget, k, [reading('foreground_p95', 5)]).binding).toBe('cap');
  });

  it('halves both knobs when one signal is over budget, naming it as binding', () => {
    const d = decide(budget, { concurrency: 8, rowsPerSecond: 10_000, paused: false }, [reading('replica_lag', 1), reading('foreground_p95', 40)]);
    expect(d).toMatchObject({ action: 'decrease', binding: 'foreground_p95', concurrency: 4, rowsPerSecond: 5_000, paused: false });
  });

  it('pauses far over budget and resumes once healthy, without growing in the same step', () => {
    const p = decide(budget, { concurrency: 8, rowsPerSecond: 10_000, paused: false }, [reading('replica_lag', 5 * FAR_OVER)]);
    expect(p).toMatchObject({ action: 'pause', paused: true, concurrency: 1, binding: 'replica_lag' });
    expect(decide(budget, p, [reading('replica_lag', 6)])).toMatchObject({ action: 'decrease', paused: true });
    expect(decide(budget, p, [reading('replica_lag', 0)])).toMatchObject({ action: 'resume', paused: false, concurrency: 1 });
  });

  it('holds in the band between the headroom and the budget', () => {
    expect(decide(budget, { concurrency: 3, rowsPerSecond: 3_000, paused: false }, [reading('foreground_p95', 22)]).action).toBe('hold');
  });

  it('treats missing readings as no evidence of trouble', () => {
    expect(decide(budget, { concurrency: 3, rowsPerSecond: 3_000, paused: false }, [reading('replica_lag', null)])).toMatchObject({ action: 'increase', binding: 'none' });
  });
});

describe('signals', () => {
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
