import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Db } from '@genfill/registry';
import { shareBucket, workerSlots } from '../src/admission.ts';
import { Admission } from '../src/index.ts';

/** A registry that answers the two queries admission makes: the latest decision and a partition's estimate. */
function fakeRegistry(decision: () => Record<string, unknown> | null): Db {
  const query = async (sql: string) => {
    if (sql.includes('genfill.throttle_decisions')) {
      const d = decision();
      return { rows: d ? [d] : [] };
    }
    return { rows: [{ n: '0' }] };
  };
  return { query } as unknown as Db;
}

describe('admission bucket', () => {
  afterEach(() => vi.useRealTimers());

  it('refills at the full share: one second of clock adds one second of rows', async () => {
    // Only the refill clock is fake; bottleneck's own zero-delay setTimeouts stay real.
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'Date'] });
    const b = shareBucket(20_000);
    try {
      // It starts with one step (100 ms of the share) and holds at most one second of it.
      expect(await b.currentReservoir()).toBe(2_000);
      await vi.advanceTimersByTimeAsync(500);
      const half = await b.currentReservoir();
      // Bottleneck's default 250 ms heartbeat added a 100 ms step per beat: 6,000 here.
      expect(half).toBeGreaterThanOrEqual(10_000);
      expect(half).toBeLessThanOrEqual(12_000);
      await vi.advanceTimersByTimeAsync(2_000);
      expect(await b.currentReservoir()).toBe(20_000);
    } finally {
      await b.stop();
    }
  });

  it("spreads the queue's concurrency over the live workers, at least one each", () => {
    expect(workerSlots(2, 2)).toBe(1);
    expect(workerSlots(3, 2)).toBe(2);
    expect(workerSlots(4, 1)).toBe(4);
    expect(workerSlots(1, 3)).toBe(1);
    expect(workerSlots(5, 0)).toBe(5);
  });

  it('admits nothing before the controller has decided, then follows the decision', async () => {
    let decided: Record<string, unknown> | null = null;
    const admission = new Admission(fakeRegistry(() => decided));
    try {
      let admitted = false;
      const waiting = admission.admit('r@1', 'p1').then(() => (admitted = true));
      // Two refreshes go by without a decision: still waiting, and no slots to spread.
      await new Promise((r) => setTimeout(r, 2_100));
      expect(admitted).toBe(false);
      expect(await admission.slots('r@1')).toBeNull();
      decided = {
        id: 1, release: 'r@1', token: 1, holder: 'h', at: new Date(), signals: {}, binding: 'none', ratio: null, action: 'hold',
        concurrency: 3, rows_per_second: 1_000, live_workers: 2, worker_rows_per_second: 500, throttle_paused: false,
      };
      await waiting;
      expect(admitted).toBe(true);
      expect(admission.share('r@1')).toBe(500);
      expect(await admission.slots('r@1')).toBe(2);
    } finally {
      await admission.close();
    }
  });
});
