// Redis connections. Redis holds only dispatch: losing it delays work but never loses it, so
// every caller here must be able to say "Redis is down" clearly and carry on or stop cleanly.
//
// REDIS_URL names one server (redis://, rediss://) or a Redis Cluster by one or more of its
// nodes (redis+cluster://host:port[,host:port…], rediss+cluster:// for TLS); the client
// discovers the other nodes. Every key genfill writes sits under the hash-tagged queue prefix
// (`{genfill}`), so a queue's Lua scripts and pipelines stay in one slot of one node.
import { Cluster, Redis as Standalone, type RedisOptions } from 'ioredis';
import { RedisUnavailableError } from '@genfill/contracts';

/** A client of one Redis server or of a Redis Cluster: BullMQ and every caller here take either. */
export type Redis = Standalone | Cluster;
export type { RedisOptions };

/** True for a client createRedis can return (what BullMQ was given as its connection). */
export function isRedisClient(value: unknown): value is Redis {
  return value instanceof Standalone || value instanceof Cluster;
}

export interface ClusterTarget {
  nodes: { host: string; port: number }[];
  tls: boolean;
  username?: string;
  password?: string;
}

const CLUSTER_URL = /^(rediss?)\+cluster:\/\/(?:([^@/]*)@)?([^/?#@]+)\/?$/;

/** The seed nodes and credentials of a `redis+cluster://` URL; null for a single-server URL. */
export function clusterTarget(url: string): ClusterTarget | null {
  const m = CLUSTER_URL.exec(url);
  if (!m) return null;
  const [user, pass] = (m[2] ?? '').split(':', 2).map((s) => (s ? decodeURIComponent(s) : undefined));
  const nodes = m[3]!.split(',').map((hp) => {
    const at = hp.lastIndexOf(':');
    const host = hp.slice(0, at).replace(/^\[(.*)\]$/, '$1');
    return { host, port: Number(hp.slice(at + 1)) };
  });
  return { nodes, tls: m[1] === 'rediss', ...(user ? { username: user } : {}), ...(pass ? { password: pass } : {}) };
}

export interface CreateRedisOptions extends RedisOptions {
  /** Connection errors; the command that fails reports them too. */
  onError?: (err: Error) => void;
}

/**
 * A client for BullMQ. `maxRetriesPerRequest: null` is what a worker's blocking connection
 * needs; producers (plan, pause, cancel) pass FAIL_FAST instead so a command against a dead
 * Redis fails within seconds rather than waiting for it forever.
 */
export function createRedis(url: string, opts: CreateRedisOptions = {}): Redis {
  const { onError, ...options } = opts;
  const cluster = clusterTarget(url);
  const redis: Redis = cluster
    ? new Cluster(cluster.nodes, {
        // Per-node options: BullMQ reads maxRetriesPerRequest of a cluster from here.
        redisOptions: {
          maxRetriesPerRequest: null,
          ...(cluster.username ? { username: cluster.username } : {}),
          ...(cluster.password ? { password: cluster.password } : {}),
          ...(cluster.tls ? { tls: {} } : {}),
          ...options,
        },
      })
    : new Standalone(url, { maxRetriesPerRequest: null, ...options });
  // Without a listener ioredis prints every reconnect failure to the console.
  redis.on('error', onError ?? (() => undefined));
  return redis;
}

export const FAIL_FAST: RedisOptions = { maxRetriesPerRequest: 1, connectTimeout: 3000 };

/** host:port/db of a redis:// URL, without credentials, for messages. */
export function redisAddress(url: string): string {
  const cluster = clusterTarget(url);
  if (cluster) return `cluster ${cluster.nodes.map((n) => `${n.host}:${n.port}`).join(',')}`;
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || '6379'}${u.pathname && u.pathname !== '/' ? u.pathname : ''}`;
  } catch {
    return 'the configured REDIS_URL';
  }
}

/** Reject with RedisUnavailableError when `work` takes longer than `ms`. */
export async function withDeadline<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new RedisUnavailableError(`${what} did not finish within ${Math.round(ms / 1000)}s`)), ms);
  });
  try {
    return await Promise.race([work, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A fail-fast client that answered a PING. BullMQ waits for a connection to become ready
 * without a limit, so callers that must not hang probe first.
 */
export async function connectRedis(url: string, opts: CreateRedisOptions = {}): Promise<Redis> {
  // The socket's own error (ECONNREFUSED, ENOTFOUND…) says more than "max retries reached".
  let socketError: Error | undefined;
  const redis = createRedis(url, {
    ...FAIL_FAST,
    ...opts,
    onError: (err) => {
      socketError = err;
      opts.onError?.(err);
    },
  });
  try {
    await withDeadline(redis.ping(), 10_000, `PING to Redis at ${redisAddress(url)}`);
    return redis;
  } catch (err) {
    redis.disconnect();
    const why = socketError?.message ?? (err as Error).message;
    throw new RedisUnavailableError(`Redis at ${redisAddress(url)} could not be reached (${why})`, { cause: err });
  }
}

/** Wait until `redis` answers a PING, at most `ms`; false when it does not. */
export async function redisAnswers(redis: Redis, ms = 5000): Promise<boolean> {
  try {
    await withDeadline(redis.ping(), ms, 'PING');
    return true;
  } catch {
    return false;
  }
}

const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'ENOTFOUND', 'EHOSTUNREACH', 'EPIPE']);

/**
 * The error as a RedisUnavailableError when it means "Redis is not answering" (ioredis gives
 * up a command after its retries, or the socket failed); null for anything else.
 */
export function asRedisUnavailable(err: unknown): RedisUnavailableError | null {
  if (err instanceof RedisUnavailableError) return err;
  const e = err as { name?: string; code?: string; message?: string } | null;
  if (!e) return null;
  if (e.name === 'MaxRetriesPerRequestError' || (e.code && CONNECTION_CODES.has(e.code)) || /Connection is closed|Stream isn't writeable/.test(e.message ?? '')) {
    return new RedisUnavailableError(`Redis could not be reached (${e.message})`, { cause: err });
  }
  return null;
}

export interface WarnLog {
  warn(obj: object, msg: string): void;
}

/**
 * BullMQ loses jobs silently when Redis evicts keys. Returns the policy (null when CONFIG is
 * disabled, as on some managed services) and warns unless it is `noeviction`.
 */
export async function warnIfEvicting(redis: Redis, log: WarnLog): Promise<string | null> {
  let reply: unknown;
  try {
    reply = await redis.call('CONFIG', 'GET', 'maxmemory-policy');
  } catch {
    return null;
  }
  // RESP2-shaped replies are [name, value]; a client in RESP3 mapping mode returns an object.
  const policy = Array.isArray(reply)
    ? reply[1]
    : reply && typeof reply === 'object'
      ? (reply as Record<string, unknown>)['maxmemory-policy']
      : undefined;
  if (typeof policy !== 'string') return null;
  if (policy !== 'noeviction') {
    log.warn(
      { maxmemoryPolicy: policy },
      `Redis maxmemory-policy is ${policy}, not noeviction: Redis may evict queued jobs under memory pressure. ` +
        'Nothing is lost (the registry is the record and `genfill plan` re-enqueues), but set maxmemory-policy noeviction',
    );
  }
  return policy;
}

/**
 * A long-running service's Redis client: fails fast, and logs each distinct connection error
 * once (ioredis reports every reconnect attempt) until the connection is ready again.
 */
export function createServiceRedis(url: string, log: WarnLog): Redis {
  let last = '';
  const redis = createRedis(url, {
    ...FAIL_FAST,
    onError: (err) => {
      if (err.message !== last) log.warn({ err: err.message, redis: redisAddress(url) }, 'Redis connection error');
      last = err.message;
    },
  });
  redis.on('ready', () => (last = ''));
  return redis;
}
