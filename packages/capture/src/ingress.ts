// The ingress mirror (SPEC "Ingress"): a table holding a source that lives outside the
// database, written only by genfill. `genfill capture install <table> --ingress` calls
// installIngressMirror: the table is handed to genfill_owner, every other write privilege is
// revoked, and genfill.captures records it with mode 'ingress' — no capture trigger, because
// `genfill ingest` writes the change log itself, and only the events that win.
//
// Handing the table over is an ALTER TABLE … OWNER, which PostgreSQL allows only to the
// table's owner who is also a member of genfill_owner (or a superuser): the one who installs
// a mirror is whoever may give genfill the table. The rest runs in genfill.ingress_install
// (migration 0011), in the same transaction.
import { errorFromPg, NotFoundError, quoteIdent, RefusedError, SQLSTATE } from '@genfill/contracts';
import { withTransaction, type Conn, type Db } from '@genfill/registry';
import type { MirrorShape } from './ingress-events.ts';

export interface IngressMirrorInstall {
  table: string;
  key: string[];
  status: 'installed' | 'unchanged';
}

/** Make `table` an ingress mirror only genfill writes. Idempotent ('unchanged'). */
export async function installIngressMirror(db: Db, table: string): Promise<IngressMirrorInstall> {
  return withTransaction(db, async (conn) => {
    const { rows } = await conn.query<{ oid: string; schema: string; name: string; owner: string }>(
      `SELECT c.oid::text AS oid, n.nspname AS schema, c.relname AS name, pg_get_userbyid(c.relowner) AS owner
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`,
      [table],
    );
    const rel = rows[0];
    if (!rel) throw new NotFoundError(`table ${table} does not exist: create the mirror table (the source's columns and key) first`);
    if (rel.owner !== 'genfill_owner') {
      try {
        await conn.query(`ALTER TABLE ${quoteIdent(rel.schema)}.${quoteIdent(rel.name)} OWNER TO genfill_owner`);
      } catch (err) {
        throw errorFromPg(err, {
          messages: {
            [SQLSTATE.insufficientPrivilege]: (e) =>
              `cannot hand ${table} to genfill_owner (${e.message}): a mirror is installed by the table's owner ` +
              `as a member of genfill_owner (GRANT genfill_owner TO <you>), with genfill_owner allowed CREATE on schema ${rel.schema}, or by a superuser`,
          },
        });
      }
    }
    try {
      const r = await conn.query<{ source_table: string; key_columns: string[]; status: 'installed' | 'unchanged' }>(
        'SELECT * FROM genfill.ingress_install($1::oid::regclass, $2)',
        [rel.oid, rel.owner === 'genfill_owner' ? null : rel.owner],
      );
      const row = r.rows[0]!;
      return { table: row.source_table, key: row.key_columns, status: row.status };
    } catch (err) {
      throw errorFromPg(err);
    }
  });
}

export interface IngressMirror extends MirrorShape {
  dataset: string;
  /** The mirror as genfill.captures records it (regclass text, schema-qualified). */
  sourceTable: string;
}

/**
 * The ingress mirror behind `dataset`: NotFoundError for an unknown dataset, RefusedError
 * naming `genfill capture install <table> --ingress` when its source is not a mirror.
 */
export async function ingressMirrorOf(conn: Conn | Db, dataset: string): Promise<IngressMirror> {
  const { rows } = await conn.query<{ source: string; mirror: string | null; mode: string | null; key: string[] | null; columns: string[] | null }>(
    `SELECT d.source_table AS source, c.source_table AS mirror, c.mode, c.key_columns AS key,
            ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.relid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum) AS columns
       FROM genfill.datasets d LEFT JOIN genfill.captures c ON c.relid = to_regclass(d.source_table)
      WHERE d.name = $1`,
    [dataset],
  );
  const r = rows[0];
  if (!r) throw new NotFoundError(`dataset ${dataset} does not exist: a dataset is registered by its first \`genfill release submit\``);
  if (r.mode !== 'ingress' || !r.mirror || !r.key || !r.columns) {
    throw new RefusedError(
      `the source of dataset ${dataset}, ${r.source}, is not an ingress mirror` +
        (r.mode === 'trigger' ? ' (it is captured by triggers; `genfill capture remove` it first)' : '') +
        `: run \`genfill capture install ${r.source} --ingress\` first`,
    );
  }
  return { dataset, sourceTable: r.mirror, key: r.key, columns: r.columns };
}
