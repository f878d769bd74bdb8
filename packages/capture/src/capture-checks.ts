// What `genfill capture install` refuses, checked before anything is written (SPEC "Capture
// rules"): a table that is not the root of its partition tree, one without a NOT DEFERRABLE
// primary key or unique constraint on NOT NULL columns, one fed by logical replication (the
// apply worker fires no statement triggers), row-level security (the delete check must see
// every row), inheritance children, and a login that may not do the install. Every problem is
// reported at once.
import { InvalidInputError, type Problem, RefusedError } from '@genfill/contracts';
import type { Conn } from '@genfill/registry';
import { type CaptureRow, type MemberTriggers, CAPTURE_EVENTS } from './capture-sql.ts';

/** A capture refused before anything was written (exit 3); `problems` lists every reason. */
export class CaptureRefusedError extends RefusedError {
  constructor(
    readonly table: string,
    readonly problems: string[],
  ) {
    super(problems.length === 1 ? `${table}: ${problems[0]}` : `${table}:\n  - ${problems.join('\n  - ')}`);
  }
}

export interface SourceTable {
  relid: string;
  /** As genfill.captures and the change log name it: the regclass text, schema-qualified. */
  name: string;
  schema: string;
  relkind: string;
  persistence: string;
  isPartition: boolean;
  root: string | null;
  rowSecurity: boolean;
  inheritanceChildren: boolean;
  /** The table inherits from another (not a partition): a write naming that one bypasses it. */
  inheritanceChild: boolean;
  /** genfill_owner's access, which the trigger functions (running as it) need. */
  ownerSchemaUsage: boolean;
  ownerSelect: boolean;
  /** Whether this login owns the table (or is a member of its owner). */
  owned: boolean;
  /** Whether this login may GRANT SELECT on the table to genfill_owner itself. */
  canGrantSelect: boolean;
  /** Whether this login may run genfill.capture_prepare (a member of genfill_service). */
  canPrepare: boolean;
  login: string;
}

/** The table `table` names (as `::regclass` reads it), or null. */
export async function resolveTable(conn: Conn, table: string): Promise<SourceTable | null> {
  const { rows } = await conn.query<SourceTable>(
    `SELECT c.oid::text AS relid, format('%I.%I', n.nspname, c.relname) AS name, n.nspname AS schema, c.relkind::text AS relkind,
            c.relpersistence::text AS persistence, c.relispartition AS "isPartition",
            (SELECT format('%I.%I', (SELECT n.nspname FROM pg_namespace n WHERE n.oid = r.relnamespace), r.relname) FROM pg_class r WHERE c.relispartition AND r.oid = pg_partition_root(c.oid)) AS root,
            c.relrowsecurity AS "rowSecurity",
            c.relkind = 'r' AND EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhparent = c.oid) AS "inheritanceChildren",
            NOT c.relispartition AND EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid) AS "inheritanceChild",
            has_schema_privilege('genfill_owner', c.relnamespace, 'USAGE') AS "ownerSchemaUsage",
            has_table_privilege('genfill_owner', c.oid, 'SELECT') AS "ownerSelect",
            pg_has_role(current_user, c.relowner, 'USAGE') AS owned,
            pg_has_role(current_user, c.relowner, 'USAGE') OR has_table_privilege(current_user, c.oid, 'SELECT WITH GRANT OPTION') AS "canGrantSelect",
            coalesce((SELECT has_function_privilege(current_user, p.oid, 'EXECUTE') FROM pg_proc p
                       WHERE p.pronamespace = 'genfill'::regnamespace AND p.proname = 'capture_prepare'), false) AS "canPrepare",
            current_user::text AS login
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE c.oid = to_regclass($1)`,
    [table],
  );
  return rows[0] ?? null;
}

export interface KeyCandidate {
  constraint_name: string;
  kind: 'PRIMARY KEY' | 'UNIQUE';
  columns: string[];
  is_deferrable: boolean;
  nullable: string[];
}

export async function keyCandidates(conn: Conn, relid: string): Promise<KeyCandidate[]> {
  const { rows } = await conn.query<KeyCandidate>('SELECT * FROM genfill.capture_keys($1::oid::regclass)', [relid]);
  return rows;
}

export interface ChosenKey {
  constraint: string;
  kind: KeyCandidate['kind'];
  columns: string[];
}

const sameSet = (a: readonly string[], b: readonly string[]) => a.length === b.length && [...a].sort().join('\0') === [...b].sort().join('\0');
const usable = (k: KeyCandidate) => !k.is_deferrable && k.nullable.length === 0;

function whyNot(k: KeyCandidate): string {
  return k.is_deferrable
    ? `its ${k.kind} ${k.constraint_name} (${k.columns.join(', ')}) is DEFERRABLE: a deferred uniqueness check lets two transactions write one key and inverts its order in the log; make it NOT DEFERRABLE`
    : `its UNIQUE constraint ${k.constraint_name} allows NULL in ${k.nullable.join(', ')}: make the key columns NOT NULL`;
}

/**
 * The key the log records: `wanted` when given (a constraint on exactly those columns), else
 * the primary key, else the only usable unique constraint. Refused without a usable one; an
 * ambiguous choice is invalid input naming the candidates.
 */
export function chooseKey(table: string, candidates: readonly KeyCandidate[], wanted?: readonly string[]): ChosenKey {
  const pick = (k: KeyCandidate): ChosenKey => ({ constraint: k.constraint_name, kind: k.kind, columns: k.columns });
  if (wanted && wanted.length > 0) {
    const matching = candidates.filter((k) => sameSet(k.columns, wanted));
    const ok = matching.find(usable);
    if (ok) return pick(ok);
    if (matching.length === 0) {
      throw new CaptureRefusedError(table, [
        `has no PRIMARY KEY or UNIQUE constraint on exactly (${wanted.join(', ')}): the capture key must be one (ALTER TABLE … ADD CONSTRAINT … UNIQUE (${wanted.join(', ')}))`,
      ]);
    }
    throw new CaptureRefusedError(table, matching.map(whyNot));
  }
  const ok = candidates.filter(usable);
  const primary = ok.find((k) => k.kind === 'PRIMARY KEY');
  if (primary) return pick(primary);
  if (ok.length === 1) return pick(ok[0]!);
  if (ok.length > 1) {
    throw new InvalidInputError([
      { path: '--key', message: `${table} has several unique keys (${ok.map((k) => `(${k.columns.join(', ')})`).join(', ')}) and no primary key: name the capture key with --key` },
    ]);
  }
  if (candidates.length > 0) throw new CaptureRefusedError(table, candidates.map(whyNot));
  throw new CaptureRefusedError(table, [
    'has no PRIMARY KEY or UNIQUE constraint: the log records every change by key, and the key\'s row lock orders two writers of one key (add a primary key; a unique index alone is not a constraint: ALTER TABLE … ADD CONSTRAINT … UNIQUE USING INDEX …)',
  ]);
}

export interface InstallChecks {
  key: ChosenKey;
  /** genfill_owner lacks SELECT and this login may grant it: the install grants it. */
  grantSelect: boolean;
}

/** Members of the tree (partitions at any level) fed by a subscription. */
async function subscribedMembers(conn: Conn, relid: string): Promise<string[]> {
  const { rows } = await conn.query<{ member: string }>(
    `SELECT DISTINCT format('%I.%I', (SELECT n.nspname FROM pg_namespace n WHERE n.oid = c.relnamespace), c.relname) AS member FROM pg_subscription_rel sr JOIN pg_class c ON c.oid = sr.srrelid
      WHERE sr.srrelid IN (SELECT $1::oid UNION SELECT pt.relid::oid FROM pg_partition_tree($1::oid::regclass) pt) ORDER BY 1`,
    [relid],
  );
  return rows.map((r) => r.member);
}

/**
 * Every precondition of an install, or CaptureRefusedError listing all that fail (exit 3).
 * `existing` is the captures row of this table, if any.
 */
export async function checkInstall(
  conn: Conn,
  rel: SourceTable,
  members: readonly MemberTriggers[],
  existing: CaptureRow | null,
  wantedKey?: readonly string[],
): Promise<InstallChecks> {
  const problems: string[] = [];
  if (!['r', 'p'].includes(rel.relkind)) {
    throw new CaptureRefusedError(rel.name, ['is not a table: capture puts triggers on a table (or a partitioned table)']);
  }
  if (rel.isPartition) {
    throw new CaptureRefusedError(rel.name, [
      `is a partition of ${rel.root}: a statement naming ${rel.root} fires only ${rel.root}'s statement triggers; capture ${rel.root} (its partitions get the triggers too)`,
    ]);
  }
  if (existing?.mode === 'ingress') {
    throw new CaptureRefusedError(rel.name, ['is an ingress mirror (genfill capture install --ingress): only `genfill ingest` writes it and its log']);
  }
  if (existing && existing.source_table !== rel.name) {
    throw new CaptureRefusedError(rel.name, [
      `genfill.captures records it as ${existing.source_table}: it was renamed behind the DDL guard; rename it back, or \`genfill capture remove ${existing.source_table}\` and install again`,
    ]);
  }
  if (rel.persistence === 't') problems.push('is a temporary table: no other session can write it');
  if (['genfill', 'genfill_data', 'pg_catalog', 'information_schema'].includes(rel.schema) || rel.schema.startsWith('pg_')) {
    problems.push('belongs to genfill or the system: capture one of your own tables');
  }
  if (rel.inheritanceChildren) problems.push('has inheritance children: a write naming a child fires only the child\'s triggers');
  if (rel.inheritanceChild) problems.push('inherits from another table: a write naming that table fires only its own triggers (ALTER TABLE … NO INHERIT)');
  if (rel.rowSecurity) {
    problems.push('has row-level security enabled: the capture\'s delete check reads the table as genfill_owner and must see every row (ALTER TABLE … DISABLE ROW LEVEL SECURITY)');
  }
  const foreignTables = members.filter((m) => !['r', 'p'].includes(m.relkind)).map((m) => m.member);
  if (foreignTables.length > 0) problems.push(`has partitions that are not tables (${foreignTables.join(', ')}): statement triggers with transition tables need tables`);
  const subscribed = await subscribedMembers(conn, rel.relid);
  if (subscribed.length > 0) {
    problems.push(
      `is fed by logical replication (${subscribed.join(', ')} in pg_subscription_rel): the apply worker fires no statement triggers, so its writes would never reach the log`,
    );
  }
  const named = members.filter((m) => m.foreign.length > 0);
  for (const m of named) problems.push(`${m.member} has its own trigger named ${m.foreign.map((e) => `genfill_capture_${e}`).join(', ')}: rename it`);

  let key: ChosenKey | undefined;
  try {
    key = chooseKey(rel.name, await keyCandidates(conn, rel.relid), wantedKey ?? existing?.key_columns);
  } catch (err) {
    if (!(err instanceof CaptureRefusedError)) throw err;
    problems.push(...err.problems);
  }
  if (key && existing && !sameSet(key.columns, existing.key_columns)) {
    problems.push(
      `is captured with key (${existing.key_columns.join(', ')}), not (${key.columns.join(', ')}): \`genfill capture remove ${rel.name}\` first to change the key`,
    );
  }

  if (!rel.canPrepare) {
    problems.push(`${rel.login} may not install a capture: it runs as a member of genfill_service (GRANT genfill_service TO ${rel.login})`);
  }
  const notOwned = members.filter((m) => !m.owned && !CAPTURE_EVENTS.every((e) => m.triggers[e] === 'A'));
  for (const m of notOwned) {
    problems.push(
      `${rel.login} does not own ${m.member} (${m.owner} does): only the owner may ENABLE ALWAYS a trigger; run the install as ${m.owner}, or GRANT ${m.owner} TO ${rel.login}`,
    );
  }
  if (!rel.ownerSchemaUsage) problems.push(`genfill_owner may not use schema ${rel.schema}, and the capture triggers run as genfill_owner: GRANT USAGE ON SCHEMA ${rel.schema} TO genfill_owner`);
  const grantSelect = !rel.ownerSelect && rel.canGrantSelect;
  if (!rel.ownerSelect && !rel.canGrantSelect) {
    problems.push(`genfill_owner may not read ${rel.name}, which the capture triggers do on every write (the delete check): GRANT SELECT ON ${rel.name} TO genfill_owner`);
  }
  if (problems.length > 0 || !key) throw new CaptureRefusedError(rel.name, problems);
  return { key, grantSelect };
}

/** For an InvalidInputError on a bad --key column list (before any query). */
export function keyOptionProblems(key: readonly string[] | undefined): Problem[] {
  if (!key) return [];
  const seen = new Set<string>();
  const problems: Problem[] = [];
  key.forEach((k, i) => {
    if (k.length === 0) problems.push({ path: `--key.${i}`, message: 'empty column name' });
    else if (seen.has(k)) problems.push({ path: `--key.${i}`, message: `${k} is named twice` });
    seen.add(k);
  });
  return problems;
}
