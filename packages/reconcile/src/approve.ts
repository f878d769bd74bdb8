// `genfill approve <release>` as the connected principal. The rules live in the SECURITY
// DEFINER function genfill.approve (migration 0004), because an approver may not update a
// release's state directly: it locks the release, refuses the submitter and any state but
// RECONCILED, binds the approval to the latest reconciliation id, counts the distinct
// principals who approved that id and, at the release's required count, moves RECONCILED →
// APPROVED in the same transaction. Approving twice is a no-op.
import { canTransition, NotFoundError, RefusedError } from '@genfill/contracts';
import type { Db } from '@genfill/registry';

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

export async function approveRelease(db: Db, release: string): Promise<ApproveResult> {
  try {
    const { rows } = await db.query<{ outcome: ApproveResult['outcome']; reconciliation_id: string; approvals: number; required: number; state: string; principal: string }>(
      'SELECT a.*, session_user::text AS principal FROM genfill.approve($1) AS a',
      [release],
    );
    const r = rows[0]!;
    return {
      release,
      outcome: r.outcome,
      principal: r.principal,
      reconciliationId: String(r.reconciliation_id),
      approvals: r.approvals,
      required: r.required,
      state: r.state,
    };
  } catch (err) {
    const code = (err as { code?: string }).code;
    const message = (err as Error).message;
    if (code === 'GFN01') throw new NotFoundError(message, { cause: err });
    if (code === 'GFR01') throw new RefusedError(message, { cause: err });
    if (code === '42501') {
      throw new RefusedError(`your login may not approve releases (${message}): an approver needs the genfill_approver role`, { cause: err });
    }
    throw err;
  }
}
