import pg from 'pg';
import type { Config } from '@genfill/contracts';

export type Db = pg.Pool;
export type Conn = pg.ClientBase;

/**
 * Every genfill connection runs with TimeZone pinned to UTC (grid boundaries and receipts
 * never depend on a client's setting) and the configured statement and lock timeouts.
 */
export function createPool(config: Config, applicationName = 'genfill', max = 4): pg.Pool {
  const options = ['-c TimeZone=UTC'];
  if (config.GENFILL_STATEMENT_TIMEOUT !== undefined) options.push(`-c statement_timeout=${config.GENFILL_STATEMENT_TIMEOUT}`);
  if (config.GENFILL_LOCK_TIMEOUT !== undefined) options.push(`-c lock_timeout=${config.GENFILL_LOCK_TIMEOUT}`);
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
