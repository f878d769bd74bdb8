// The findings of a stored reconciliation (genfill.reconciliation_findings, migration 0007):
// inserted once, in the transaction that stores the verdict, and read back by the NDJSON
// export and by `genfill repair --reconciliation <id>`. One query per function.
import { InvalidInputError } from '@genfill/contracts';
import type { Conn, Db } from '@genfill/registry';
import type { FindingCheck, FindingKind, FindingRow, FindingsWriter } from './findings.ts';

/**
 * Rows per INSERT … SELECT FROM unnest(arrays). Measured on this 2-core machine (under load,
 * so noisy): 100,000 findings went in in 0.7–2.3 s at any chunk from 1,000 to 20,000 rows,
 * so past a thousand the round trips stop mattering; the chunk only bounds what one
 * statement holds in memory.
 */
const INSERT_CHUNK = 5_000;
/** Rows per read of the export (keyset pagination on the primary key). */
const READ_CHUNK = 10_000;

/** Every finding the writer holds, numbered from 1 in the order found. Returns how many. */
export async function insertFindings(conn: Conn, reconciliationId: string, writer: FindingsWriter): Promise<number> {
  let seq = 0;
  for await (const chunk of writer.chunks(INSERT_CHUNK)) {
    await conn.query(
      `INSERT INTO genfill.reconciliation_findings (reconciliation_id, seq, partition, kind, check_name, column_name, key, detail)
       SELECT $1, f.* FROM unnest($2::integer[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::jsonb[]) AS f`,
      [
        reconciliationId,
        chunk.map((_, i) => seq + i + 1),
        chunk.map((f) => f.partition),
        chunk.map((f) => f.kind),
        chunk.map((f) => f.check),
        chunk.map((f) => f.column),
        chunk.map((f) => f.keyJson),
        chunk.map((f) => f.detailJson),
      ],
    );
    seq += chunk.length;
  }
  return seq;
}

/**
 * The stored findings of one reconciliation in `seq` order, a chunk at a time (a damaged
 * candidate can have millions). The key is PostgreSQL's JSON text, as the NDJSON keeps it.
 */
export async function* storedFindings(db: Db, reconciliationId: string, chunk = READ_CHUNK): AsyncGenerator<FindingRow[]> {
  let after = 0;
  for (;;) {
    const { rows } = await db.query<{ seq: number; partition: string | null; kind: FindingKind; check_name: FindingCheck; column_name: string | null; key: string | null; detail: unknown }>(
      `SELECT seq, partition, kind, check_name, column_name, key::text AS key, detail
         FROM genfill.reconciliation_findings
        WHERE reconciliation_id = $1 AND seq > $2
        ORDER BY seq LIMIT $3`,
      [reconciliationId, after, chunk],
    );
    if (rows.length === 0) return;
    yield rows.map((r) => ({
      partition: r.partition,
      kind: r.kind,
      check: r.check_name,
      column: r.column_name,
      keyJson: r.key,
      detailJson: r.detail === null ? null : JSON.stringify(r.detail),
    }));
    if (rows.length < chunk) return;
    after = rows.at(-1)!.seq;
  }
}

/** `findings_count` of a reconciliation, or null when there is no such id. */
export async function findingsCountOf(db: Db, reconciliationId: string): Promise<number | null> {
  if (!/^\d{1,18}$/.test(reconciliationId)) return null;
  const { rows } = await db.query<{ n: string }>(`SELECT findings_count::text AS n FROM genfill.reconciliations WHERE id = $1::bigint`, [reconciliationId]);
  return rows[0] ? Number(rows[0].n) : null;
}

export interface ReconciliationPartitions {
  reconciliation: string;
  release: string;
  state: string;
  findings: number;
  /** Every partition its findings name, sorted (release-wide findings name none). */
  partitions: string[];
}

/**
 * The partitions named by the stored findings of reconciliation `id` of `release`, for
 * `genfill repair --reconciliation <id>`. An id that is not a reconciliation of that release
 * is bad input: nothing is written.
 */
export async function partitionsOfReconciliation(db: Db, release: string, id: string): Promise<ReconciliationPartitions> {
  const bad = (message: string) => new InvalidInputError([{ path: '--reconciliation', message }]);
  if (!/^[1-9]\d{0,17}$/.test(id)) throw bad(`expected a reconciliation id (a positive integer, as \`genfill reconcile\` prints it), got ${JSON.stringify(id)}`);
  const { rows } = await db.query<{ release: string; state: string; findings_count: string; findings_path: string | null; stored: string; partitions: string[] }>(
    `SELECT r.release, r.state, r.findings_count::text, r.findings_path,
            (SELECT count(*)::text FROM genfill.reconciliation_findings f WHERE f.reconciliation_id = r.id) AS stored,
            ARRAY(SELECT DISTINCT f.partition FROM genfill.reconciliation_findings f
                   WHERE f.reconciliation_id = r.id AND f.partition IS NOT NULL ORDER BY 1) AS partitions
       FROM genfill.reconciliations r WHERE r.id = $1::bigint`,
    [id],
  );
  const r = rows[0];
  if (!r) throw bad(`there is no reconciliation #${id}: \`genfill reconcile ${release}\` prints the id of each run`);
  if (r.release !== release) throw bad(`reconciliation #${id} is a reconciliation of ${r.release}, not of ${release}`);
  if (r.stored !== r.findings_count) {
    // Reconciliations stored before 0007 kept their findings in a file on the machine that ran them.
    throw bad(`reconciliation #${id} has no stored findings (it predates them${r.findings_path ? `; its file was ${r.findings_path}` : ''}): use --findings <file>`);
  }
  return { reconciliation: id, release: r.release, state: r.state, findings: Number(r.findings_count), partitions: r.partitions };
}
