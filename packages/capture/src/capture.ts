// `genfill capture install|remove <table>`: statement-level AFTER triggers that append every
// change of a source table to genfill.change_log (SPEC "Capture rules", invariant 5).
//
// Install runs in one transaction as the table's owner who is a member of genfill_service:
// genfill.capture_prepare (SECURITY DEFINER, migration 0010) makes the table's three trigger
// functions, owned by genfill_owner, so writers need no privilege on the log; this login then
// creates four triggers on the table and on every partition of it (a statement naming a
// partition fires only that partition's statement triggers), enables them ALWAYS in one
// statement per table, records the table in genfill.captures and lets
// genfill.capture_ddl_check verify the result before the commit. Installing again changes
// nothing when everything is in place, and repairs what is not.
//
// Remove is refused while a release whose source is the table is open; otherwise it forgets
// the table first (so the DDL guard lets the triggers go), drops every trigger and the
// functions. The log stays.
import { errorFromPg, InvalidInputError, NotFoundError } from '@genfill/contracts';
import { withTransaction, type Conn, type Db } from '@genfill/registry';
import { CaptureRefusedError, checkInstall, keyOptionProblems, resolveTable } from './capture-checks.ts';
import {
  CAPTURE_EVENTS,
  captureProblems,
  createTriggerSql,
  enableAlwaysSql,
  findCapture,
  memberHealthy,
  memberTriggers,
  openReleasesOn,
  strayTriggerTables,
  triggerName,
} from './capture-sql.ts';

export interface CaptureInstall {
  table: string;
  status: 'installed' | 'repaired' | 'unchanged';
  key: string[];
  /** The constraint the key is, e.g. `PRIMARY KEY orders_pkey`. */
  constraint: string;
  /** The root and every partition: each carries the four triggers. */
  members: string[];
  /** Tables whose triggers this run (re)made. */
  changed: string[];
  /** Privileges this run granted (genfill_owner reads the table in the delete check). */
  granted: string[];
}

async function sqlStep<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw errorFromPg(err);
  }
}

async function dropOurTriggers(conn: Conn, member: string): Promise<void> {
  for (const e of CAPTURE_EVENTS) await conn.query(`DROP TRIGGER IF EXISTS ${triggerName(e)} ON ${member}`);
}

/** Capture `table`: idempotent; refused (nothing written) when a precondition fails. */
export async function installCapture(db: Db, input: { table: string; key?: string[] }): Promise<CaptureInstall> {
  const keyProblems = keyOptionProblems(input.key);
  if (keyProblems.length > 0) throw new InvalidInputError(keyProblems);
  return withTransaction(db, async (conn) => {
    const rel = await resolveTable(conn, input.table);
    if (!rel) throw new NotFoundError(`table ${input.table} does not exist in this database (name it as schema.table)`);
    // The lock CREATE TRIGGER takes anyway, taken first: two installs (or an install and a
    // remove) of one table run one after the other, the second seeing what the first did.
    if (rel.owned && ['r', 'p'].includes(rel.relkind)) await conn.query(`LOCK TABLE ${rel.name} IN SHARE ROW EXCLUSIVE MODE`);
    const existing = await findCapture(conn, { relid: rel.relid, name: rel.name });
    const members = await memberTriggers(conn, rel.relid);
    const checks = await checkInstall(conn, rel, members, existing, input.key);
    const key = checks.key.columns;
    const result: CaptureInstall = {
      table: rel.name,
      status: 'unchanged',
      key,
      constraint: `${checks.key.kind} ${checks.key.constraint}`,
      members: members.map((m) => m.member),
      changed: [],
      granted: [],
    };

    if (checks.grantSelect) {
      await conn.query(`GRANT SELECT ON ${rel.name} TO genfill_owner`);
      result.granted.push(`SELECT ON ${rel.name} TO genfill_owner`);
    }
    const { rows } = await sqlStep(() =>
      conn.query<{ made: number }>('SELECT genfill.capture_prepare($1::oid::regclass, $2::text[]) AS made', [rel.relid, key]),
    );
    const strays = await strayTriggerTables(conn, rel.relid);
    const healthy = existing !== null && strays.length === 0 && (await captureProblems(conn, existing)).length === 0;
    if (healthy) {
      if (rows[0]!.made > 0) result.status = 'repaired';
      return result;
    }

    // Forget the table while the triggers are remade, so the DDL guard judges only the result.
    if (existing) await conn.query('DELETE FROM genfill.captures WHERE relid = $1::oid', [rel.relid]);
    for (const s of strays) {
      if (!s.owned) throw new CaptureRefusedError(rel.name, [`${s.member} left its partition tree but still fires its capture triggers, and only its owner may drop them`]);
      await dropOurTriggers(conn, s.member);
      result.changed.push(s.member);
    }
    const todo = members.filter((m) => !memberHealthy(m));
    for (const m of todo) {
      if (CAPTURE_EVENTS.some((e) => m.triggers[e] !== null)) await dropOurTriggers(conn, m.member);
      for (const e of CAPTURE_EVENTS) await conn.query(createTriggerSql(m.member, rel.relid, e));
    }
    for (const m of todo) {
      await conn.query(enableAlwaysSql(m.member));
      result.changed.push(m.member);
    }
    await conn.query(
      `INSERT INTO genfill.captures (source_table, relid, mode, key_columns, column_snapshot)
       VALUES ($1, $2::oid, 'trigger', $3::text[], coalesce($4::text[], genfill.capture_columns($2::oid::regclass)))`,
      [rel.name, rel.relid, key, existing?.column_snapshot ?? null],
    );
    // Verifies every member before the commit; a column change made while the capture was
    // broken still blocks the releases on it.
    await sqlStep(() => conn.query('SELECT genfill.capture_ddl_check(ARRAY[$1::oid], NULL, $2)', [rel.relid, 'genfill capture install']));
    await conn.query('SELECT genfill.change_log_add_partitions()');
    result.status = existing ? 'repaired' : 'installed';
    return result;
  });
}

export interface CaptureRemove {
  table: string;
  status: 'removed' | 'not-captured';
  /** Tables whose capture triggers were dropped. */
  dropped: string[];
  /** Events of the table that stay in the change log. */
  events: number;
}

/** Stop capturing `table`; refused while a release on it is open. Idempotent. */
export async function removeCapture(db: Db, input: { table: string }): Promise<CaptureRemove> {
  return withTransaction(db, async (conn) => {
    const rel = await resolveTable(conn, input.table);
    if (rel?.owned && ['r', 'p'].includes(rel.relkind)) await conn.query(`LOCK TABLE ${rel.name} IN SHARE ROW EXCLUSIVE MODE`);
    const capture = await findCapture(conn, { relid: rel?.relid, name: rel?.name ?? input.table });
    const name = rel?.name ?? capture?.source_table ?? input.table;
    if (capture?.mode === 'ingress') {
      throw new CaptureRefusedError(name, ['is an ingress mirror, not captured by triggers: this command removes trigger captures only']);
    }
    const relid = capture?.relid ?? rel?.relid;
    if (!relid) return { table: name, status: 'not-captured', dropped: [], events: 0 };

    const open = await openReleasesOn(conn, relid);
    if (open.length > 0) {
      throw new CaptureRefusedError(name, [
        `is the source of open release${open.length === 1 ? '' : 's'} ${open.map((r) => `${r.id} (${r.state})`).join(', ')}: ` +
          'its writes must keep reaching the log until they finish; cancel them or let them finish first',
      ]);
    }
    const exists = rel !== null && rel.relid === relid;
    const carriers = exists ? (await memberTriggers(conn, relid)).filter((m) => CAPTURE_EVENTS.some((e) => m.triggers[e] !== null)) : [];
    const strays = await strayTriggerTables(conn, relid);
    const notOwned = [...carriers.filter((m) => !m.owned).map((m) => `${m.member} (owner ${m.owner})`), ...strays.filter((s) => !s.owned).map((s) => s.member)];
    if (notOwned.length > 0) {
      throw new CaptureRefusedError(name, [`only a table's owner may drop its triggers: run the remove as the owner of ${notOwned.join(', ')}`]);
    }

    if (capture) await conn.query('DELETE FROM genfill.captures WHERE relid = $1::oid AND mode = $2', [relid, 'trigger']);
    const dropped: string[] = [];
    for (const t of [...carriers.map((m) => m.member), ...strays.map((s) => s.member)]) {
      await dropOurTriggers(conn, t);
      dropped.push(t);
    }
    const { rows } = await sqlStep(() => conn.query<{ n: number }>('SELECT genfill.capture_drop_functions($1::oid) AS n', [relid]));
    const events = await conn.query<{ n: string }>('SELECT count(*)::text AS n FROM genfill.change_log WHERE source_table = $1', [name]);
    const removed = capture !== null || dropped.length > 0 || rows[0]!.n > 0;
    return { table: name, status: removed ? 'removed' : 'not-captured', dropped, events: Number(events.rows[0]!.n) };
  });
}

