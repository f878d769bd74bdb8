// What a release needs from the database before it may be submitted: the source table, its
// key and time columns, the dependencies, and a probe of the transform. Reads only; every
// problem is returned with its path so the operator sees them all at once.
import { ambiguousZoneProblem, type LoadedRelease, type Problem } from '@genfill/contracts';
import { relationColumns, SYSTEM_COLUMNS, type Conn } from '@genfill/registry';
import { probeTransform } from '@genfill/transform';

const TIME_TYPES = ['timestamp with time zone', 'timestamp without time zone', 'date'];

export interface Column {
  name: string;
  type: string;
  not_null: boolean;
}

export async function tableColumns(conn: Conn, relation: string): Promise<{ oid: number; kind: string; columns: Column[] } | null> {
  const { rows } = await conn.query<{ oid: number; relkind: string }>(
    `SELECT c.oid::int AS oid, c.relkind::text AS relkind FROM pg_class c WHERE c.oid = to_regclass($1)`,
    [relation],
  );
  if (!rows[0]) return null;
  const cols = await relationColumns(conn, rows[0].oid);
  return { oid: rows[0].oid, kind: rows[0].relkind, columns: cols.map((c) => ({ name: c.name, type: c.type, not_null: c.notNull })) };
}

async function hasUniqueIndexOn(conn: Conn, oid: number, key: string[]): Promise<boolean> {
  const { rows } = await conn.query<{ ok: boolean }>(
    `SELECT EXISTS (
       SELECT 1 FROM pg_index i
        WHERE i.indrelid = $1 AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
          AND i.indnkeyatts = cardinality($2::text[])
          AND (SELECT array_agg(a.attname::text ORDER BY a.attname)
                 FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                WHERE k.n <= i.indnkeyatts)
              = (SELECT array_agg(x ORDER BY x) FROM unnest($2::text[]) AS x)) AS ok`,
    [oid, key],
  );
  return rows[0]!.ok;
}

/** The source table: exists, is a table, NOT NULL key with a unique index, NOT NULL time column. */
export async function checkSourceTable(
  conn: Conn,
  s: { table: string; key: string[]; time: string },
  path = { table: 'source.table', key: 'source.key', time: 'source.time' },
): Promise<{ problems: Problem[]; columns: Column[] }> {
  const problems: Problem[] = [];
  const source = await tableColumns(conn, s.table);
  if (!source) {
    problems.push({ path: path.table, message: `${s.table} does not exist in this database (v1 needs the source, target and registry in one database)` });
    return { problems, columns: [] };
  }
  if (!['r', 'p'].includes(source.kind)) {
    problems.push({ path: path.table, message: `${s.table} is not a table (capture needs triggers on a table)` });
  }
  const byName = new Map(source.columns.map((c) => [c.name, c]));
  s.key.forEach((k, i) => {
    const col = byName.get(k);
    if (!col) problems.push({ path: `${path.key}.${i}`, message: `${s.table} has no column ${k}` });
    else if (!col.not_null) problems.push({ path: `${path.key}.${i}`, message: `key column ${k} of ${s.table} is NULL-able: a key must be NOT NULL` });
  });
  const time = byName.get(s.time);
  if (!time) {
    problems.push({ path: path.time, message: `${s.table} has no column ${s.time}` });
  } else {
    if (!TIME_TYPES.includes(time.type)) {
      problems.push({ path: path.time, message: `${s.time} is ${time.type}; the time column must be timestamptz, timestamp or date` });
    }
    if (!time.not_null) {
      problems.push({
        path: path.time,
        message: `${s.time} of ${s.table} is NULL-able: a row without a time lands in no partition; make the column NOT NULL`,
      });
    }
  }
  if (s.key.every((k) => byName.has(k)) && !(await hasUniqueIndexOn(conn, source.oid, s.key))) {
    problems.push({ path: path.key, message: `${s.table} has no unique index on exactly (${s.key.join(', ')}): the business key must be unique` });
  }
  return { problems, columns: source.columns };
}

/**
 * The timezone as this server reads it: PostgreSQL looks a zone name up as an abbreviation
 * first (case-insensitively), and an abbreviation is a fixed offset where the grid applies
 * the zone's summer time. The release file check refuses such names already (any name
 * without a '/'); this asks the server's own table, whatever its timezone_abbreviations.
 */
export async function checkTimezoneReading(conn: Conn, timezone: string, path = 'timezone'): Promise<Problem[]> {
  const { rows } = await conn.query<{ abbrev: string; utc_offset: string; is_dst: boolean }>(
    `SELECT abbrev, utc_offset::text AS utc_offset, is_dst FROM pg_timezone_abbrevs
      WHERE upper(abbrev) = upper($1) AND upper($1) <> 'UTC' ORDER BY abbrev LIMIT 1`,
    [timezone],
  );
  const a = rows[0];
  if (!a) return [];
  const offset = a.utc_offset.startsWith('-') ? a.utc_offset : `+${a.utc_offset}`;
  return [ambiguousZoneProblem(timezone, path, `as the abbreviation ${a.abbrev}, a fixed UTC${offset}${a.is_dst ? ' (a summer offset)' : ''} all year`)];
}

/**
 * The declared dependencies that are not captured by trigger (as `genfill.captures` names
 * them, or as declared when absent): a change to one would reach no event, so no writer of a
 * generation could see it. Only the table's owner may capture it, which the planner is not.
 */
export async function uncapturedDependencies(conn: Pick<Conn, 'query'>, relations: readonly string[]): Promise<string[]> {
  if (relations.length === 0) return [];
  const { rows } = await conn.query<{ relation: string }>(
    `SELECT x.relation FROM unnest($1::text[]) WITH ORDINALITY AS x (relation, n)
      WHERE NOT EXISTS (SELECT 1 FROM genfill.captures c WHERE c.relid = to_regclass(x.relation) AND c.mode = 'trigger')
      ORDER BY x.n`,
    [relations],
  );
  return rows.map((r) => r.relation);
}

export async function checkAgainstDatabase(conn: Conn, loaded: LoadedRelease): Promise<Problem[]> {
  const { spec } = loaded;
  const zone = await checkTimezoneReading(conn, spec.timezone);
  const { problems, columns } = await checkSourceTable(conn, spec.source);
  problems.unshift(...zone);
  if (columns.length === 0) return problems;
  const byName = new Map(columns.map((c) => [c.name, c]));
  spec.reconcile.conserved.forEach((c, i) => {
    if (!byName.has(c)) problems.push({ path: `reconcile.conserved.${i}`, message: `conserved column ${c} is not a column of the source ${spec.source.table}` });
  });

  const probe = await probeTransform(conn, {
    sql: loaded.transformSql,
    sourceTable: spec.source.table,
    key: spec.source.key,
    time: spec.source.time,
    dependencies: spec.dependencies,
    target: { table: spec.target.table, ignoreColumns: [...SYSTEM_COLUMNS] },
  });
  problems.push(...probe.problems);
  if (probe.columns.length > 0) {
    const out = new Set(probe.columns.map((c) => c.name));
    for (const c of SYSTEM_COLUMNS) {
      if (out.has(c)) problems.push({ path: 'transform.sql', message: `the output column ${c} is reserved for genfill` });
    }
    spec.reconcile.conserved.forEach((c, i) => {
      if (!out.has(c)) problems.push({ path: `reconcile.conserved.${i}`, message: `conserved column ${c} is not in the transform's output` });
    });
    spec.reconcile.expectedDiff.forEach((c, i) => {
      if (!out.has(c)) problems.push({ path: `reconcile.expectedDiff.${i}`, message: `expectedDiff column ${c} is not in the transform's output` });
    });
  }
  return problems;
}
