// Configuration comes only from the environment, parsed once at start. A malformed value is
// a ConfigError naming the variable — never a silent default. Every duration is read in the
// one grammar of duration.ts (`500ms`, `30s`, `2m`, `24h`, `7d`).
import { isIP } from 'node:net';
import { z } from 'zod';
import { durationSetting } from './duration.ts';
import { ConfigError, type Problem } from './errors.ts';

const postgresUrl = z
  .string()
  .refine((v) => /^postgres(ql)?:\/\//.test(v) && URL.canParse(v), 'must be a postgres:// URL');
/** One server (redis://, rediss://) or a Redis Cluster by its seed nodes (redis+cluster://host:port,host:port). */
const REDIS_CLUSTER_URL = /^rediss?\+cluster:\/\/([^@/]*@)?[^/?#@,:]+:\d{1,5}(,[^/?#@,:]+:\d{1,5})*\/?$/;
const redisUrl = z
  .string()
  .refine(
    (v) => (/^rediss?:\/\//.test(v) && URL.canParse(v)) || REDIS_CLUSTER_URL.test(v),
    'must be a redis:// URL, or redis+cluster://host:port[,host:port…] for a Redis Cluster',
  );
const list = <T extends z.ZodType<unknown, string>>(item: T) =>
  z
    .string()
    .transform((v) => v.split(',').map((s) => s.trim()).filter((s) => s.length > 0))
    .pipe(z.array(item));
const port = z.coerce.number().int().min(1).max(65535);
/** A PostgreSQL timeout in milliseconds; a bare number is milliseconds, as the server reads it, and 0 turns it off. */
const pgTimeout = durationSetting({ bareUnit: 'ms' });
/** A retention like `7d`, `24h`, `30m` or `90s`, in whole seconds; it always names its unit. */
const retention = (max?: number) => durationSetting({ bareUnit: null, in: 's', exclusiveMin: true, max });
const apiToken = z
  .string()
  .regex(/^[^:]+:(viewer|operator|approver):.{16,}$/, 'each entry is subject:role:token, role viewer|operator|approver, token at least 16 characters')
  .transform((v) => {
    const [subject, role, ...rest] = v.split(':');
    return { subject: subject!, role: role as 'viewer' | 'operator' | 'approver', token: rest.join(':') };
  });

/** The names proxy-addr (express's `trust proxy`) expands to subnets. */
const PROXY_RANGES = ['loopback', 'linklocal', 'uniquelocal'];

/** An address, `address/prefix` or (IPv4) `address/netmask`, as proxy-addr accepts them. */
function isProxySubnet(v: string): boolean {
  if (PROXY_RANGES.includes(v)) return true;
  const slash = v.lastIndexOf('/');
  const kind = isIP(slash === -1 ? v : v.slice(0, slash));
  if (kind === 0) return false;
  if (slash === -1) return true;
  const range = v.slice(slash + 1);
  if (/^\d+$/.test(range)) return Number(range) >= 1 && Number(range) <= (kind === 4 ? 32 : 128);
  if (kind !== 4 || isIP(range) !== 4) return false;
  // A netmask: ones then zeros, not all zeros.
  const mask = range.split('.').reduce((n, octet) => n * 256 + Number(octet), 0);
  const hostBits = 2 ** 32 - 1 - mask;
  return mask !== 0 && (hostBits & (hostBits + 1)) === 0;
}

/**
 * express's `trust proxy` setting: `true` (every hop — only when the proxy overwrites the
 * X-Forwarded-* headers), `false`, a number of hops, or the proxies' addresses and subnets.
 * Parsed here so a typo is a ConfigError naming the variable, not a TypeError from express.
 */
const trustProxy = z
  .string()
  .trim()
  .transform((v, ctx): boolean | number | string[] => {
    if (v === 'true' || v === 'false') return v === 'true';
    if (/^\d+$/.test(v)) return Number(v);
    const subnets = v.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
    const bad = subnets.filter((s) => !isProxySubnet(s));
    if (subnets.length > 0 && bad.length === 0) return subnets;
    ctx.addIssue({
      code: 'custom',
      message: `must be true, false, a number of proxy hops, or a comma-separated list of proxy addresses and subnets (loopback, linklocal, uniquelocal, 10.0.0.0/8, …); not ${bad.join(', ') || v}`,
    });
    return z.NEVER;
  });

export const configSchema = z.object({
  DATABASE_URL: postgresUrl.default('postgres://postgres@127.0.0.1:5432/postgres'),
  REDIS_URL: redisUrl.default('redis://127.0.0.1:6379'),
  GENFILL_QUEUE_PREFIX: z
    .string()
    .min(1)
    .refine((v) => !v.includes(':'), 'must not contain ":" (BullMQ uses it as the separator)')
    .default('{genfill}'),
  GENFILL_RELEASE: list(z.string().min(1)).optional(),
  GENFILL_STATEMENT_TIMEOUT: pgTimeout.optional(),
  GENFILL_LOCK_TIMEOUT: pgTimeout.optional(),
  GENFILL_IDLE_IN_TRANSACTION_TIMEOUT: pgTimeout.optional(),
  GENFILL_METRICS_PORT: port.optional(),
  GENFILL_API_PORT: port.default(3000),
  GENFILL_API_TOKENS: list(apiToken).optional(),
  GENFILL_API_TRUST_PROXY: trustProxy.optional(),
  GENFILL_REPLICA_URLS: list(postgresUrl).optional(),
  /**
   * A login that is a member of genfill_owner, for the reconciler's retention and pruning
   * (DETACH … CONCURRENTLY and DROP need the tables' owner). Unset: DATABASE_URL's login does
   * SET ROLE genfill_owner, which needs that membership.
   */
  GENFILL_OWNER_DATABASE_URL: postgresUrl.optional(),
  GENFILL_CANARY_SQL: z.string().min(1).optional(),
  /** How often the canary runs, in milliseconds (a bare number is milliseconds, as the name says). */
  GENFILL_CANARY_EVERY_MS: durationSetting({ bareUnit: 'ms', min: 10, max: 60_000 }).optional(),
  GENFILL_PROMETHEUS_URL: z.url({ protocol: /^https?$/ }).optional(),
  GENFILL_FOREGROUND_QUERY: z.string().min(1).optional(),
  // Owner-held settings (genfill.settings, migration 0026). The verbs read the settings, never
  // these variables: `genfill migrate`, run as the owner, writes each one that is set into its
  // setting (unset leaves the setting as it is; the defaults are the migration's).
  /** ingest.max_pending_events: pending events per dataset plus one file (installed as 1,000,000). */
  GENFILL_MAX_PENDING_EVENTS: z.coerce.number().int().positive().optional(),
  /** ingress.tombstone_retention, in seconds (installed as 7 days). */
  GENFILL_TOMBSTONE_RETENTION: retention().optional(),
  /** reader_lease.max_lifetime, in seconds: a reader lease's life from its first grant (installed as 24 hours). */
  GENFILL_READER_LEASE_MAX_LIFETIME: retention().optional(),
  /** request.max_open_per_principal: open requests one principal may have (installed as 20). */
  GENFILL_MAX_OPEN_REQUESTS: z.coerce.number().int().positive().max(1_000_000).optional(),
  // Jobs a release keeps in Redis at most; the registry holds every partition, the planner and
  // the workers top the window up as partitions finish (issue 19).
  GENFILL_DISPATCH_WINDOW: z.coerce.number().int().min(1).max(10_000).default(10_000),
  /** How long a pinned read's lease on its generation lasts past each page, in seconds (default 5 minutes). */
  GENFILL_READER_LEASE_TTL: retention(86_400_000).default(300),
  // --- The API's own bounds (issue 28): every API connection's timeouts, the ingest endpoint's
  // pool and body bounds, sessions per subject and the /login rate. ---
  /** statement_timeout of every API connection (reads, verbs); a bare number is milliseconds. */
  GENFILL_API_STATEMENT_TIMEOUT: durationSetting({ bareUnit: 'ms', min: 1 }).default(30_000),
  /** idle_in_transaction_session_timeout of every API connection, ingest included. */
  GENFILL_API_IDLE_IN_TRANSACTION_TIMEOUT: durationSetting({ bareUnit: 'ms', min: 1 }).default(60_000),
  /** statement_timeout of the ingest pool's connections (a large file's apply takes longer than a read). */
  GENFILL_API_INGEST_STATEMENT_TIMEOUT: durationSetting({ bareUnit: 'ms', min: 1 }).default(600_000),
  /** Connections of the ingest pool, apart from the pool that serves reads and verbs. */
  GENFILL_API_INGEST_POOL: z.coerce.number().int().min(1).max(64).default(2),
  /** Uploads whose body is being read at once; one more is answered 429 before its body is read. */
  GENFILL_API_INGEST_MAX_UPLOADS: z.coerce.number().int().min(1).max(1_000).default(8),
  /** The largest body POST /datasets/:ds/events reads, in bytes (413 past it). */
  GENFILL_API_INGEST_MAX_BYTES: z.coerce.number().int().min(1024).default(16 * 1024 * 1024),
  /** The slowest upload accepted: fewer bytes than this per second over one window is cut (408). */
  GENFILL_API_INGEST_MIN_BYTES_PER_SECOND: z.coerce.number().int().min(0).default(1024),
  /** The window the minimum body rate is measured over; a bare number is milliseconds. */
  GENFILL_API_INGEST_RATE_WINDOW: durationSetting({ bareUnit: 'ms', min: 100 }).default(10_000),
  /** The longest an upload's body may take to arrive, whatever its rate (408 past it). */
  GENFILL_API_INGEST_BODY_TIMEOUT: durationSetting({ bareUnit: 'ms', min: 100 }).default(300_000),
  /** Browser sessions one subject holds at most; a new login evicts that subject's oldest. */
  GENFILL_API_SESSIONS_PER_SUBJECT: z.coerce.number().int().min(1).max(10_000).default(20),
  /** POST /login attempts a client address (and successful logins a subject) may make at once… */
  GENFILL_API_LOGIN_BURST: z.coerce.number().int().min(1).max(10_000).default(10),
  /** …and then per minute (a token bucket each; 429 with Retry-After past it). */
  GENFILL_API_LOGIN_PER_MINUTE: z.coerce.number().positive().max(60_000).default(6),
  /**
   * How often the reconciler service checks each live dataset against the transform map of its
   * source (the drift check, issue 29); a new active generation is checked at once. Always with
   * a unit (`1h`, `30m`); default hourly.
   */
  GENFILL_DRIFT_CHECK_EVERY: durationSetting({ bareUnit: null, min: 1000 }).default(3_600_000),
  GENFILL_LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export type Config = z.infer<typeof configSchema>;
export type ApiToken = NonNullable<Config['GENFILL_API_TOKENS']>[number];

/** Parse the environment. Empty strings count as unset, as a shell's `VAR=` means. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const known = Object.keys(configSchema.shape);
  const input = Object.fromEntries(
    known.filter((k) => env[k] !== undefined && env[k] !== '').map((k) => [k, env[k]]),
  );
  const result = configSchema.safeParse(input);
  if (!result.success) {
    const problems: Problem[] = result.error.issues.map((i) => ({
      path: String(i.path[0] ?? ''),
      message: `${i.message} (environment variable)`,
    }));
    throw new ConfigError(problems);
  }
  return result.data;
}
