import { afterEach, describe, expect, it, vi } from 'vitest';
import { shareBucket, workerSlots } from '../src/index.ts';

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
});
