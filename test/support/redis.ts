// Each test file gets its own queue prefix on the machine's Redis, deleted after success and
// left behind for inspection after a failure (as test/support/db.ts does for databases).
import { randomBytes } from 'node:crypto';
import { createRedis, releaseQueue, type BuildQueue, type Redis } from '@genfill/queue';
import { afterAll, onTestFailed } from 'vitest';

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

export interface TestQueues {
  /** `{gftest-<label>-<random>}`: pass as GENFILL_QUEUE_PREFIX. */
  prefix: string;
  redis: Redis;
  /** A BullMQ queue of `release` under this prefix, closed after the file. */
  queue(release: string): BuildQueue;
  /** Every key under the prefix. */
  keys(): Promise<string[]>;
  /** Delete every key under the prefix (Redis "lost every key"). */
  clear(): Promise<number>;
  keep(): void;
}

/** Call at the top level of a test file (it registers its own afterAll). */
export function createTestQueues(label: string): TestQueues {
  const prefix = `{gftest-${label.replace(/[^a-z0-9]/gi, '-').toLowerCase().slice(0, 20)}-${randomBytes(4).toString('hex')}}`;
  const redis = createRedis(REDIS_URL);
  const queues: BuildQueue[] = [];
  let failed = false;
  const keys = () => redis.keys(`${prefix}*`);
  const clear = async () => {
    const all = await keys();
    return all.length === 0 ? 0 : redis.del(...all);
  };
  afterAll(async () => {
    // getVersion waits for a new queue's asynchronous meta write, which would outlive clear().
    await Promise.all(queues.map((q) => q.getVersion().catch(() => null)));
    await Promise.all(queues.map((q) => q.close()));
    if (failed) process.stderr.write(`kept Redis keys ${prefix}* for inspection\n`);
    else await clear();
    await redis.quit();
  });
  return {
    prefix,
    redis,
    queue(release) {
      const q = releaseQueue(release, { connection: redis, prefix });
      queues.push(q);
      return q;
    },
    keys,
    clear,
    keep: () => (failed = true),
  };
}

/** Register inside each test (or a beforeEach) so a failure keeps the keys. */
export function keepQueuesOnFailure(q: TestQueues): void {
  onTestFailed(() => q.keep());
}
