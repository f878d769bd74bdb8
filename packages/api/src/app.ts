// The express application: unauthenticated probes first (/healthz, /metrics, /login), then
// every other route behind a token or a login session, whose state changes must come from
// this API's own origin (same-origin.ts).
import cookieParser from 'cookie-parser';
import express, { type Express } from 'express';
import type { Config } from '@genfill/contracts';
import type { Logger, Registry } from '@genfill/observability';
import type { Dispatcher } from '@genfill/queue';
import type { Redis } from '@genfill/queue';
import type { Db } from '@genfill/registry';
import { authenticate, type SessionStore, type TokenTable } from './auth.ts';
import { boardRoutes } from './board.ts';
import { eventRoutes, type IngestLimits } from './events.ts';
import { healthz } from './health.ts';
import { errorHandler, notFound } from './http-errors.ts';
import { loginRoutes } from './login.ts';
import { httpMetrics } from './metrics.ts';
import type { ReleaseQueues } from './queues.ts';
import { releaseRoutes } from './releases.ts';
import { rowRoutes } from './rows.ts';
import type { RateLimits } from './rate-limit.ts';
import { requireSameOriginForCookies } from './same-origin.ts';
import { securityHeaders } from './security-headers.ts';
import { statusRoutes } from './status-routes.ts';

export interface AppDeps {
  /** The pool of reads and verbs. */
  db: Db;
  /** The ingest pool: POST /datasets/:ds/events only, once its body is read. */
  ingestDb: Db;
  redis: Redis;
  prefix: string;
  tokens: TokenTable;
  sessions: SessionStore;
  /** POST /login per client address and per subject (GENFILL_API_LOGIN_BURST, GENFILL_API_LOGIN_PER_MINUTE). */
  loginLimits?: RateLimits;
  queues: ReleaseQueues;
  registry: Registry;
  log: Logger;
  /** express's `trust proxy` (GENFILL_API_TRUST_PROXY); unset trusts no proxy. */
  trustProxy?: Config['GENFILL_API_TRUST_PROXY'];
  /** POST /datasets/:ds/events: the upload bounds (GENFILL_API_INGEST_*). */
  ingestLimits: IngestLimits;
  /** GET /datasets/:ds/rows: GENFILL_READER_LEASE_TTL in milliseconds (default 5 minutes). */
  readerLeaseTtlMs?: number;
}

export function createApp(deps: AppDeps): Express {
  const { db, redis, registry, log } = deps;
  const dispatcher: Dispatcher = { redis, prefix: deps.prefix };
  const app = express();
  app.disable('x-powered-by');
  app.use(securityHeaders);
  // req.protocol, req.secure (the cookie's Secure flag), req.host (the own origin) and req.ip
  // read X-Forwarded-* only from a proxy trusted here.
  if (deps.trustProxy !== undefined) app.set('trust proxy', deps.trustProxy);
  app.use(httpMetrics(registry));

  app.get('/healthz', healthz({ db, redis }));
  // Unauthenticated on purpose: a Prometheus scrape carries no bearer token without extra
  // configuration, and the text holds counts per release, no rows or keys. Keep the API
  // port cluster-internal, as the rest of it is.
  app.get('/metrics', async (_req, res) => {
    res.type(registry.contentType).send(await registry.metrics());
  });

  app.use(cookieParser());
  app.use(loginRoutes({ tokens: deps.tokens, sessions: deps.sessions, log, limits: deps.loginLimits }));
  app.use(authenticate(deps.tokens, deps.sessions));
  app.use(requireSameOriginForCookies(log));
  app.use(releaseRoutes({ db, dispatcher, queues: deps.queues, log }));
  app.use(boardRoutes({ db, queues: deps.queues, log }));
  app.use(eventRoutes({ db, ingestDb: deps.ingestDb, log, registry, limits: deps.ingestLimits }));
  app.use(rowRoutes({ db, log, leaseTtlMs: deps.readerLeaseTtlMs }));
  app.use(statusRoutes({ db, dispatcher, log }));
  app.use(notFound);
  app.use(errorHandler(log));
  return app;
}
