// Token buckets in memory, one per key (a client address, a subject): `burst` at once, then
// `perMinute`. For POST /login (issue 28): without a rate, one client could try tokens as fast
// as it liked, and one token's holder could log in 10,000 times a second. In memory, per API
// process: a second replica has its own buckets, which doubles the rate and no more.
export interface RateLimits {
  burst: number;
  perMinute: number;
}

interface Bucket {
  tokens: number;
  at: number;
}

/** Keys remembered at most; past it the least recently seen key is forgotten (its bucket refills). */
const MAX_KEYS = 10_000;

export class TokenBuckets {
  readonly #buckets = new Map<string, Bucket>();
  readonly #perMs: number;

  constructor(
    readonly limits: RateLimits,
    readonly now: () => number = Date.now,
  ) {
    this.#perMs = limits.perMinute / 60_000;
  }

  /** Takes one token for `key`: 0 when there was one, else the whole seconds until one is back. */
  take(key: string): number {
    const t = this.now();
    const old = this.#buckets.get(key);
    const bucket = old ? { tokens: Math.min(this.limits.burst, old.tokens + (t - old.at) * this.#perMs), at: t } : { tokens: this.limits.burst, at: t };
    // Re-inserted, so the map's first key is the least recently seen.
    this.#buckets.delete(key);
    this.#buckets.set(key, bucket);
    if (this.#buckets.size > MAX_KEYS) this.#buckets.delete(this.#buckets.keys().next().value!);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - bucket.tokens) / this.#perMs / 1000));
  }
}
