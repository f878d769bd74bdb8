// Pruning of the change log below its horizon (SPEC invariant 15; issue 18 part 3), one step of
// the reconciler service's round.
//
// A partition of genfill.change_log goes only when its highest txid is below the horizon's xmin
// (horizon.ts): every event in it is visible in every snapshot the log is still needed for.
//
// Why not DETACH … CONCURRENTLY, as the issue asked: PostgreSQL refuses it on a partitioned
// table with a DEFAULT partition ("cannot detach partitions concurrently when a default
// partition exists", verified on 15), and the log keeps its DEFAULT so a log insert never
// fails a user's write. A plain DETACH takes ACCESS EXCLUSIVE on the log and its DEFAULT
// partition; queued behind a long reader of the log it would hold every captured write behind
// it. So each DETACH runs under a short lock_timeout (default 100 ms) and is retried a few
// times with a pause between: a captured writer waits at most that long while the request is
// queued, plus the catalog-only DETACH itself once granted (milliseconds: nothing is scanned).
// The detached table is dropped afterwards, which locks only itself. docs/retention.md has the
// measured waits.
//
// Rows that landed in the DEFAULT partition below the horizon are deleted in bounded batches,
// and projector tombstones below it are compacted, by SQL functions that lower the caller's
// horizon to the current one (migration 0018): no caller can remove what is still needed.
import { setTimeout as sleep } from 'node:timers/promises';
import { parseSnapshot } from '@genfill/capture';
import { pgErrorCode, SQLSTATE } from '@genfill/contracts';
import type { Logger } from '@genfill/observability';
import type { Conn, Db } from '@genfill/registry';
import { canSeeSessions, computeHorizon, type Horizon, type HorizonBlocker, HorizonHistory, usableHorizon } from './horizon.ts';
import { OwnerConnectionError, type OwnerConn, type OwnerOptions, withOwnerConnection } from './owner.ts';

export interface PruneOptions extends OwnerOptions {
  /** Horizons of earlier rounds (the service keeps one across rounds); a fresh one per call otherwise. */
  history?: HorizonHistory;
  /** lock_timeout of each DETACH and DROP: the longest a captured writer waits behind one (default 100 ms). */
  lockTimeoutMs?: number;
  /** DETACH attempts per partition per round (default 5). */
  attempts?: number;
  /** Pause between attempts, doubled each time (default 50 ms). */
  retryDelayMs?: number;
  /** Rows of the DEFAULT partition deleted per batch (default 10,000) and batches per round (default 20). */
  defaultBatchRows?: number;
  defaultBatches?: number;
  /** Tombstones compacted per batch (default 10,000) and batches per round (default 20). */
  tombstoneBatch?: number;
  tombstoneBatches?: number;
}

export const PRUNE_DEFAULTS = {
  lockTimeoutMs: 100,
  attempts: 5,
  retryDelayMs: 50,
  defaultBatchRows: 10_000,
  defaultBatches: 20,
  tombstoneBatch: 10_000,
  tombstoneBatches: 20,
} as const;

export interface LogPartition {
  partition: string;
  fromTxid: string | null;
  toTxid: string | null;
  isDefault: boolean;
  rowsEstimate: number;
  bytes: number;
}

export interface PruneResult {
  /** The horizon now, what holds it and the transactions it waits for. */
  current: Horizon;
  /** The horizon this round pruned below, or null when it pruned nothing. */
  horizon: string | null;
  /** Transactions of genfill's writers in progress when the round began. */
  blockers: HorizonBlocker[];
  dropped: { partition: string; fromTxid: string; toTxid: string; rowsEstimate: number; bytes: number; attempts: number; detachMs: number }[];
  /** Partitions below the horizon that could not go this round, and why. */
  waiting: { partition: string; why: string }[];
  defaultRows: number;
  tombstones: number;
  /** Partitions wholly below the current horizon still attached after the round. */
  prunable: number;
  /** Why nothing was pruned at all (the owner connection, session visibility), or null. */
  refused: string | null;
}

export async function logPartitions(conn: Pick<Conn, 'query'>): Promise<LogPartition[]> {
  const { rows } = await conn.query<LogPartition>(
    `SELECT partition, from_txid::text AS "fromTxid", to_txid::text AS "toTxid", is_default AS "isDefault",
            rows_estimate::float8 AS "rowsEstimate", bytes::float8 AS bytes
       FROM genfill.change_log_partitions()`,
  );
  return rows;
}

/** Partitions whose every txid is below `xmin` (to is exclusive). */
export function belowHorizon(parts: readonly LogPartition[], xmin: bigint): LogPartition[] {
  return parts.filter((p) => !p.isDefault && p.toTxid !== null && BigInt(p.toTxid) <= xmin);
}

/** How many attached partitions are wholly below the horizon now (genfill_log_partitions_prunable). */
export async function prunablePartitions(conn: Pick<Conn, 'query'>, horizon?: string): Promise<number> {
  const h = horizon ?? (await computeHorizon(conn)).horizon;
  return belowHorizon(await logPartitions(conn), parseSnapshot(h).xmin).length;
}

/** A detached log partition a crash left behind (detached, not yet dropped). */
async function orphans(conn: OwnerConn): Promise<string[]> {
  const { rows } = await conn.query<{ t: string }>(
    `SELECT c.oid::regclass::text AS t FROM pg_class c
      WHERE c.relnamespace = 'genfill'::regnamespace AND c.relkind = 'r' AND c.relname ~ '^change_log_\\d+$'
        AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)`,
  );
  return rows.map((r) => r.t);
}

function isLockTimeout(err: unknown): boolean {
  return pgErrorCode(err) === SQLSTATE.lockNotAvailable;
}

async function detachAndDrop(
  conn: OwnerConn,
  db: Db,
  p: LogPartition,
  horizon: string,
  o: Required<Pick<PruneOptions, 'lockTimeoutMs' | 'attempts' | 'retryDelayMs'>>,
): Promise<{ attempts: number; detachMs: number }> {
  await conn.query(`SET lock_timeout = ${Math.round(o.lockTimeoutMs)}`);
  for (let attempt = 1; ; attempt++) {
    const started = performance.now();
    try {
      await conn.query(`ALTER TABLE genfill.change_log DETACH PARTITION ${p.partition}`);
      const detachMs = performance.now() - started;
      await db.query(
        `INSERT INTO genfill.change_log_prunes (what, partition, from_txid, to_txid, rows, bytes, horizon)
         VALUES ('partition', $1, $2::xid8, $3::xid8, $4, $5, $6::pg_snapshot)`,
        [p.partition, p.fromTxid, p.toTxid, Math.round(p.rowsEstimate), Math.round(p.bytes), horizon],
      );
      await dropDetached(conn, p.partition, o);
      return { attempts: attempt, detachMs };
    } catch (err) {
      if (!isLockTimeout(err) || attempt >= o.attempts) throw err;
      await sleep(o.retryDelayMs * 2 ** (attempt - 1));
    }
  }
}

/** DROP a detached table (it locks only itself); a lock timeout leaves it for the next round. */
async function dropDetached(conn: OwnerConn, table: string, o: Required<Pick<PruneOptions, 'lockTimeoutMs' | 'attempts' | 'retryDelayMs'>>): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await conn.query(`DROP TABLE IF EXISTS ${table}`);
      return;
    } catch (err) {
      if (!isLockTimeout(err) || attempt >= o.attempts) throw err;
      await sleep(o.retryDelayMs * 2 ** (attempt - 1));
    }
  }
}

/**
 * One pruning round: the horizon it may use (horizon.ts), then every partition wholly below it
 * detached and dropped, DEFAULT rows and projector tombstones below it deleted in batches.
 * Never throws for a partition it could not take: the result (and the log) says why.
 */
export async function pruneLog(db: Db, log: Logger, opts: PruneOptions = {}): Promise<PruneResult> {
  const o = {
    lockTimeoutMs: opts.lockTimeoutMs ?? PRUNE_DEFAULTS.lockTimeoutMs,
    attempts: opts.attempts ?? PRUNE_DEFAULTS.attempts,
    retryDelayMs: opts.retryDelayMs ?? PRUNE_DEFAULTS.retryDelayMs,
  };
  const history = opts.history ?? new HorizonHistory();
  const empty = { dropped: [], waiting: [], defaultRows: 0, tombstones: 0, prunable: 0 };
  if (!(await canSeeSessions(db))) {
    const current = await computeHorizon(db);
    const refused =
      'pruning needs to see every session (a genfill transaction may still record an older snapshot): ' +
      'GRANT pg_read_all_stats TO genfill_owner as a superuser (migration 0018 tries to)';
    log.error({ err: refused }, 'change log not pruned');
    return { current, horizon: null, blockers: [], ...empty, prunable: await prunablePartitions(db, current.horizon), refused };
  }
  const { current, usable, blockers } = await usableHorizon(db, history);
  const out: PruneResult = { current, horizon: usable, blockers, ...empty, refused: null };
  const finish = async () => {
    out.prunable = await prunablePartitions(db, current.horizon);
    return out;
  };
  if (!usable) {
    const b = blockers[0];
    log.info({ blocker: b }, 'change log not pruned this round: a genfill transaction older than every recorded horizon is running');
    return finish();
  }
  const xmin = parseSnapshot(usable).xmin;
  const doomed = belowHorizon(await logPartitions(db), xmin);
  try {
    await withOwnerConnection(db, opts, async (conn) => {
      for (const t of await orphans(conn)) {
        await dropDetached(conn, t, o).catch((err: Error) => out.waiting.push({ partition: t, why: `detached, not dropped yet: ${err.message}` }));
      }
      for (const [i, p] of doomed.entries()) {
        try {
          const r = await detachAndDrop(conn, db, p, usable, o);
          out.dropped.push({ partition: p.partition, fromTxid: p.fromTxid!, toTxid: p.toTxid!, rowsEstimate: p.rowsEstimate, bytes: p.bytes, ...r });
          log.info({ partition: p.partition, from: p.fromTxid, to: p.toTxid, horizon: usable, ...r }, 'change log partition dropped');
        } catch (err) {
          if (!isLockTimeout(err)) throw err;
          const why = `no lock on genfill.change_log within ${o.lockTimeoutMs} ms in ${o.attempts} attempts (a long reader of the log holds it); the next round tries again`;
          // What holds the log holds it for the rest too: each attempt would make writers wait again.
          for (const rest of doomed.slice(i)) out.waiting.push({ partition: rest.partition, why });
          log.warn({ partitions: doomed.slice(i).map((x) => x.partition), why }, 'change log partitions not dropped yet');
          break;
        }
      }
    });
  } catch (err) {
    if (!(err instanceof OwnerConnectionError)) throw err;
    out.refused = err.message;
    for (const p of doomed) out.waiting.push({ partition: p.partition, why: err.message });
    log.error({ login: err.login, err: err.message }, 'change log partitions not dropped');
  }
  for (let i = 0; i < (opts.defaultBatches ?? PRUNE_DEFAULTS.defaultBatches); i++) {
    const batch = opts.defaultBatchRows ?? PRUNE_DEFAULTS.defaultBatchRows;
    const { rows } = await db.query<{ n: string }>('SELECT genfill.change_log_prune_default($1::pg_snapshot, $2)::text AS n', [usable, batch]);
    out.defaultRows += Number(rows[0]!.n);
    if (Number(rows[0]!.n) < batch) break;
  }
  for (let i = 0; i < (opts.tombstoneBatches ?? PRUNE_DEFAULTS.tombstoneBatches); i++) {
    const batch = opts.tombstoneBatch ?? PRUNE_DEFAULTS.tombstoneBatch;
    const { rows } = await db.query<{ n: string }>('SELECT genfill.compact_projector_tombstones($1::pg_snapshot, $2)::text AS n', [usable, batch]);
    out.tombstones += Number(rows[0]!.n);
    if (Number(rows[0]!.n) < batch) break;
  }
  if (out.defaultRows > 0 || out.tombstones > 0) log.info({ defaultRows: out.defaultRows, tombstones: out.tombstones, horizon: usable }, 'change log rows pruned');
  return finish();
}
