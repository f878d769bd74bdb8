// genfill's locks from TypeScript. Each is a LOCK TABLE on a genfill-only relation taken through
// genfill.take_lock (sql/functions/take_lock.sql holds the mode table, the timeout and the named
// refusal, GFK01 → LockWaitTimeoutError): no login outside genfill can take or block them,
// unlike the advisory locks they replace (issue 28, SPEC invariant 7).
//
// They are transaction-scoped. Two sites held a session-scoped advisory lock across several
// transactions and Redis calls (a release's dispatch, a dataset's adopt), which LOCK TABLE has
// no equivalent of: `holdLock` holds a READ COMMITTED transaction open on a connection of its
// own instead, and the work runs on other connections. That transaction writes nothing and
// takes no snapshot between statements, so it holds back neither vacuum nor the change log's
// horizon; it is kept out of idle_in_transaction_session_timeout, so that — like the session
// lock it replaces — it lasts until released or until its process's connection ends (a
// waiter meanwhile ends with the named refusal after its timeout).
import { errorFromPg } from '@genfill/contracts';
import type { Conn, Db } from './db.ts';

/** What a lock guards: a dataset (seal, adopt, dataset), a release (plan, dispatch, catchup) or a source table (ingress). */
export type LockKind = 'seal' | 'ingress' | 'plan' | 'dispatch' | 'catchup' | 'adopt' | 'dataset';

/** `shared` (ROW SHARE: seal and ingress only), `exclusive` (EXCLUSIVE), `try-exclusive` (false at once when held). */
export type LockMode = 'shared' | 'exclusive' | 'try-exclusive';

/**
 * Take genfill's lock (`kind`, `key`) for the rest of `conn`'s transaction; false only for a
 * `try-exclusive` that found it held. Past `timeoutMs` (default: the session's lock_timeout,
 * else 10 s) it throws LockWaitTimeoutError naming the holders.
 */
export async function takeLock(conn: Conn, kind: LockKind, key: string, mode: LockMode, timeoutMs?: number): Promise<boolean> {
  try {
    const { rows } = await conn.query<{ ok: boolean }>('SELECT genfill.take_lock($1, $2, $3, $4) AS ok', [kind, key, mode, timeoutMs ?? null]);
    return rows[0]!.ok;
  } catch (err) {
    throw errorFromPg(err);
  }
}

/** A lock held by `holdLock`: `release` ends its transaction (idempotent). */
export interface HeldLock {
  release(): Promise<void>;
}

/**
 * Hold genfill's lock (`kind`, `key`) across work done on other connections, until `release`;
 * null when a `try-exclusive` found it held.
 */
export async function holdLock(db: Db, kind: LockKind, key: string, mode: 'exclusive' | 'try-exclusive', timeoutMs?: number): Promise<HeldLock | null> {
  // The first lock of a (kind, key) creates its table: do that in a statement of its own, so
  // the holding transaction below is given no transaction id (one open for an adopt's minutes
  // would sit in every snapshot and hold back the change log's pruning horizon).
  await db.query(`SELECT genfill.take_lock($1, $2, 'try-exclusive')`, [kind, key]).catch((err: unknown) => {
    throw errorFromPg(err);
  });
  const conn = await db.connect();
  const ignore = () => undefined;
  conn.on('error', ignore);
  let done = false;
  const release = async () => {
    if (done) return;
    done = true;
    let broken: Error | undefined;
    // Nothing was written: ending the transaction either way releases the lock.
    await conn.query('ROLLBACK').catch((e: Error) => (broken = e));
    conn.off('error', ignore);
    conn.release(broken);
  };
  try {
    await conn.query('BEGIN ISOLATION LEVEL READ COMMITTED');
    if (!(await takeLock(conn, kind, key, mode, timeoutMs))) {
      await release();
      return null;
    }
    // A statement without parameters (the simple protocol) closes the lock's portal, which
    // otherwise keeps its snapshot — and the backend's xmin — while the transaction idles: a
    // CREATE INDEX CONCURRENTLY of the adopt it guards would wait for it forever.
    await conn.query('SET LOCAL idle_in_transaction_session_timeout = 0');
  } catch (err) {
    await release();
    throw err;
  }
  return { release };
}
