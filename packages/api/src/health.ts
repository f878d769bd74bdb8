// GET /healthz: PostgreSQL answers, its registry schema is exactly what this code knows, and
// Redis answers. 200 with each check, or 503 naming what failed. No authentication: probes
// (Kubernetes, load balancers) send none, and the answer holds no release data.
import type { RequestHandler } from 'express';
import type { Redis } from '@genfill/queue';
import { LATEST_VERSION, type Db } from '@genfill/registry';
import { dependencyChecks } from '@genfill/service';

export function healthz(deps: { db: Db; redis: Redis }): RequestHandler {
  return async (_req, res) => {
    // The same probes as every service's /readyz; the API names the schema check `migrations`.
    const { postgres, schema, redis } = await dependencyChecks(deps.db, deps.redis);
    const migrations = postgres.ok ? { ...schema, expectedVersion: LATEST_VERSION } : schema;
    const checks = { postgres, migrations, redis };
    const failed = Object.entries(checks).filter(([, c]) => !c.ok).map(([name]) => name);
    res.setHeader('Cache-Control', 'no-store');
    res.status(failed.length === 0 ? 200 : 503).json({ status: failed.length === 0 ? 'ok' : 'unavailable', failed, checks });
  };
}
