// One projector batch (SPEC invariants 6 and 7): a REPEATABLE READ transaction that takes S,
// applies the latest event per key visible in S and not in the frontier F, and ends with a
// short fenced tail — the seal lock in its shared mode, the dataset row FOR SHARE (epoch, OPEN,
// active generation), the lease row FOR SHARE (token) and the in-place update of the frontier
// from F to S, compared as text (pg_snapshot has no `=`). A serialization failure in the tail
// means "fenced": the seal, a cutover or a takeover changed a row under the batch's snapshot,
// and the batch writes nothing.
//
// The seal lock is a LOCK TABLE … IN ROW SHARE MODE on the dataset's table in schema
// genfill_lock (genfill.take_lock; the seal takes it IN EXCLUSIVE MODE), not an advisory lock:
// any login could take the advisory key and stall every batch. Its wait is bounded by the
// session's lock_timeout (GENFILL_LOCK_TIMEOUT, the fleet's 10 s by default) and ends the batch
// as fenced, writing nothing, with the named reason (LockWaitTimeoutError's message).
//
// The lease row is read FOR SHARE by genfill.projector_lease_held, owner-side and in this
// transaction (so with this snapshot): FOR SHARE needs UPDATE on genfill.projector_leases,
// which the fleet does not hold — run as a plain genfill_service login, the batch's own
// `SELECT … FOR SHARE` was refused and the projector applied nothing (issue 28, finding 3).
// The guarantee is the same: a takeover committed after S fails the read with 40001, one in
// flight waits for this batch's commit.
//
// Capped batches: when (F, S] holds more than `maxEvents` events, the batch consumes up to a
// prefix snapshot S' = (xmin, X, xip(S) below X) instead — every transaction below X that S
// sees, none from X on. S' contains F and is contained in S, so frontiers stay monotone. It is
// not a snapshot PostgreSQL took (a transaction ≥ X may have committed before one below X),
// which is why the apply is version-aware with a tombstone for every delete: an older event
// applied after a newer one is a no-op whatever order batches take them in — and why every
// apply stages a key's latest event visible in S over the whole log, not the latest in (F, S]:
// S' can count a key's delete as seen and not the insert it superseded, and a candidate whose
// catch-up frontier is S' (a carry chunk's watermark) holds no tombstone for it (issue 29,
// finding 1; statement.ts stageStatement).
import type pg from 'pg';
import { formatSnapshot, newEventsStatement, parseSnapshot } from '@genfill/capture';
import { isPgError, LockWaitTimeoutError, type PgError, pgErrorCode, SQLSTATE } from '@genfill/contracts';
import { takeLock, type Db } from '@genfill/registry';
import { loadDataset, type ProjectedDataset } from './dataset.ts';
import { findPoison } from './poison.ts';
import { applyStep, dependencyChangedStatement, type Applied, type ApplyCounts } from './statement.ts';

export interface Lease {
  holder: string;
  token: bigint;
}

export interface BatchOptions {
  lease: Lease;
  /** Events per batch before the batch takes a prefix snapshot. */
  maxEvents: number;
  statementTimeoutMs: number;
  /** Tests: runs after the apply, before the tail takes the shared seal lock. */
  beforeTail?: () => Promise<void>;
  /** Tests: runs while the tail holds the shared seal lock, before the FOR SHARE checks. */
  afterSharedLock?: () => Promise<void>;
}

export type BatchOutcome =
  | {
      kind: 'applied';
      dataset: string;
      generation: string;
      from: string;
      to: string;
      /** S' was a prefix of S: more events are waiting. */
      capped: boolean;
      counts: ApplyCounts;
      /** Captured dependencies with events in the batch (the dataset was flagged stale). */
      dependenciesChanged: string[];
      staleReleases: string[];
      ms: number;
    }
  | { kind: 'fenced'; dataset: string; reason: string }
  | { kind: 'sealed'; dataset: string; epoch: number }
  | { kind: 'poison'; dataset: string; generation: string; key: Record<string, unknown>; eventId: string; revision: string; error: string }
  | { kind: 'timeout'; dataset: string; maxEvents: number };

/** Errors of the apply that name a bad event (the transform's or the table's refusal), not the database's state. */
function isPoisonError(e: PgError): boolean {
  return /^(21|22|23|2F|38|39|42|P0)/.test(e.code);
}

/** The prefix S' of S that holds about `maxEvents` events past F, or null when (F, S] is small enough. */
async function capSnapshot(conn: pg.ClientBase, ds: ProjectedDataset, from: string, to: string, maxEvents: number): Promise<string | null> {
  const all = newEventsStatement({ sourceTable: ds.sourceTable, from, to });
  const { rows: n } = await conn.query<{ n: number }>(`SELECT count(*)::int AS n FROM (${all.text} LIMIT ${maxEvents + 1}) AS e`, all.values);
  if (n[0]!.n <= maxEvents) return null;
  const { rows } = await conn.query<{ txid: string; first: string }>(
    `SELECT (SELECT e.txid::text FROM (${all.text}) AS e ORDER BY e.txid OFFSET ${maxEvents} LIMIT 1) AS txid,
            (SELECT min(e.txid)::text FROM (${all.text}) AS e) AS first`,
    all.values,
  );
  const f = parseSnapshot(from);
  const s = parseSnapshot(to);
  let x = BigInt(rows[0]!.txid);
  // One transaction larger than the cap goes whole.
  if (x <= BigInt(rows[0]!.first)) x = BigInt(rows[0]!.first) + 1n;
  // S' must contain F: everything below xmax(F) that F lacked (its in-progress ones) goes too.
  if (x < f.xmax) x = f.xmax;
  if (x >= s.xmax) return null;
  const xmin = s.xmin < x ? s.xmin : x;
  return formatSnapshot({ xmin, xmax: x, xip: s.xip.filter((t) => t < x) });
}

/** One batch of `dataset` under `lease`. Never throws for a fenced or poisoned batch: it says so. */
export async function runBatch(db: Db, dataset: string, o: BatchOptions): Promise<BatchOutcome> {
  const started = performance.now();
  const conn = await db.connect();
  const ignore = () => undefined;
  conn.on('error', ignore);
  let broken: Error | undefined;
  let committed = false;
  try {
    await conn.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    // The first statement fixes the transaction's snapshot: S.
    const { rows: head } = await conn.query<{ s: string; f: string | null; contains: boolean | null }>(
      `SELECT pg_current_snapshot()::text AS s, f.snapshot::text AS f, genfill.snapshot_contains(pg_current_snapshot(), f.snapshot) AS contains
         FROM genfill.datasets d LEFT JOIN genfill.frontiers f ON f.dataset = d.name AND f.generation = d.active_generation
        WHERE d.name = $1`,
      [dataset],
    );
    const h = head[0];
    if (!h?.f) return { kind: 'fenced', dataset, reason: 'no frontier for the active generation' };
    if (!h.contains) return { kind: 'fenced', dataset, reason: `the frontier ${h.f} is not contained in the current snapshot ${h.s}` };
    const ds = await loadDataset(conn, dataset);
    if (ds.ingress === 'SEALED') return { kind: 'sealed', dataset, epoch: ds.epoch };
    await conn.query(`SET LOCAL statement_timeout = ${Math.max(100, Math.floor(o.statementTimeoutMs))}`);
    const cap = await capSnapshot(conn, ds, h.f, h.s, o.maxEvents);
    const range = { from: h.f, to: cap ?? h.s };

    let applied: Applied;
    let saved = false;
    try {
      applied = await applyStep(conn, ds, range, {
        staged: async () => {
          await conn.query('SAVEPOINT gf_apply');
          saved = true;
        },
      });
    } catch (err) {
      // Staging failed: no savepoint to search for a poison event from.
      if (!saved || !isPgError(err)) throw err;
      if (err.code === SQLSTATE.queryCanceled) return { kind: 'timeout', dataset, maxEvents: o.maxEvents };
      if (!isPoisonError(err)) throw err;
      await conn.query('ROLLBACK TO SAVEPOINT gf_apply');
      const p = await findPoison(conn, ds, err.message);
      if (!p) throw err;
      return { kind: 'poison', dataset, generation: ds.generation, ...p };
    }
    if (applied.poison) {
      await conn.query('ROLLBACK TO SAVEPOINT gf_apply');
      const p = await findPoison(conn, ds, applied.poison.what);
      if (!p) return { kind: 'fenced', dataset, reason: `the batch's ${applied.poison.what} was not reproduced alone` };
      return { kind: 'poison', dataset, generation: ds.generation, ...p };
    }

    const changed: string[] = [];
    for (const dep of ds.dependencies) {
      const d = dependencyChangedStatement(dep, range);
      if ((await conn.query<{ changed: boolean }>(d.text, d.values)).rows[0]!.changed) changed.push(dep);
    }
    let staleReleases: string[] = [];
    if (changed.length > 0) {
      const { rows } = await conn.query<{ moved: string[] }>('SELECT genfill.mark_dependency_stale($1, $2) AS moved', [dataset, changed]);
      staleReleases = rows[0]!.moved;
    }

    // The fenced tail.
    await o.beforeTail?.();
    await takeLock(conn, 'seal', dataset, 'shared');
    await o.afterSharedLock?.();
    const { rowCount: open } = await conn.query(
      `SELECT 1 FROM genfill.datasets WHERE name = $1 AND ingress_epoch = $2 AND ingress_state = 'OPEN' AND active_generation = $3 FOR SHARE`,
      [dataset, ds.epoch, ds.generation],
    );
    if (open !== 1) return { kind: 'fenced', dataset, reason: 'the epoch is no longer open for this generation' };
    const { rows: lease } = await conn.query<{ held: boolean }>('SELECT genfill.projector_lease_held($1, $2, $3) AS held', [
      dataset,
      o.lease.holder,
      o.lease.token.toString(),
    ]);
    if (!lease[0]!.held) return { kind: 'fenced', dataset, reason: 'the lease is no longer ours' };
    const { rowCount: moved } = await conn.query(
      `UPDATE genfill.frontiers SET snapshot = $4::pg_snapshot, updated_at = clock_timestamp()
        WHERE dataset = $1 AND generation = $2 AND snapshot::text = $3`,
      [dataset, ds.generation, range.from, range.to],
    );
    if (moved !== 1) return { kind: 'fenced', dataset, reason: 'the frontier moved under the batch' };
    await conn.query('COMMIT');
    committed = true;
    return {
      kind: 'applied',
      dataset,
      generation: ds.generation,
      from: range.from,
      to: range.to,
      capped: cap !== null,
      counts: applied.counts,
      dependenciesChanged: changed,
      staleReleases,
      ms: performance.now() - started,
    };
  } catch (err) {
    if (err instanceof LockWaitTimeoutError) return { kind: 'fenced', dataset, reason: err.message };
    const code = pgErrorCode(err);
    if (code === SQLSTATE.serializationFailure || code === SQLSTATE.deadlockDetected || code === SQLSTATE.lockNotAvailable) {
      const message = (err as Error).message;
      return { kind: 'fenced', dataset, reason: code === SQLSTATE.serializationFailure ? `a row of the tail changed under the batch's snapshot (${message})` : message };
    }
    throw err;
  } finally {
    // Anything not committed above rolls back here: a fenced, sealed or poisoned batch writes nothing.
    if (!committed) await conn.query('ROLLBACK').catch((e: Error) => (broken = e));
    conn.off('error', ignore);
    conn.release(broken);
  }
}
