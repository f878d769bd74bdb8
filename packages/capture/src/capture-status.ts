// `genfill capture status`: every captured table, whether each of its triggers is in place
// and ENABLE ALWAYS on the root and every partition, what could let a write go unlogged, its
// events in the log, and the oldest one some consumer has not consumed yet. A consumer's
// progress is its frontier (SPEC invariant 6): an event is pending for a frontier F when F
// does not see its transaction. While no frontier of a dataset on the table exists (no
// projector or catch-up has run), every event is pending and the oldest event is shown.
import { OPEN_STATES } from '@genfill/contracts';
import type { Conn, Db } from '@genfill/registry';
import { type CaptureEvent, type CaptureRow, captureProblems, memberTriggers } from './capture-sql.ts';

export interface CaptureStatus {
  table: string;
  mode: 'trigger' | 'ingress';
  key: string[];
  installedAt: string;
  installedBy: string;
  /** Trigger mode: nothing in capture_problems. Ingress mode: always true (no triggers). */
  healthy: boolean;
  problems: string[];
  /** Trigger mode: per table of the tree, each trigger's tgenabled ('A' = ENABLE ALWAYS) or null when missing. */
  members: { table: string; triggers: Record<CaptureEvent, string | null> }[];
  log: { events: number; bytes: number };
  /** The oldest event a consumer has not consumed; `basis` says against what. */
  oldestPending: {
    eventId: string;
    txid: string;
    loggedAt: string;
    /** 'frontier': not visible in some frontier of a dataset on this table; 'no-consumer': no frontier exists yet. */
    basis: 'frontier' | 'no-consumer';
  } | null;
  /** Open releases whose source this table is. */
  openReleases: string[];
}

interface Row extends CaptureRow {
  installed_at: Date;
  installed_by: string;
}

async function logSize(conn: Conn | Db, table: string): Promise<{ events: number; bytes: number }> {
  const { rows } = await conn.query<{ events: string; bytes: string }>(
    `SELECT count(*)::text AS events, coalesce(sum(pg_column_size(l.*)), 0)::text AS bytes FROM genfill.change_log l WHERE l.source_table = $1`,
    [table],
  );
  return { events: Number(rows[0]!.events), bytes: Number(rows[0]!.bytes) };
}

/**
 * With frontiers: per frontier F the first event by txid among those F cannot see, read by the
 * two index ranges SPEC "Capture rules" gives (txid ≥ xmax(F), or txid in F's xip) rather than
 * scanning everything F already consumed.
 */
async function oldestPending(conn: Conn | Db, table: string, relid: string): Promise<CaptureStatus['oldestPending']> {
  const { rows } = await conn.query<{ event_id: string; txid: string; logged_at: Date; basis: 'frontier' | 'no-consumer' }>(
    `WITH f AS (SELECT fr.snapshot FROM genfill.frontiers fr JOIN genfill.datasets d ON d.name = fr.dataset
                 WHERE to_regclass(d.source_table) = $2::oid)
     SELECT event_id::text, txid::text, logged_at, basis FROM (
       (SELECT l.event_id, l.txid, l.logged_at, 'no-consumer' AS basis FROM genfill.change_log l
         WHERE l.source_table = $1 AND NOT EXISTS (SELECT 1 FROM f) ORDER BY l.txid, l.event_id LIMIT 1)
       UNION ALL
       SELECT p.event_id, p.txid, p.logged_at, 'frontier' FROM f CROSS JOIN LATERAL (
         (SELECT l.event_id, l.txid, l.logged_at FROM genfill.change_log l
           WHERE l.source_table = $1 AND l.txid >= pg_snapshot_xmax(f.snapshot) ORDER BY l.txid, l.event_id LIMIT 1)
         UNION ALL
         (SELECT l.event_id, l.txid, l.logged_at FROM genfill.change_log l
           WHERE l.source_table = $1 AND l.txid = ANY (ARRAY(SELECT pg_snapshot_xip(f.snapshot))) ORDER BY l.txid, l.event_id LIMIT 1)) p
     ) e ORDER BY txid, event_id LIMIT 1`,
    [table, relid],
  );
  const r = rows[0];
  return r ? { eventId: r.event_id, txid: r.txid, loggedAt: r.logged_at.toISOString(), basis: r.basis } : null;
}

/** Every captured table (or only `table`, as genfill.captures names it or as it resolves). */
export async function captureStatus(db: Db, opts: { table?: string } = {}): Promise<CaptureStatus[]> {
  const conn = await db.connect();
  try {
    // One snapshot for the whole report.
    await conn.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const { rows } = await conn.query<Row>(
      `SELECT source_table, relid::text AS relid, mode, key_columns, column_snapshot, installed_at, installed_by
         FROM genfill.captures
        WHERE $1::text IS NULL OR source_table = $1 OR relid = to_regclass($1)
        ORDER BY source_table`,
      [opts.table ?? null],
    );
    const out: CaptureStatus[] = [];
    for (const c of rows) {
      const trigger = c.mode === 'trigger';
      const exists = (await conn.query('SELECT 1 FROM pg_class WHERE oid = $1::oid', [c.relid])).rowCount === 1;
      const problems = trigger ? await captureProblems(conn, c) : [];
      const members = trigger && exists ? await memberTriggers(conn, c.relid) : [];
      const open = await conn.query<{ id: string }>(
        `SELECT r.id FROM genfill.releases r JOIN genfill.datasets d ON d.name = r.dataset
          WHERE to_regclass(d.source_table) = $1::oid AND r.state = ANY ($2::text[]) ORDER BY r.id`,
        [c.relid, OPEN_STATES],
      );
      out.push({
        table: c.source_table,
        mode: c.mode,
        key: c.key_columns,
        installedAt: c.installed_at.toISOString(),
        installedBy: c.installed_by,
        healthy: problems.length === 0,
        problems,
        members: members.map((m) => ({ table: m.member, triggers: m.triggers })),
        log: await logSize(conn, c.source_table),
        oldestPending: await oldestPending(conn, c.source_table, c.relid),
        openReleases: open.rows.map((r) => r.id),
      });
    }
    await conn.query('COMMIT');
    return out;
  } catch (err) {
    await conn.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    conn.release();
  }
}
