// What customers feel, as numbers the controller compares with the release's budget. Each
// signal is read once per controller tick; a signal that cannot be read says so (value null
// with an error) instead of pretending to be healthy or failing the tick.
import { parse } from 'libpg-query';
import pg from 'pg';
import { RELEASE_ACTIONS, type Db } from '@genfill/registry';

export type SignalName = 'replica_lag' | 'foreground_p95' | 'foreground_sli' | 'error_rate';

export interface Reading {
  name: SignalName;
  /** In the budget's unit (seconds, milliseconds, fraction); null when nothing was measured. */
  value: number | null;
  detail: Record<string, unknown>;
}

export interface Signal {
  readonly name: SignalName;
  read(): Promise<Reading>;
  close(): Promise<void>;
}

const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

/** The primary's view of every standby: replay_lag, and the bytes not yet replayed. */
export async function primaryReplication(db: Db): Promise<{ name: string; lagSeconds: number | null; bytes: number | null }[]> {
  const { rows } = await db.query<{ name: string; lag_s: string | null; bytes: string | null }>(
    `SELECT coalesce(application_name, '') || '@' || coalesce(host(client_addr), 'local') AS name,
            extract(epoch FROM replay_lag)::text AS lag_s,
            pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::text AS bytes
       FROM pg_stat_replication`,
  );
  return rows.map((r) => ({ name: r.name, lagSeconds: num(r.lag_s), bytes: num(r.bytes) }));
}

export interface StandbyPosition {
  inRecovery: boolean;
  /** Bytes since 0/0 of the last WAL received and of the last WAL replayed. */
  receiveLsn: number;
  replayLsn: number;
  paused: boolean;
  /** now() − the last replayed commit's timestamp: overstates the lag on an idle primary. */
  sinceReplaySeconds: number | null;
}

export async function standbyPosition(client: pg.ClientBase): Promise<StandbyPosition> {
  const { rows } = await client.query<{ in_recovery: boolean; receive: string | null; replay: string | null; paused: boolean | null; since_s: string | null }>(
    `SELECT pg_is_in_recovery() AS in_recovery,
            pg_wal_lsn_diff(pg_last_wal_receive_lsn(), '0/0')::text AS receive,
            pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '0/0')::text AS replay,
            CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() END AS paused,
            extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())::text AS since_s`,
  );
  const r = rows[0]!;
  const replay = num(r.replay) ?? 0;
  return { inRecovery: r.in_recovery, receiveLsn: num(r.receive) ?? replay, replayLsn: replay, paused: r.paused ?? false, sinceReplaySeconds: num(r.since_s) };
}

/**
 * Seconds a standby is behind, from its own view. The last replayed commit's age alone
 * overstates the lag on an idle primary (nothing to replay, yet that commit grows old), so
 * the estimate is "how long ago did this standby receive the WAL it is replaying now": we
 * remember when each receive position was first seen, and the lag is the age of the oldest
 * one the replay position has not passed. Nothing waiting to be replayed is no lag at all.
 */
export class StandbyLagEstimator {
  #seen: { at: number; receiveLsn: number }[] = [];
  constructor(private readonly historyMs = 600_000) {}

  observe(p: StandbyPosition, now = Date.now()): { lagSeconds: number; bytes: number } {
    const last = this.#seen.at(-1);
    if (!last || p.receiveLsn > last.receiveLsn) this.#seen.push({ at: now, receiveLsn: p.receiveLsn });
    this.#seen = this.#seen.filter((s) => s.at > now - this.historyMs || s.receiveLsn > p.replayLsn);
    const bytes = Math.max(0, p.receiveLsn - p.replayLsn);
    if (bytes === 0) return { lagSeconds: 0, bytes };
    const waiting = this.#seen.find((s) => s.receiveLsn > p.replayLsn);
    // WAL that was waiting before we started watching counts from our first look: an
    // underestimate for one lease at most, never the idle-primary overstatement.
    return { lagSeconds: waiting ? (now - waiting.at) / 1000 : 0, bytes };
  }
}

/** Replica lag in seconds: the worst of the primary's view and every configured replica's. */
export class ReplicaLagSignal implements Signal {
  readonly name = 'replica_lag' as const;
  readonly #clients = new Map<string, pg.Client>();
  readonly #estimators = new Map<string, StandbyLagEstimator>();
  constructor(
    private readonly db: Db,
    private readonly replicaUrls: string[],
    private readonly usePrimaryView = true,
  ) {}

  async #client(url: string): Promise<pg.Client> {
    const have = this.#clients.get(url);
    if (have) return have;
    const c = new pg.Client({ connectionString: url, application_name: 'genfill-throttle', connectionTimeoutMillis: 2000, statement_timeout: 2000 });
    c.on('error', () => this.#clients.delete(url));
    await c.connect();
    this.#clients.set(url, c);
    return c;
  }

  async read(): Promise<Reading> {
    const detail: Record<string, unknown> = {};
    let worst: number | null = null;
    const take = (v: number | null) => {
      if (v !== null && (worst === null || v > worst)) worst = v;
    };
    if (this.usePrimaryView) {
      try {
        const standbys = await primaryReplication(this.db);
        detail.primary = standbys;
        for (const s of standbys) take(s.lagSeconds);
      } catch (err) {
        detail.primaryError = (err as Error).message;
      }
    }
    const replicas: Record<string, unknown>[] = [];
    for (const [i, url] of this.replicaUrls.entries()) {
      try {
        const p = await standbyPosition(await this.#client(url));
        let est = this.#estimators.get(url);
        if (!est) this.#estimators.set(url, (est = new StandbyLagEstimator()));
        const lag = est.observe(p);
        replicas.push({ replica: i, lagSeconds: lag.lagSeconds, bytes: lag.bytes, paused: p.paused, inRecovery: p.inRecovery });
        take(lag.lagSeconds);
      } catch (err) {
        await this.#drop(url);
        // A replica we cannot read is not a healthy one: report it, and let the others speak.
        replicas.push({ replica: i, error: (err as Error).message });
      }
    }
    if (replicas.length > 0) detail.replicas = replicas;
    return { name: this.name, value: worst, detail };
  }

  async #drop(url: string): Promise<void> {
    const c = this.#clients.get(url);
    this.#clients.delete(url);
    await c?.end().catch(() => undefined);
  }

  async close(): Promise<void> {
    await Promise.all([...this.#clients.keys()].map((u) => this.#drop(u)));
  }
}

/** The q-quantile (0..1) of the samples, nearest-rank. */
export function quantile(samples: number[], q: number): number | null {
  if (samples.length === 0) return null;
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/**
 * The statements of a canary script, in order. libpg-query's parse gives each statement's
 * byte offset and length (comments and the separators fall between them).
 */
export async function canaryStatements(sql: string): Promise<string[]> {
  const { stmts } = await parse(sql);
  const bytes = Buffer.from(sql, 'utf8');
  const out = (stmts ?? []).map((x) => {
    const at = x.stmt_location ?? 0;
    return bytes.subarray(at, x.stmt_len ? at + x.stmt_len : bytes.length).toString('utf8').trim();
  });
  return out.filter((x) => x.length > 0);
}

/**
 * Foreground latency: GENFILL_CANARY_SQL run on its own connection every `everyMs`, p95 and
 * p99 over the samples of the last `windowMs`. A script of several statements (say `BEGIN;
 * UPDATE …; SELECT …; INSERT …; COMMIT`) runs them one by one, a round trip each, and is
 * timed end to end: an application's transaction feels the database once per statement, and
 * so does the canary. A canary that errors or times out counts at its timeout, so a stuck
 * database reads as slow, not as silent.
 */
export class CanarySignal implements Signal {
  readonly name = 'foreground_p95' as const;
  #samples: { at: number; ms: number }[] = [];
  #client: pg.Client | null = null;
  #timer: NodeJS.Timeout | undefined;
  #busy = false;
  #closed = false;
  #errors = 0;
  #statements: string[] | null = null;

  constructor(
    private readonly url: string,
    private readonly sql: string,
    private readonly opts: { everyMs: number; windowMs: number; timeoutMs: number },
  ) {
    this.#timer = setInterval(() => void this.#probe(), opts.everyMs);
    void this.#probe();
  }

  async #probe(): Promise<void> {
    if (this.#busy || this.#closed) return;
    this.#busy = true;
    const started = performance.now();
    try {
      if (!this.#client) {
        const c = new pg.Client({ connectionString: this.url, application_name: 'genfill-canary', statement_timeout: this.opts.timeoutMs });
        c.on('error', () => undefined);
        await c.connect();
        this.#client = c;
      }
      this.#statements ??= await canaryStatements(this.sql).catch(() => [this.sql]);
      const t0 = performance.now();
      for (const statement of this.#statements) await this.#client.query(statement);
      // A fresh connection's handshake is not what the foreground feels.
      this.#push(performance.now() - t0);
    } catch {
      this.#errors++;
      this.#push(Math.max(this.opts.timeoutMs, performance.now() - started));
      await this.#client?.end().catch(() => undefined);
      this.#client = null;
    } finally {
      this.#busy = false;
    }
  }

  #push(ms: number): void {
    const now = Date.now();
    this.#samples.push({ at: now, ms });
    this.#samples = this.#samples.filter((s) => s.at > now - this.opts.windowMs);
  }

  async read(): Promise<Reading> {
    const ms = this.#samples.map((s) => s.ms);
    const round = (v: number | null) => (v === null ? null : Math.round(v * 10) / 10);
    return {
      name: this.name,
      value: round(quantile(ms, 0.95)),
      detail: { p50: round(quantile(ms, 0.5)), p99: round(quantile(ms, 0.99)), samples: ms.length, errors: this.#errors },
    };
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#timer);
    await this.#client?.end().catch(() => undefined);
    this.#client = null;
  }
}

/**
 * The user's own foreground SLI: a Prometheus instant query (GENFILL_FOREGROUND_QUERY, in
 * milliseconds, e.g. `histogram_quantile(0.95, sum by (le) (rate(http_request_duration_seconds_bucket{job="api"}[1m]))) * 1000`)
 * against GENFILL_PROMETHEUS_URL, compared with the same `foregroundP95Ms` budget as the
 * canary. A vector answer counts its worst series. A query that fails or returns nothing
 * reads as null with the error in `detail`, like every other signal: the canary, if any,
 * still speaks for the foreground.
 */
export class PrometheusSignal implements Signal {
  readonly name = 'foreground_sli' as const;
  constructor(
    private readonly baseUrl: string,
    private readonly query: string,
    private readonly timeoutMs = 2_000,
  ) {}

  async read(): Promise<Reading> {
    const url = new URL('api/v1/query', this.baseUrl.endsWith('/') ? this.baseUrl : `${this.baseUrl}/`);
    url.searchParams.set('query', this.query);
    const detail: Record<string, unknown> = { query: this.query };
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(this.timeoutMs), headers: { accept: 'application/json' } });
      const body = (await res.json()) as {
        status?: string;
        error?: string;
        data?: { resultType?: string; result?: unknown };
      };
      if (!res.ok || body.status !== 'success') throw new Error(body.error ?? `HTTP ${res.status}`);
      const { resultType, result } = body.data ?? {};
      let values: number[];
      if (resultType === 'scalar') values = [Number((result as [number, string])[1])];
      else if (resultType === 'vector') values = (result as { value: [number, string] }[]).map((x) => Number(x.value[1]));
      else throw new Error(`expected a scalar or an instant vector, got ${resultType ?? 'nothing'}`);
      const finite = values.filter((v) => Number.isFinite(v));
      detail.series = values.length;
      if (finite.length === 0) return { name: this.name, value: null, detail: { ...detail, error: 'the query returned no finite value' } };
      return { name: this.name, value: Math.round(Math.max(...finite) * 100) / 100, detail };
    } catch (err) {
      return { name: this.name, value: null, detail: { ...detail, error: (err as Error).message } };
    }
  }

  async close(): Promise<void> {}
}

/**
 * The fleet's error and timeout rate over the last `windowSeconds`, from the registry:
 * partitions failed for good and attempts given back after an error (a RUNNING partition
 * whose lease was released early, which is what a statement timeout leads to), against the
 * receipts committed in the same window.
 */
export async function fleetOutcomes(db: Db, release: string, windowSeconds: number): Promise<{ ok: number; failed: number; retrying: number }> {
  const { rows } = await db.query<{ ok: number; failed: number; retrying: number }>(
    `SELECT (SELECT count(*) FROM genfill.receipts
              WHERE release = $1 AND created_at > clock_timestamp() - $2 * interval '1 second')::int AS ok,
            (SELECT count(*) FROM genfill.release_log
              WHERE release = $1 AND action = $3 AND at > clock_timestamp() - $2 * interval '1 second')::int AS failed,
            (SELECT count(*) FROM genfill.partitions
              WHERE release = $1 AND status = 'RUNNING' AND lease_expires_at <= clock_timestamp()
                AND updated_at > clock_timestamp() - $2 * interval '1 second')::int AS retrying`,
    [release, windowSeconds, RELEASE_ACTIONS.partitionFailed],
  );
  return rows[0]!;
}

/** Rows the fleet built (receipts' rows_out) per second over the last `windowMs`. */
export async function fleetThroughput(db: Db, release: string, windowMs: number): Promise<number> {
  const { rows } = await db.query<{ n: string }>(
    `SELECT coalesce(sum(rows_out), 0)::text AS n FROM genfill.receipts
      WHERE release = $1 AND created_at > clock_timestamp() - $2 * interval '1 millisecond'`,
    [release, windowMs],
  );
  return Number(rows[0]!.n) / (windowMs / 1000);
}

export class ErrorRateSignal implements Signal {
  readonly name = 'error_rate' as const;
  constructor(
    private readonly db: Db,
    private readonly release: string,
    private readonly windowSeconds = 60,
  ) {}

  async read(): Promise<Reading> {
    const o = await fleetOutcomes(this.db, this.release, this.windowSeconds);
    const bad = o.failed + o.retrying;
    const total = o.ok + bad;
    return { name: this.name, value: total === 0 ? null : bad / total, detail: { ...o, windowSeconds: this.windowSeconds } };
  }

  async close(): Promise<void> {}
}
