// The owner connection retention and pruning need. PostgreSQL lets only a table's owner detach
// a partition or drop it, and `DETACH … CONCURRENTLY` runs neither inside a transaction nor in
// a function — so no SECURITY DEFINER function can do it for the service. The reconciler's
// login (a member of genfill_service) therefore acts as genfill_owner on a plain connection:
//   - GENFILL_OWNER_DATABASE_URL set: a connection of that login, SET ROLE genfill_owner;
//   - else a connection of the service's own pool, SET ROLE genfill_owner (the login must be
//     a member of genfill_owner), reset before the connection goes back to the pool.
// A login that may not is an OwnerConnectionError naming the grant: the service logs it and
// reports it in its round, the retention it blocks shows in `status --dataset`, and nothing
// else stops.
import pg from 'pg';
import { RefusedError } from '@genfill/contracts';
import type { Db } from '@genfill/registry';

/** The service's login may not act as genfill_owner, so generation tables and log partitions stay. */
export class OwnerConnectionError extends RefusedError {
  constructor(
    readonly login: string,
    message: string,
  ) {
    super(message);
  }
}

export interface OwnerOptions {
  /** GENFILL_OWNER_DATABASE_URL */
  ownerUrl?: string | null;
}

/** A session acting as genfill_owner, outside any transaction. */
export type OwnerConn = pg.ClientBase;

async function becomeOwner(c: pg.ClientBase, via: string): Promise<void> {
  const { rows } = await c.query<{ login: string; member: boolean }>(
    `SELECT session_user::text AS login, pg_has_role(session_user, 'genfill_owner', 'MEMBER') AS member`,
  );
  const { login, member } = rows[0]!;
  if (!member) {
    throw new OwnerConnectionError(
      login,
      `retention and pruning need an owner connection: the login ${login} (${via}) is not a member of genfill_owner, which owns ` +
        `the generation tables and genfill.change_log (DETACH … CONCURRENTLY and DROP need their owner). ` +
        `GRANT genfill_owner TO ${login}, or set GENFILL_OWNER_DATABASE_URL to a login that is a member of genfill_owner`,
    );
  }
  await c.query('SET ROLE genfill_owner');
}

/** Run `fn` on a connection acting as genfill_owner; the session is reset (or closed) after. */
export async function withOwnerConnection<T>(db: Db, o: OwnerOptions, fn: (conn: OwnerConn) => Promise<T>): Promise<T> {
  if (o.ownerUrl) {
    const c = new pg.Client({ connectionString: o.ownerUrl, application_name: 'genfill-reconciler-owner', options: '-c TimeZone=UTC' });
    c.on('error', () => undefined);
    await c.connect();
    try {
      await becomeOwner(c, 'GENFILL_OWNER_DATABASE_URL');
      return await fn(c);
    } finally {
      await c.end().catch(() => undefined);
    }
  }
  const c = await db.connect();
  const ignore = () => undefined;
  c.on('error', ignore);
  let broken: Error | undefined;
  try {
    await becomeOwner(c, 'DATABASE_URL');
    return await fn(c);
  } catch (err) {
    broken = err as Error;
    throw err;
  } finally {
    // A session that acted as the owner never goes back to the pool as the owner.
    if (!broken) {
      await c.query('RESET ROLE; RESET statement_timeout; RESET lock_timeout').catch((e: Error) => (broken = e));
    }
    c.off('error', ignore);
    c.release(broken);
  }
}
