// Redis for the CLI's verbs: connected only when a verb reaches its Redis half (after the
// registry part is committed), fail-fast, and closed when the verb ends.
import { planAndDispatch, type PlanDispatchResult } from '@genfill/planner';
import { asRedisUnavailable, connectRedis, type Dispatcher, type Redis, warnIfEvicting } from '@genfill/queue';
import type { Context } from './context.ts';
import { viaService } from './requests.ts';

export class DispatchSession {
  #redis: Redis | undefined;
  constructor(private readonly ctx: Context) {}

  async connect(): Promise<Dispatcher> {
    if (!this.#redis) {
      this.#redis = await connectRedis(this.ctx.config.REDIS_URL);
      await warnIfEvicting(this.#redis, { warn: (_fields, msg) => this.ctx.io.err(`warning: ${msg}`) });
    }
    return { redis: this.#redis, prefix: this.ctx.config.GENFILL_QUEUE_PREFIX, window: this.ctx.config.GENFILL_DISPATCH_WINDOW };
  }

  async close(): Promise<void> {
    const redis = this.#redis;
    this.#redis = undefined;
    if (redis) await redis.quit().catch(() => redis.disconnect());
  }
}

export async function withDispatch<T>(ctx: Context, fn: (session: DispatchSession) => Promise<T>): Promise<T> {
  const session = new DispatchSession(ctx);
  try {
    return await fn(session);
  } finally {
    await session.close();
  }
}

/**
 * The Redis half of an operator verb whose registry half is already committed: a Redis that
 * does not answer becomes a warning (returned, and printed to stderr), not a failure.
 */
export async function bestEffort<T>(ctx: Context, what: string, fn: (d: Dispatcher) => Promise<T>): Promise<{ value: T | null; warning: string | null }> {
  return withDispatch(ctx, async (session) => {
    try {
      return { value: await fn(await session.connect()), warning: null };
    } catch (err) {
      const down = asRedisUnavailable(err);
      if (!down) throw err;
      const warning = `${down.message}: ${what}`;
      ctx.io.err(`warning: ${warning}`);
      return { value: null, warning };
    }
  });
}

/**
 * `genfill plan` as the plan verb and the demo run it: here for a service login, otherwise as
 * a request the planner service executes.
 */
export async function planWithDispatch(ctx: Context, release: string): Promise<PlanDispatchResult> {
  return viaService(ctx, { kind: 'plan', release, args: {} }, (db) => withDispatch(ctx, (session) => planAndDispatch(db, release, () => session.connect())));
}
