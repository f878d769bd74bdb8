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
