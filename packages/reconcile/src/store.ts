// The verdict: one transaction stores the reconciliation under an id with its per-partition
// hashes and every finding (genfill.reconciliation_findings), and moves the release (BUILT →
// RECONCILED | RECONCILIATION_REQUIRED, RECONCILED → RECONCILIATION_REQUIRED; a passing
// RECONCILED release stays where it is). A stored reconciliation therefore always has all
// its findings, and a run that fails stores none. It is fenced twice: the release row is
// locked and must be exactly as the snapshot saw it (no transition and no receipt since),
// and the state change itself is the registry's compare-and-swap.
import { RefusedError, type ReleaseState } from '@genfill/contracts';
import { casTransition, logAction, RELEASE_ACTIONS, withTransaction, type Conn, type Db } from '@genfill/registry';
import type { PartitionCheck } from './compare.ts';
import type { FindingsWriter } from './findings.ts';
import { insertFindings } from './stored.ts';
import type { Subject } from './subject.ts';

export type Verdict = 'RECONCILED' | 'RECONCILIATION_REQUIRED';

export interface StoreInput {
  subject: Subject;
  snapshot: string;
  verdict: Verdict;
  summary: unknown;
  checks: PartitionCheck[];
  writer: FindingsWriter;
}

export interface Stored {
  id: string;
  transition: boolean;
}

/** The release row as the snapshot saw it, under the row lock; anything else refuses. */
async function lockUnchanged(conn: Conn, s: Subject): Promise<void> {
  const { rows } = await conn.query<{ state: ReleaseState; unchanged: boolean; last_receipt: string }>(
    `SELECT state, state_changed_at = $2::timestamptz AS unchanged,
            (SELECT coalesce(max(id), 0)::text FROM genfill.receipts WHERE release = $1) AS last_receipt
       FROM genfill.releases WHERE id = $1 FOR UPDATE`,
    [s.release, s.stateChangedAt],
  );
  const r = rows[0];
  if (!r || r.state !== s.state || !r.unchanged || r.last_receipt !== s.lastReceiptId) {
    throw new RefusedError(
      `release ${s.release} changed while it was being reconciled (it is ${r?.state ?? 'gone'} now, was ${s.state}` +
        `${r && r.last_receipt !== s.lastReceiptId ? ', with new receipts' : ''}): nothing was recorded; run genfill reconcile ${s.release} again`,
    );
  }
}

async function nextId(conn: Conn): Promise<string> {
  const { rows } = await conn.query<{ id: string }>(`SELECT nextval(pg_get_serial_sequence('genfill.reconciliations', 'id'))::text AS id`);
  return rows[0]!.id;
}

// findings_path stays NULL: the findings are rows of genfill.reconciliation_findings (0007).
async function insertReconciliation(conn: Conn, id: string, i: StoreInput): Promise<void> {
  await conn.query(
    `INSERT INTO genfill.reconciliations (id, release, snapshot, from_state, release_digest, state, summary, findings_count)
     VALUES ($1, $2, $3::pg_snapshot, $4, $5, $6, $7, $8)`,
    [id, i.subject.release, i.snapshot, i.subject.state, i.subject.digest, i.verdict, JSON.stringify(i.summary), i.writer.count],
  );
}

async function insertPartitionHashes(conn: Conn, id: string, i: StoreInput): Promise<void> {
  const c = i.checks;
  await conn.query(
    `INSERT INTO genfill.reconciliation_partitions (reconciliation_id, release, partition, receipt_id, source_rows,
       stored_rows, stored_key_root, stored_row_root, dual_rows, dual_key_root, dual_row_root, tombstones, findings)
     SELECT $1, $2, p.* FROM unnest($3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::numeric[], $8::numeric[],
                                    $9::bigint[], $10::numeric[], $11::numeric[], $12::bigint[], $13::bigint[]) AS p`,
    [
      id,
      i.subject.release,
      c.map((x) => x.partition.id),
      c.map((x) => x.receipt?.id ?? null),
      c.map((x) => x.sourceRows.toString()),
      c.map((x) => x.stored.digest.rows.count.toString()),
      c.map((x) => x.stored.digest.keys.sum.toString()),
      c.map((x) => x.stored.digest.rows.sum.toString()),
      c.map((x) => x.dual.digest.rows.count.toString()),
      c.map((x) => x.dual.digest.keys.sum.toString()),
      c.map((x) => x.dual.digest.rows.sum.toString()),
      c.map((x) => x.stored.tombstones.toString()),
      c.map((x) => String(i.writer.byPartition.get(x.partition.id) ?? 0)),
    ],
  );
}

export async function storeReconciliation(db: Db, i: StoreInput): Promise<Stored> {
  return withTransaction(db, async (conn) => {
    await lockUnchanged(conn, i.subject);
    // The id is taken under the row lock, so ids follow the order verdicts commit in and
    // "the latest reconciliation" of a release is simply the highest id.
    const id = await nextId(conn);
    await insertReconciliation(conn, id, i);
    await insertPartitionHashes(conn, id, i);
    const stored = await insertFindings(conn, id, i.writer);
    if (stored !== i.writer.count) throw new Error(`reconciliation ${id}: ${i.writer.count} findings counted, ${stored} read back from the spool`);
    const from = i.subject.state;
    const transition = from !== i.verdict;
    const detail = { reconciliation: id, findings: i.writer.count, byKind: i.writer.byKind };
    if (transition) {
      await casTransition(conn, { release: i.subject.release, from, to: i.verdict, action: RELEASE_ACTIONS.reconcile, detail });
    } else {
      await logAction(conn, { release: i.subject.release, action: RELEASE_ACTIONS.reconcile, detail: { ...detail, state: i.verdict } });
    }
    return { id, transition };
  });
}
