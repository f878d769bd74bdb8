import { describe, expect, it } from 'vitest';
import { formatDuration, progressLine, ProgressMeter, type ProgressSample } from '../src/progress.ts';

const sample = (at: number, built: number, rowsOut: number, estRowsRemaining: number): ProgressSample => ({
  release: 'r@1',
  state: 'BUILDING',
  paused: { operator: false, throttle: false },
  total: 100,
  built,
  running: 2,
  failed: 1,
  pending: 100 - built - 3,
  estRowsRemaining,
  rowsOut,
  at,
});

describe('ProgressMeter', () => {
  it('knows no rate from one sample, then derives rows/s and an ETA from the estimated rows left', () => {
    const m = new ProgressMeter();
    expect(m.add(sample(0, 0, 0, 10_000))).toEqual({ rowsPerSecond: null, etaSeconds: null });
    // 1,000 rows in 2 s: 500 rows/s; 9,000 estimated rows left → 18 s.
    expect(m.add(sample(2000, 10, 1000, 9000))).toEqual({ rowsPerSecond: 500, etaSeconds: 18 });
  });

  it('falls back to the partition rate without estimates, and follows the recent pace', () => {
    const m = new ProgressMeter(2);
    m.add(sample(0, 0, 0, 0));
    expect(m.add(sample(10_000, 10, 0, 0)).etaSeconds).toBe(90);
    // The window drops the first sample: 30 partitions in the last 10 s.
    expect(m.add(sample(20_000, 40, 0, 0)).etaSeconds).toBe(20);
  });
});

describe('progress output', () => {
  it('formats durations for people', () => {
    expect(formatDuration(null)).toBe('—');
    expect(formatDuration(42)).toBe('42s');
    expect(formatDuration(125)).toBe('2m05s');
    expect(formatDuration(3 * 3600 + 7 * 60)).toBe('3h07m');
  });

  it('prints one plain line with counts, rate, ETA and the pause flags', () => {
    const s = { ...sample(Date.parse('2026-01-01T00:00:00Z'), 25, 0, 0), paused: { operator: true, throttle: true } };
    expect(progressLine(s, { rowsPerSecond: 12345.6, etaSeconds: 61 })).toBe(
      '2026-01-01T00:00:00.000Z r@1 BUILDING: 25/100 partitions built (25.0%), 2 running, 1 failed; 12,346 rows/s; ETA 1m01s; PAUSED (operator, throttle)',
    );
  });
});
