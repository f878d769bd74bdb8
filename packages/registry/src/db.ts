import pg from 'pg';
import type { Config } from '@genfill/contracts';

export type Db = pg.Pool;
export type Conn = pg.ClientBase;

/**
 * What a fleet connection (worker, planner) may wait for a lock, and stay idle inside a
 * transaction, unless GENFILL_LOCK_TIMEOUT / GENFILL_IDLE_IN_TRANSACTION_TIMEOUT say otherwise.
 * Without them a SIGSTOPped or partitioned worker holding the release row lock blocks every
 * claim, commit, pause and cancel until TCP keepalive gives up (hours). Not for the
 * reconciler's snapshot connections, which idle inside their transaction by design.
 */
export const FLEET_TIMEOUTS = { lockMs: 10_000, idleInTransactionMs: 30_000 } as const;

/**
 * Every genfill connection runs with TimeZone pinned to UTC (grid boundaries and receipts
 * never depend on a client's setting) and the configured statement and lock timeouts; a
 * `fleet` pool has FLEET_TIMEOUTS as defaults.
 */
export function createPool(config: Config, applicationName = 'genfill', max = 4, opts: { fleet?: boolean } = {}): pg.Pool {
  const options = ['-c TimeZone=UTC'];
  const lock = config.GENFILL_LOCK_TIMEOUT ?? (opts.fleet ? FLEET_TIMEOUTS.lockMs : undefined);
  const idle = config.GENFILL_IDLE_IN_TRANSACTION_TIMEOUT ?? (opts.fleet ? FLEET_TIMEOUTS.idleInTransactionMs : undefined);
  if (config.GENFILL_STATEMENT_TIMEOUT !== undefined) options.push(`-c statement_timeout=${config.GENFILL_STATEMENT_TIMEOUT}`);
  if (lock !== undefined) options.push(`-c lock_timeout=${lock}`);
  if (idle !== undefined) options.push(`-c idle_in_transaction_session_timeout=${idle}`);
  const pool = new pg.Pool({
    connectionString: config.DATABASE_URL,
    application_name: applicationName,
    options: options.join(' '),
    max,
  });
  // An idle client losing its connection must not crash the process; the next query reports it.
  pool.on('error', () => undefined);
  return pool;
}

export type Isolation = 'READ COMMITTED' | 'REPEATABLE READ' | 'SERIALIZABLE';

export async function withTransaction<T>(
  db: Db,
  fn: (conn: pg.PoolClient) => Promise<T>,
  isolation: Isolation = 'READ COMMITTED',
): Promise<T> {
  const conn = await db.connect();
  // A backend that dies mid-transaction (terminated, network cut) makes the client emit
  // 'error' besides rejecting the query; the rejection is what we act on.
  const ignore = () => undefined;
  conn.on('error', ignore);
  let broken: Error | undefined;
  try {
    await conn.query(`BEGIN ISOLATION LEVEL ${isolation}`);
    const result = await fn(conn);
    await conn.query('COMMIT');
    return result;
  } catch (err) {
    await conn.query('ROLLBACK').catch((e: Error) => (broken = e));
    throw err;
  } finally {
    conn.off('error', ignore);
    // A client whose ROLLBACK failed is not reusable: destroy it rather than pool it.
    conn.release(broken);
  }
}

/**
 * A small pool like `db` whose sessions record `principal` (genfill.principal), for a service
 * executing a person's request: every registry write it makes names the requester. The
 * database honours the setting only for members of genfill_service or genfill_api.
 */
export function poolAs(db: Db, principal: string, max = 2): Db {
  const pool = new pg.Pool({ ...db.options, max });
  // pg runs a client's queries in order, so this runs before the first query of its user.
  pool.on('connect', (client) => {
    client.query(`SELECT set_config('genfill.principal', $1, false)`, [principal]).catch(() => undefined);
  });
  pool.on('error', () => undefined);
  return pool;
}
