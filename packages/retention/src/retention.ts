// Retention of old generations (SPEC invariant 12, "Storage layout"; issue 18 part 2), one step
// of the reconciler service's round.
//
// When a generation is retirable is defined once, in SQL (genfill.generation_retention,
// migration 0018): it no longer serves readers (RETAINED after a cutover or a rollback, or
// ABANDONED after a cancel), the window of the switch that took readers off it has ended (the
// rollbackWindow of that switch's release, from its switched_at; for ABANDONED from the cancel),
// no reader lease on it is live, and no open release, cutover or rollback needs it.
//
// The order makes a pinned reader's next page a clean 410, never an SQL error mid-page:
//   1. genfill.retire_generation, in one transaction: waits (FOR UPDATE on the generation row)
//      for every page in flight on it, marks it RETIRED, moves the SUPERSEDED releases that
//      built it to RETIRED, logs `retire` with the reason and removes its frontier, tombstones
//      and expired leases. From its commit every page is refused by genfill.reader_lease with
//      that reason before it reads.
//   2. on an owner connection (owner.ts): `ALTER TABLE <parent> DETACH PARTITION <table>
//      CONCURRENTLY` — FINALIZE when an earlier one was interrupted — which waits for the
//      transactions still using the parent without blocking them, under a statement_timeout:
//      past it the detach stays pending and the next round finalizes it;
//   3. `DROP TABLE` under a short lock_timeout, then a `generation-dropped` log row.
// Each step is idempotent: a round that dies anywhere is finished by the next.
import { pgErrorCode, quoteIdent, SQLSTATE } from '@genfill/contracts';
import type { Logger } from '@genfill/observability';
import { type Conn, DATA_SCHEMA, type Db, qualifiedParent, withTransaction } from '@genfill/registry';
import { type OwnerConn, OwnerConnectionError, type OwnerOptions, withOwnerConnection } from './owner.ts';

export interface RetainedGeneration {
  dataset: string;
  generation: string;
  state: 'RETAINED' | 'ABANDONED' | 'RETIRED';
  /** What took readers off it: a cutover, a rollback, or (ABANDONED) a cancel; null when none is recorded. */
  leftBy: 'cutover' | 'rollback' | 'cancel' | null;
  leftByRelease: string | null;
  leftAt: string | null;
  rollbackWindow: string | null;
  windowEnd: string | null;
  /** The longest live reader lease on it. */
  leaseUntil: string | null;
  leaseHolder: string | null;
  leases: number;
  /** The later of the window's end and the longest lease: the earliest it can go. */
  retainUntil: string | null;
  /** Why it is kept now, each in words; empty when it is retirable. */
  holds: string[];
  retirable: boolean;
  table: string;
  tablePresent: boolean;
  tableAttached: boolean;
  detachPending: boolean;
  /** pg_total_relation_size of its table. */
  bytes: number | null;
}

/** Generations kept after they stopped serving readers (and retired ones whose table is not gone yet). */
export async function retentionStatus(conn: Pick<Conn, 'query'>, dataset: string | null = null): Promise<RetainedGeneration[]> {
  const ts = (c: string) => `to_json(${c}) #>> '{}'`;
  const { rows } = await conn.query<RetainedGeneration>(
    `SELECT dataset, generation, state, left_by AS "leftBy", left_by_release AS "leftByRelease", ${ts('left_at')} AS "leftAt",
            rollback_window::text AS "rollbackWindow", ${ts('window_end')} AS "windowEnd", ${ts('lease_until')} AS "leaseUntil",
            lease_holder AS "leaseHolder", leases, ${ts('retain_until')} AS "retainUntil", holds, retirable,
            table_name AS "table", table_present AS "tablePresent", table_attached AS "tableAttached", detach_pending AS "detachPending",
            bytes::float8 AS bytes
       FROM genfill.generation_retention($1)`,
    [dataset],
  );
  return rows;
}

export interface RetentionOptions extends OwnerOptions {
  /** How long DETACH … CONCURRENTLY (or FINALIZE) may wait for the parent's users before it is left pending (default 10 s). */
  detachTimeoutMs?: number;
  /** lock_timeout of the DROP (default 1 s). */
  lockTimeoutMs?: number;
}

export const RETENTION_DEFAULTS = { detachTimeoutMs: 10_000, lockTimeoutMs: 1_000 } as const;

export interface RetentionRoundResult {
  retired: { dataset: string; generation: string; releases: string[]; reason: string }[];
  dropped: { dataset: string; generation: string; table: string; bytes: number | null; finalized: boolean }[];
  /** RETIRED generations whose table could not go this round, and why. */
  pending: { dataset: string; generation: string; table: string; why: string }[];
  /** Generations kept, with their holds. */
  kept: { dataset: string; generation: string; retainUntil: string | null; holds: string[] }[];
  /** The owner connection could not be had (the grant it needs is named). */
  owner: string | null;
}

/** Who uses the parent now (what a DETACH … CONCURRENTLY waits for). */
async function parentUsers(conn: OwnerConn, dataset: string): Promise<string> {
  const { rows } = await conn.query<{ who: string | null }>(
    `SELECT string_agg(DISTINCT format('pid %s (%s, %s since %s)', a.pid, a.usename, a.state, a.xact_start), ', ') AS who
       FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE l.relation = to_regclass($1) AND l.pid <> pg_backend_pid()`,
    [qualifiedParent(dataset)],
  );
  return rows[0]!.who ?? 'no transaction holds it now';
}

/** Detach (or finish detaching) and drop a retired generation's table. */
async function finishTable(
  conn: OwnerConn,
  g: RetainedGeneration,
  o: Required<Pick<RetentionOptions, 'detachTimeoutMs' | 'lockTimeoutMs'>>,
): Promise<{ finalized: boolean }> {
  const parent = qualifiedParent(g.dataset);
  const table = `${quoteIdent(DATA_SCHEMA)}.${quoteIdent(g.table)}`;
  let finalized = false;
  if (g.tableAttached) {
    await conn.query(`SET statement_timeout = ${Math.round(o.detachTimeoutMs)}; SET lock_timeout = ${Math.round(o.detachTimeoutMs)}`);
    finalized = g.detachPending;
    await conn.query(`ALTER TABLE ${parent} DETACH PARTITION ${table} ${g.detachPending ? 'FINALIZE' : 'CONCURRENTLY'}`);
  }
  await conn.query(`SET statement_timeout = 0; SET lock_timeout = ${Math.round(o.lockTimeoutMs)}`);
  await conn.query(`DROP TABLE IF EXISTS ${table}`);
  return { finalized };
}

/**
 * One retention round over every dataset: retire what is retirable, then detach and drop the
 * tables of retired generations. Never throws for a generation it could not finish: the
 * result (and the log) says what waits and why.
 */
export async function retentionRound(db: Db, log: Logger, opts: RetentionOptions = {}): Promise<RetentionRoundResult> {
  const o = { detachTimeoutMs: opts.detachTimeoutMs ?? RETENTION_DEFAULTS.detachTimeoutMs, lockTimeoutMs: opts.lockTimeoutMs ?? RETENTION_DEFAULTS.lockTimeoutMs };
  const out: RetentionRoundResult = { retired: [], dropped: [], pending: [], kept: [], owner: null };
  for (const g of await retentionStatus(db)) {
    if (g.state === 'RETIRED') continue;
    if (!g.retirable) {
      out.kept.push({ dataset: g.dataset, generation: g.generation, retainUntil: g.retainUntil, holds: g.holds });
      continue;
    }
    try {
      const r = await withTransaction(db, async (conn) => {
        const { rows } = await conn.query<{ outcome: string; releases: string[]; reason: string | null }>(
          'SELECT outcome, releases, reason FROM genfill.retire_generation($1, $2)',
          [g.dataset, g.generation],
        );
        return rows[0]!;
      });
      if (r.outcome === 'retired') {
        out.retired.push({ dataset: g.dataset, generation: g.generation, releases: r.releases, reason: r.reason ?? '' });
        log.info({ dataset: g.dataset, generation: g.generation, releases: r.releases, reason: r.reason }, 'generation retired');
      }
    } catch (err) {
      // Lost a race (a lease taken, a rollback started): the next round looks again.
      if (pgErrorCode(err) !== SQLSTATE.refused) throw err;
      out.kept.push({ dataset: g.dataset, generation: g.generation, retainUntil: g.retainUntil, holds: [(err as Error).message] });
      log.info({ dataset: g.dataset, generation: g.generation, err: (err as Error).message }, 'generation kept');
    }
  }

  const tables = (await retentionStatus(db)).filter((g) => g.state === 'RETIRED' && g.tablePresent);
  if (tables.length === 0) return out;
  try {
    await withOwnerConnection(db, opts, async (conn) => {
      for (const g of tables) {
        const scope = { dataset: g.dataset, generation: g.generation, table: g.table };
        try {
          const { finalized } = await finishTable(conn, g, o);
          await db.query('SELECT genfill.record_generation_dropped($1, $2, $3)', [
            g.dataset,
            g.generation,
            JSON.stringify({ table: g.table, bytes: g.bytes, finalized }),
          ]);
          out.dropped.push({ ...scope, bytes: g.bytes, finalized });
          log.info({ ...scope, bytes: g.bytes, finalized }, 'retired generation dropped');
        } catch (err) {
          const code = pgErrorCode(err);
          if (code !== SQLSTATE.queryCanceled && code !== SQLSTATE.lockNotAvailable) throw err;
          // statement_timeout (57014) or lock_timeout (55P03): the detach stays pending (or the
          // drop waits); the next round finishes it.
          const why =
            `${code === SQLSTATE.queryCanceled ? 'the detach waits' : 'a lock wait timed out'} for transactions using ${qualifiedParent(g.dataset)}: ` +
            `${await parentUsers(conn, g.dataset)}; the next round finishes it`;
          out.pending.push({ ...scope, why });
          log.warn({ ...scope, why }, 'retired generation not dropped yet');
        }
      }
    });
  } catch (err) {
    if (!(err instanceof OwnerConnectionError)) throw err;
    out.owner = err.message;
    for (const g of tables) out.pending.push({ dataset: g.dataset, generation: g.generation, table: g.table, why: err.message });
    log.error({ login: err.login, err: err.message }, 'retention cannot drop retired generations');
  }
  return out;
}
