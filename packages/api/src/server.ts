// `genfill api`: wire the registry pool, one fail-fast Redis client shared by every queue,
// the process's metrics registry and the tokens, then listen. It starts without Redis (so
// /healthz can say Redis is down) but not against a registry schema it does not know.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Config } from '@genfill/contracts';
import { createMetricsRegistry, type Logger, type Registry } from '@genfill/observability';
import { createServiceRedis, type Redis } from '@genfill/queue';
import { assertSchemaCurrent, createPool, type Db } from '@genfill/registry';
import { createApp } from './app.ts';
import { SessionStore, TokenTable } from './auth.ts';
import { registerQueueGauges } from './metrics.ts';
import { ReleaseQueues } from './queues.ts';

export interface ApiServerOptions {
  config: Config;
  log: Logger;
  /** Overrides GENFILL_API_PORT; 0 picks a free port (tests). */
  port?: number;
  host?: string;
  /** A registry pool to use; otherwise the API makes and closes its own. */
  db?: Db;
  /**
   * The process's metrics registry (made here when omitted). apps/api (@genfill/service) also
   * serves it on GENFILL_METRICS_PORT with the probes' /healthz and /readyz.
   */
  registry?: Registry;
}

export interface ApiServer {
  port: number;
  url: string;
  registry: Registry;
  close(): Promise<void>;
}

export async function startApi(o: ApiServerOptions): Promise<ApiServer> {
  const { config, log } = o;
  const tokens = new TokenTable(config.GENFILL_API_TOKENS ?? []);
  const db = o.db ?? createPool(config, 'genfill-api', 8);
  let redis: Redis | undefined;
  let queues: ReleaseQueues | undefined;
  let server: Server | undefined;

  const close = async () => {
    if (server?.listening) {
      const s = server;
      await new Promise<void>((resolve) => {
        s.close(() => resolve());
        // Keep-alive sockets (a browser on Bull Board) would hold close() open.
        s.closeAllConnections();
      });
    }
    await queues?.close();
    await redis?.quit().catch(() => redis?.disconnect());
    if (!o.db) await db.end();
  };

  try {
    await assertSchemaCurrent(db);
    redis = createServiceRedis(config.REDIS_URL, log);
    const registry = o.registry ?? createMetricsRegistry('api');
    queues = new ReleaseQueues(db, redis, config.GENFILL_QUEUE_PREFIX, log);
    registerQueueGauges(registry, { db, redis, queues, log });
    const app = createApp({ db, redis, prefix: config.GENFILL_QUEUE_PREFIX, tokens, sessions: new SessionStore(), queues, registry, log, trustProxy: config.GENFILL_API_TRUST_PROXY,
      readerLeaseTtlMs: config.GENFILL_READER_LEASE_TTL * 1000 });

    const s = createServer(app);
    server = s;
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.listen(o.port ?? config.GENFILL_API_PORT, o.host, () => resolve());
    });
    const port = (s.address() as AddressInfo).port;
    if (tokens.size === 0) log.warn('GENFILL_API_TOKENS is not set: every route but /healthz, /metrics and /login answers 401');
    log.info({ port, prefix: config.GENFILL_QUEUE_PREFIX, tokens: tokens.size, trustProxy: config.GENFILL_API_TRUST_PROXY ?? false }, 'api listening');
    return { port, url: `http://127.0.0.1:${port}`, registry, close };
  } catch (err) {
    await close();
    throw err;
  }
}
