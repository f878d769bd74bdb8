// One snapshot for every check (SPEC invariant 10), read by up to two connections at once:
// the first opens a REPEATABLE READ READ ONLY transaction and exports its snapshot, the
// others import it with SET TRANSACTION SNAPSHOT (what pg_dump --jobs does). Every query
// then sees exactly the same rows, and the hashing passes over the candidate and over the
// dual compute — the bulk of the cost — run side by side.
import type pg from 'pg';
import type { Db } from '@genfill/registry';

export interface SnapshotOptions {
  /** Connections reading the snapshot (1 = no parallel passes). */
  connections: number;
  /** work_mem for the reconciler's transactions: the old-vs-new join hashes a whole range. */
  workMem: string;
  /** max_parallel_workers_per_gather of each connection; undefined keeps the server's. */
  workersPerPass?: number;
}

export interface SnapshotSession {
  /** The first connection: it exported the snapshot. */
  primary: pg.PoolClient;
  /** Every connection, the primary first. */
  all: pg.PoolClient[];
  /** pg_current_snapshot() of the transaction: stored with the verdict. */
  snapshot: string;
  close(): Promise<void>;
}

const WORK_MEM = /^\d+(kB|MB|GB)$/;

async function begin(conn: pg.PoolClient, o: SnapshotOptions, importId?: string): Promise<void> {
  await conn.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
  // SET TRANSACTION SNAPSHOT takes no parameters; the id comes from pg_export_snapshot().
  if (importId !== undefined) await conn.query(`SET TRANSACTION SNAPSHOT '${importId}'`);
  await conn.query(`SET LOCAL work_mem = '${o.workMem}'`);
  if (o.workersPerPass !== undefined) await conn.query(`SET LOCAL max_parallel_workers_per_gather = ${Math.max(0, Math.floor(o.workersPerPass))}`);
  // Measured on the demo: JIT compilation of the wide aggregate queries cost more than it
  // saved (up to 0.4 s per pass), and it made every small bisection query slower.
  await conn.query('SET LOCAL jit = off');
}

export async function openSnapshot(db: Db, o: SnapshotOptions): Promise<SnapshotSession> {
  if (!WORK_MEM.test(o.workMem)) throw new Error(`workMem must look like 256MB, not ${JSON.stringify(o.workMem)}`);
  const all: pg.PoolClient[] = [];
  const release = async (commit: boolean) => {
    for (const c of all) {
      await c.query(commit ? 'COMMIT' : 'ROLLBACK').catch(() => undefined);
      c.release();
    }
    all.length = 0;
  };
  try {
    const primary = await db.connect();
    all.push(primary);
    await begin(primary, o);
    const { rows } = await primary.query<{ id: string; snap: string }>('SELECT pg_export_snapshot() AS id, pg_current_snapshot()::text AS snap');
    const { id, snap } = rows[0]!;
    if (!/^[0-9A-F-]+$/i.test(id)) throw new Error(`unexpected snapshot id ${id}`);
    for (let i = 1; i < o.connections; i++) {
      const c = await db.connect();
      all.push(c);
      await begin(c, o, id);
    }
    const conns = [...all];
    return { primary, all: conns, snapshot: snap, close: () => release(true) };
  } catch (err) {
    await release(false);
    throw err;
  }
}

/**
 * Run tasks over the session's connections, each connection taking the next task when it
 * is free. Results come back in task order.
 */
export async function onConnections<T extends readonly unknown[]>(
  session: SnapshotSession,
  tasks: { readonly [K in keyof T]: (conn: pg.PoolClient) => Promise<T[K]> },
): Promise<T> {
  const out: unknown[] = new Array(tasks.length);
  let next = 0;
  await Promise.all(
    session.all.map(async (conn) => {
      while (next < tasks.length) {
        const i = next++;
        out[i] = await tasks[i]!(conn);
      }
    }),
  );
  return out as unknown as T;
}
