// GET /readyz of every service: PostgreSQL answers, the registry schema is exactly what this
// code knows, Redis answers — and the process has finished starting and is not draining.
// Its own fail-fast Redis client, connected on the first probe, so a probe measures whether
// Redis can be reached at all rather than the state of a worker's blocking connection.
import type { Config } from '@genfill/contracts';
import type { Check, Logger, Readiness as ReadinessReport } from '@genfill/observability';
import { createServiceRedis, withDeadline, type Redis } from '@genfill/queue';
import { assertSchemaCurrent, type Db } from '@genfill/registry';

const TIMEOUT_MS = 2_000;

/** One probe, bounded, with its time: what /readyz and the API's /healthz report per dependency. */
export async function timedCheck(what: string, probe: () => Promise<unknown>): Promise<Check> {
  const started = performance.now();
  const ms = () => Math.round((performance.now() - started) * 10) / 10;
  try {
    await withDeadline(probe(), TIMEOUT_MS, what);
    return { ok: true, ms: ms() };
  } catch (err) {
    return { ok: false, ms: ms(), error: (err as Error).message };
  }
}

/** PostgreSQL, the registry schema (only when PostgreSQL answers) and Redis, probed side by side. */
export async function dependencyChecks(db: Db, redis: Redis): Promise<{ postgres: Check; schema: Check; redis: Check }> {
  const [postgres, redisCheck] = await Promise.all([timedCheck('PostgreSQL', () => db.query('SELECT 1')), timedCheck('Redis PING', () => redis.ping())]);
  const schema = postgres.ok ? await timedCheck('schema check', () => assertSchemaCurrent(db)) : { ok: false, ms: 0, error: 'not checked: PostgreSQL is not reachable' };
  return { postgres, schema, redis: redisCheck };
}

export class Readiness {
  #phase: 'starting' | 'running' | 'draining' = 'starting';
  #redis: Redis | undefined;

  constructor(
    private readonly config: Config,
    private readonly log: Logger,
  ) {}

  started(): void {
    if (this.#phase === 'starting') this.#phase = 'running';
  }

  draining(): void {
    this.#phase = 'draining';
  }

  async check(db: Db): Promise<ReadinessReport> {
    this.#redis ??= createServiceRedis(this.config.REDIS_URL, this.log);
    const checks = await dependencyChecks(db, this.#redis);
    const reason = this.#phase === 'running' ? undefined : this.#phase;
    return { ok: reason === undefined && Object.values(checks).every((c) => c.ok), ...(reason ? { reason } : {}), checks };
  }

  async close(): Promise<void> {
    const redis = this.#redis;
    this.#redis = undefined;
    await redis?.quit().catch(() => redis.disconnect());
  }
}
