// The capture triggers as SQL: their names, what each fires on, the statements that make
// them and the catalog queries install, remove and status share. The trigger functions
// themselves are made by genfill.capture_prepare (migration 0010), which owns them; the
// triggers are made here, as the calling login, because PostgreSQL lets only a table's owner
// ENABLE ALWAYS a trigger (docs/capture.md, "Who runs what").
import { OPEN_STATES } from '@genfill/contracts';
import type { Conn, Db } from '@genfill/registry';

export const CAPTURE_EVENTS = ['insert', 'update', 'delete', 'truncate'] as const;
export type CaptureEvent = (typeof CAPTURE_EVENTS)[number];

export const triggerName = (event: CaptureEvent): string => `genfill_capture_${event}`;

/** genfill.capture_<oid>_<event>, or the one TRUNCATE refuser every captured table shares. */
export function triggerFunction(relid: string, event: CaptureEvent): string {
  return event === 'truncate' ? 'genfill.capture_refuse_truncate' : `genfill.capture_${relid}_${event}`;
}

/**
 * CREATE TRIGGER for one event on one member of the captured tree (`member`: a regclass text,
 * already quoted). Statement-level AFTER triggers with transition tables (one per event:
 * transition tables forbid multi-event triggers); TRUNCATE is refused BEFORE it runs.
 */
export function createTriggerSql(member: string, relid: string, event: CaptureEvent): string {
  const fn = `${triggerFunction(relid, event)}()`;
  switch (event) {
    case 'insert':
      return `CREATE TRIGGER ${triggerName(event)} AFTER INSERT ON ${member} REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ${fn}`;
    case 'update':
      return `CREATE TRIGGER ${triggerName(event)} AFTER UPDATE ON ${member} REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ${fn}`;
    case 'delete':
      return `CREATE TRIGGER ${triggerName(event)} AFTER DELETE ON ${member} REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION ${fn}`;
    case 'truncate':
      return `CREATE TRIGGER ${triggerName(event)} BEFORE TRUNCATE ON ${member} FOR EACH STATEMENT EXECUTE FUNCTION ${fn}`;
  }
}

/**
 * One ALTER TABLE for all four: the DDL guard checks the table after each statement, and a
 * set of triggers enabled one by one would look broken halfway (a writer with
 * session_replication_role = replica fires only ENABLE ALWAYS triggers).
 */
export function enableAlwaysSql(member: string): string {
  return `ALTER TABLE ${member} ${CAPTURE_EVENTS.map((e) => `ENABLE ALWAYS TRIGGER ${triggerName(e)}`).join(', ')}`;
}

export interface MemberTriggers {
  /** regclass text of the table (the root or one of its partitions, at any level). */
  member: string;
  oid: string;
  relkind: string;
  owner: string;
  /** Whether the current login may ALTER it (owns it, or is a member of its owner). */
  owned: boolean;
  /** Per event: tgenabled ('A' = ENABLE ALWAYS) when genfill's trigger is there, else null. */
  triggers: Record<CaptureEvent, string | null>;
  /** Per event: the trigger with that name is not genfill's (other function or kind). */
  foreign: CaptureEvent[];
}

/** The root and every partition below it, with the state of genfill's triggers on each. */
export async function memberTriggers(conn: Conn | Db, relid: string): Promise<MemberTriggers[]> {
  const { rows } = await conn.query<{
    member: string;
    oid: string;
    relkind: string;
    owner: string;
    owned: boolean;
    triggers: { name: string; enabled: string; ours: boolean }[];
  }>(
    `WITH members AS (SELECT $1::oid AS m UNION SELECT pt.relid::oid FROM pg_partition_tree($1::oid::regclass) pt)
     SELECT format('%I.%I', (SELECT n.nspname FROM pg_namespace n WHERE n.oid = c.relnamespace), c.relname) AS member, c.oid::text AS oid, c.relkind::text AS relkind, pg_get_userbyid(c.relowner) AS owner,
            pg_has_role(current_user, c.relowner, 'USAGE') AS owned,
            coalesce((SELECT json_agg(json_build_object('name', t.tgname, 'enabled', t.tgenabled,
                        'ours', t.tgfoid = (SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'genfill'::regnamespace
                                              AND p.proname = CASE t.tgname WHEN 'genfill_capture_truncate' THEN 'capture_refuse_truncate'
                                                                            ELSE format('capture_%s_%s', $1::oid, substr(t.tgname, 17)) END)
                                AND t.tgtype = CASE t.tgname WHEN 'genfill_capture_insert' THEN 4 WHEN 'genfill_capture_update' THEN 16
                                                             WHEN 'genfill_capture_delete' THEN 8 ELSE 34 END))
                        FROM pg_trigger t WHERE t.tgrelid = c.oid AND t.tgname LIKE 'genfill\\_capture\\_%'), '[]') AS triggers
       FROM members m JOIN pg_class c ON c.oid = m.m
      ORDER BY c.oid = $1::oid DESC, 1`,
    [relid],
  );
  return rows.map((r) => {
    const triggers = Object.fromEntries(CAPTURE_EVENTS.map((e) => [e, null])) as Record<CaptureEvent, string | null>;
    const foreign: CaptureEvent[] = [];
    for (const t of r.triggers) {
      const event = CAPTURE_EVENTS.find((e) => triggerName(e) === t.name);
      if (!event) continue;
      if (t.ours) triggers[event] = t.enabled;
      else foreign.push(event);
    }
    return { member: r.member, oid: r.oid, relkind: r.relkind, owner: r.owner, owned: r.owned, triggers, foreign };
  });
}

/** A member whose four triggers are genfill's and ENABLE ALWAYS. */
export const memberHealthy = (m: MemberTriggers): boolean => m.foreign.length === 0 && CAPTURE_EVENTS.every((e) => m.triggers[e] === 'A');

/** Tables outside the tree that still fire this capture's functions (a detached partition). */
export async function strayTriggerTables(conn: Conn | Db, relid: string): Promise<{ member: string; owned: boolean }[]> {
  const { rows } = await conn.query<{ member: string; owned: boolean }>(
    `SELECT DISTINCT format('%I.%I', (SELECT n.nspname FROM pg_namespace n WHERE n.oid = c.relnamespace), c.relname) AS member, pg_has_role(current_user, c.relowner, 'USAGE') AS owned
       FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
      WHERE t.tgfoid IN (SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'genfill'::regnamespace
                            AND p.proname IN (format('capture_%s_insert', $1::oid), format('capture_%s_update', $1::oid), format('capture_%s_delete', $1::oid)))
        AND t.tgrelid NOT IN (SELECT $1::oid UNION SELECT pt.relid::oid FROM pg_partition_tree($1::oid::regclass) pt)
      ORDER BY 1`,
    [relid],
  );
  return rows;
}

export interface CaptureRow {
  source_table: string;
  relid: string;
  mode: 'trigger' | 'ingress';
  key_columns: string[];
  column_snapshot: string[] | null;
}

export async function findCapture(conn: Conn | Db, where: { relid?: string; name?: string }): Promise<CaptureRow | null> {
  const { rows } = await conn.query<CaptureRow>(
    `SELECT source_table, relid::text AS relid, mode, key_columns, column_snapshot FROM genfill.captures
      WHERE relid = $1::oid OR source_table = $2 ORDER BY relid = $1::oid DESC LIMIT 1`,
    [where.relid ?? '0', where.name ?? null],
  );
  return rows[0] ?? null;
}

/** What would let a write go unlogged, as genfill.capture_problems sees the catalogs. */
export async function captureProblems(conn: Conn | Db, c: Pick<CaptureRow, 'relid' | 'source_table' | 'key_columns'>): Promise<string[]> {
  const { rows } = await conn.query<{ problems: string[] }>('SELECT genfill.capture_problems($1::oid, $2, $3::text[]) AS problems', [
    c.relid,
    c.source_table,
    c.key_columns,
  ]);
  return rows[0]!.problems;
}

export interface OpenRelease {
  id: string;
  state: string;
}

/** Releases still open whose dataset's source is this table. */
export async function openReleasesOn(conn: Conn | Db, relid: string): Promise<OpenRelease[]> {
  const { rows } = await conn.query<OpenRelease>(
    `SELECT r.id, r.state FROM genfill.releases r JOIN genfill.datasets d ON d.name = r.dataset
      WHERE to_regclass(d.source_table) = $1::oid AND r.state = ANY ($2::text[])
      ORDER BY r.id`,
    [relid, OPEN_STATES],
  );
  return rows;
}
