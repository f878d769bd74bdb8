// `genfill api`: wire the registry pools, one fail-fast Redis client shared by every queue,
// the process's metrics registry and the tokens, then listen. It starts without Redis (so
// /healthz can say Redis is down) but not against a registry schema it does not know.
//
// Two pools, both made here so that every connection the API opens carries its timeouts
// (GENFILL_API_STATEMENT_TIMEOUT, GENFILL_API_IDLE_IN_TRANSACTION_TIMEOUT): the pool of reads
// and verbs (8), and the ingest pool (GENFILL_API_INGEST_POOL, 2 by default) that only
// POST /datasets/:ds/events takes from, once its body is read — so uploads, however many and
// however slow, never hold a connection GET /releases needs.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Config } from '@genfill/contracts';
import { createMetricsRegistry, type Logger, type Registry } from '@genfill/observability';
import { createServiceRedis, type Redis } from '@genfill/queue';
import { assertSchemaCurrent, createPool } from '@genfill/registry';
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

/**
 * The config createPool reads, with the API's timeouts in place of the fleet's: every API
 * connection gets a statement_timeout and an idle_in_transaction_session_timeout, the ingest
 * pool a longer statement_timeout of its own (a large file's apply).
 */
function apiPoolConfig(config: Config, o: { ingest?: boolean } = {}): Config {
  return {
    ...config,
    GENFILL_STATEMENT_TIMEOUT: o.ingest ? config.GENFILL_API_INGEST_STATEMENT_TIMEOUT : config.GENFILL_API_STATEMENT_TIMEOUT,
    GENFILL_IDLE_IN_TRANSACTION_TIMEOUT: config.GENFILL_API_IDLE_IN_TRANSACTION_TIMEOUT,
  };
}

export async function startApi(o: ApiServerOptions): Promise<ApiServer> {
  const { config, log } = o;
  const tokens = new TokenTable(config.GENFILL_API_TOKENS ?? []);
  const db = createPool(apiPoolConfig(config), 'genfill-api', 8);
  const ingestDb = createPool(apiPoolConfig(config, { ingest: true }), 'genfill-api-ingest', config.GENFILL_API_INGEST_POOL);
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
    await Promise.all([db.end(), ingestDb.end()]);
  };

  try {
    await assertSchemaCurrent(db);
    redis = createServiceRedis(config.REDIS_URL, log);
    const registry = o.registry ?? createMetricsRegistry('api');
    queues = new ReleaseQueues(db, redis, config.GENFILL_QUEUE_PREFIX, log);
    registerQueueGauges(registry, { db, redis, queues, log });
    const app = createApp({
      db,
      ingestDb,
      redis,
      prefix: config.GENFILL_QUEUE_PREFIX,
      tokens,
      sessions: new SessionStore({ maxPerSubject: config.GENFILL_API_SESSIONS_PER_SUBJECT }),
      loginLimits: { burst: config.GENFILL_API_LOGIN_BURST, perMinute: config.GENFILL_API_LOGIN_PER_MINUTE },
      queues,
      registry,
      log,
      trustProxy: config.GENFILL_API_TRUST_PROXY,
      ingestLimits: {
        maxUploads: config.GENFILL_API_INGEST_MAX_UPLOADS,
        maxBytes: config.GENFILL_API_INGEST_MAX_BYTES,
        minBytesPerSecond: config.GENFILL_API_INGEST_MIN_BYTES_PER_SECOND,
        windowMs: config.GENFILL_API_INGEST_RATE_WINDOW,
        timeoutMs: config.GENFILL_API_INGEST_BODY_TIMEOUT,
      },
      readerLeaseTtlMs: config.GENFILL_READER_LEASE_TTL * 1000,
    });

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
