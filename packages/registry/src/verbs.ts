// A person's state change is a verb function in the database (migration 0006): SECURITY
// DEFINER, search_path pinned, EXECUTE granted to the role that may use it. These are their
// callers; what the functions raise becomes a named error through contracts' one table
// (errorFromPg), with the function's own message, which says what to do next.
import { errorFromPg, type PgErrorContext, type ReleaseSpec, type ReleaseState } from '@genfill/contracts';
import { withTransaction, type Conn, type Db } from './db.ts';

async function call<T>(conn: Conn | Db, text: string, values: unknown[], context: PgErrorContext = {}): Promise<T[]> {
  try {
    return (await conn.query(text, values)).rows as T[];
  } catch (err) {
    throw errorFromPg(err, context);
  }
}

/**
 * Run `fn` in a transaction whose registry writes record `principal` (the API's token
 * subject, or the requester a service executes for). The database honours it only for a
 * login in genfill_api or genfill_service; for anyone else session_user stands.
 */
export async function asPrincipal<T>(db: Db, principal: string | null | undefined, fn: (conn: Conn) => Promise<T>): Promise<T> {
  return withTransaction(db, async (conn) => {
    if (principal) await conn.query(`SELECT set_config('genfill.principal', $1, true)`, [principal]);
    return fn(conn);
  });
}

export async function submitReleaseVerb(conn: Conn | Db, r: { spec: ReleaseSpec; digest: string; transformSql: string }): Promise<'submitted' | 'unchanged'> {
  const rows = await call<{ status: 'submitted' | 'unchanged' }>(
    conn,
    'SELECT genfill.submit_release($1, $2, $3) AS status',
    [JSON.stringify(r.spec), r.digest, r.transformSql],
    { release: r.spec.release, digest: r.digest },
  );
  return rows[0]!.status;
}

/** A Bull Board retry, promote or clean of a release's jobs, recorded in its log (genfill.record_board_action). */
export async function boardActionVerb(
  conn: Conn | Db,
  q: { release: string; action: 'retry' | 'promote' | 'clean'; detail: Record<string, unknown> },
): Promise<number> {
  const rows = await call<{ id: string }>(conn, 'SELECT genfill.record_board_action($1, $2, $3) AS id', [q.release, q.action, JSON.stringify(q.detail)]);
  return Number(rows[0]!.id);
}

export async function operatorPauseVerb(
  conn: Conn | Db,
  q: { release: string; paused: boolean; reason: string | null; detail?: unknown },
): Promise<{ state: ReleaseState; changed: boolean }> {
  const rows = await call<{ state: ReleaseState; changed: boolean }>(conn, 'SELECT * FROM genfill.set_operator_pause($1, $2, $3, $4)', [
    q.release,
    q.paused,
    q.reason,
    q.detail === undefined ? null : JSON.stringify(q.detail),
  ]);
  return rows[0]!;
}

export async function cancelReleaseVerb(conn: Conn | Db, q: { release: string; reason: string | null; detail?: unknown }): Promise<ReleaseState> {
  const rows = await call<{ from: ReleaseState }>(conn, 'SELECT genfill.cancel_release($1, $2, $3) AS "from"', [
    q.release,
    q.reason,
    q.detail === undefined ? null : JSON.stringify(q.detail),
  ]);
  return rows[0]!.from;
}

export interface ApproveRow {
  outcome: 'approved' | 'recorded' | 'already-approved';
  reconciliation_id: string;
  approvals: number;
  required: number;
  state: ReleaseState;
  principal: string;
}

export async function approveVerb(conn: Conn | Db, q: { release: string; reconciliationId: string | null }): Promise<ApproveRow> {
  const rows = await call<ApproveRow>(conn, 'SELECT * FROM genfill.approve($1, $2)', [q.release, q.reconciliationId]);
  return rows[0]!;
}
