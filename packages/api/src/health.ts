// GET /healthz: PostgreSQL answers, its registry schema is exactly what this code knows, and
// Redis answers. 200 with each check, or 503 naming what failed. No authentication: probes
// (Kubernetes, load balancers) send none, and the answer holds no release data.
import type { RequestHandler } from 'express';
import { withDeadline, type Redis } from '@genfill/queue';
import { assertSchemaCurrent, LATEST_VERSION, type Db } from '@genfill/registry';

export interface Check {
  ok: boolean;
  ms: number;
  error?: string;
}

const TIMEOUT_MS = 2_000;

async function check(what: string, probe: () => Promise<unknown>): Promise<Check> {
  const started = performance.now();
  const ms = () => Math.round((performance.now() - started) * 10) / 10;
  try {
    await withDeadline(probe(), TIMEOUT_MS, what);
    return { ok: true, ms: ms() };
  } catch (err) {
    return { ok: false, ms: ms(), error: (err as Error).message };
  }
}

export function healthz(deps: { db: Db; redis: Redis }): RequestHandler {
  return async (_req, res) => {
    const [postgres, redis] = await Promise.all([
      check('PostgreSQL', () => deps.db.query('SELECT 1')),
      check('Redis PING', () => deps.redis.ping()),
    ]);
    const migrations: Check & { expectedVersion?: number } = postgres.ok
      ? { ...(await check('schema check', () => assertSchemaCurrent(deps.db))), expectedVersion: LATEST_VERSION }
      : { ok: false, ms: 0, error: 'not checked: PostgreSQL is not reachable' };
    const checks = { postgres, migrations, redis };
    const failed = Object.entries(checks).filter(([, c]) => !c.ok).map(([name]) => name);
    res.setHeader('Cache-Control', 'no-store');
    res.status(failed.length === 0 ? 200 : 503).json({ status: failed.length === 0 ? 'ok' : 'unavailable', failed, checks });
  };
}
