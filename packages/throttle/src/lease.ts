// The Redis lease that elects one controller per release. Redis only elects: it cannot stop a
// holder that stalled past its lease from acting, which is why every decision also carries
// the Postgres fencing token (decisions.ts) — the lease decides who should decide, the fence
// decides whose decision lands.
import type { Redis } from '@genfill/queue';

// Renew or release only while the key still holds our value (compare-and-set in one script).
const RENEW = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end`;
const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`;

export function leaseKey(prefix: string, release: string): string {
  // Under the queue's hash-tagged prefix, so it lives in the same cluster slot as the queue.
  return `${prefix}:throttle:${release}:leader`;
}

export class RedisLease {
  constructor(
    private readonly redis: Redis,
    private readonly key: string,
    /** Unique per candidate, so a renewal can tell our lease from a successor's. */
    private readonly value: string,
    private readonly ttlMs: number,
  ) {}

  /** SET NX PX: true when we now hold the lease. */
  async acquire(): Promise<boolean> {
    return (await this.redis.set(this.key, this.value, 'PX', this.ttlMs, 'NX')) === 'OK';
  }

  /** Extend our lease; false when it expired or someone else holds it. */
  async renew(): Promise<boolean> {
    return Number(await this.redis.eval(RENEW, 1, this.key, this.value, String(this.ttlMs))) === 1;
  }

  async release(): Promise<void> {
    await this.redis.eval(RELEASE, 1, this.key, this.value);
  }
}
