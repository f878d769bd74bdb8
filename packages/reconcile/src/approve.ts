// `genfill approve <release> --reconciliation <id>` as the connected principal. The rules live
// in the SECURITY DEFINER function genfill.approve (migration 0006), because an approver may
// not update a release's state directly: it locks the release, refuses the submitter and any
// state but RECONCILED, binds the approval to the reconciliation id the approver reviewed (it
// must be the latest, and it must have passed), counts the distinct principals who approved
// that id and, at the release's required count, moves RECONCILED → APPROVED in the same
// transaction. Approving twice is a no-op.
import { canTransition } from '@genfill/contracts';
import { approveVerb, asPrincipal, type Db } from '@genfill/registry';

export interface ApproveResult {
  release: string;
  /** approved: this approval completed the count; recorded: counted, more are needed. */
  outcome: 'approved' | 'recorded' | 'already-approved';
  principal: string;
  reconciliationId: string;
  approvals: number;
  required: number;
  state: string;
}

// The function's fenced UPDATE is this one transition; keep the table and it in step.
if (!canTransition('RECONCILED', 'APPROVED')) throw new Error('RECONCILED → APPROVED left the transition table: update genfill.approve');

/** The release's latest reconciliation: what an approver reviews before approving it by id. */
export async function latestReconciliation(db: Db, release: string): Promise<{ id: string; state: string; findings: number; at: Date } | null> {
  const { rows } = await db.query<{ id: string; state: string; findings: number; at: Date }>(
    // Ordered by the id as a number (the text of id 9 sorts after 10).
    `SELECT c.id::text AS id, state, findings_count::int AS findings, at FROM genfill.reconciliations c WHERE release = $1 ORDER BY c.id DESC LIMIT 1`,
    [release],
  );
  return rows[0] ?? null;
}

/**
 * Approve `reconciliationId` of `release` as the connected principal (or `actor`, for the
 * API's token subject). The function refuses an id that is not the latest reconciliation,
 * a latest that did not pass, a release that is not RECONCILED, and the submitter.
 */
export async function approveRelease(db: Db, release: string, reconciliationId: string | null, actor?: { principal: string }): Promise<ApproveResult> {
  const r = await asPrincipal(db, actor?.principal, (conn) => approveVerb(conn, { release, reconciliationId }));
  return {
    release,
    outcome: r.outcome,
    principal: r.principal,
    reconciliationId: String(r.reconciliation_id),
    approvals: r.approvals,
    required: r.required,
    state: r.state,
  };
}
