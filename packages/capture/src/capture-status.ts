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

/**
 * The table's events and their bytes, and the oldest event some consumer has not consumed:
 * counts and ids from the owner's genfill.capture_log_status (migration 0025: people may not
 * read the change log). With frontiers: per frontier F the first event by txid among those F
 * cannot see, read by the two index ranges SPEC "Capture rules" gives.
 */
async function logStatus(conn: Conn | Db, table: string): Promise<Pick<CaptureStatus, 'log' | 'oldestPending'>> {
  const { rows } = await conn.query<{ events: string; bytes: string; event_id: string | null; txid: string | null; logged_at: Date | null; basis: 'frontier' | 'no-consumer' | null }>(
    `SELECT events::text, bytes::text, oldest_event_id::text AS event_id, oldest_txid::text AS txid, oldest_logged_at AS logged_at, basis
       FROM genfill.capture_log_status($1)`,
    [table],
  );
  const r = rows[0]!;
  return {
    log: { events: Number(r.events), bytes: Number(r.bytes) },
    oldestPending: r.event_id !== null ? { eventId: r.event_id, txid: r.txid!, loggedAt: r.logged_at!.toISOString(), basis: r.basis! } : null,
  };
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
        ...(await logStatus(conn, c.source_table)),
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
