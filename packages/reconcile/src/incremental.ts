// `genfill reconcile <release> --incremental` (issue 16, invariant 10): re-check only what
// changed since the parent — the release's latest reconciliation, which must have passed — and
// record the parent. While a release is RECONCILED or APPROVED nothing rebuilds a partition (a
// repair needs RECONCILIATION_REQUIRED first), so what changes is what catch-up applied: exactly
// the keys with events after the parent's catch-up frontier. Each is checked against the
// transform of its latest logged image (tail.ts, the reconciler's own queries), at the
// candidate's current catch-up frontier, in one snapshot. Passing keeps the state (approvals
// stay valid along the chain: genfill.approval_chain); failing stores every mismatched key as a
// finding and moves the release to RECONCILIATION_REQUIRED, voiding the approvals.
import { performance } from 'node:perf_hooks';
import { RefusedError, type ReleaseState } from '@genfill/contracts';
import { casTransition, logAction, RELEASE_ACTIONS, withTransaction, type Db } from '@genfill/registry';
import { verifyTail } from './tail.ts';

export interface IncrementalResult {
  id: string;
  release: string;
  kind: 'incremental';
  parent: string;
  from: ReleaseState;
  state: 'RECONCILED' | 'RECONCILIATION_REQUIRED';
  transition: boolean;
  snapshot: string;
  /** The parent's catch-up frontier, and the one this run verified at. */
  since: string;
  to: string;
  keys: number;
  quarantined: number;
  findings: { count: number; first: { key: Record<string, unknown>; kind: string }[] };
  ms: number;
}

/** How many mismatched keys are stored as findings (the count is always exact). */
const MAX_FINDINGS = 100_000;

export async function reconcileIncremental(db: Db, release: string): Promise<IncrementalResult> {
  const started = performance.now();
  const { rows: head } = await db.query<{ state: ReleaseState; parent: string | null; parent_state: string | null; cf: string | null }>(
    `SELECT r.state, c.id::text AS parent, c.state AS parent_state,
            coalesce(c.summary->'live'->>'catchupFrontier', c.summary->'incremental'->>'to') AS cf
       FROM genfill.releases r
       LEFT JOIN LATERAL (SELECT * FROM genfill.reconciliations c WHERE c.release = r.id ORDER BY c.id DESC LIMIT 1) c ON true
      WHERE r.id = $1`,
    [release],
  );
  const h = head[0];
  if (!h) throw new RefusedError(`release ${release} does not exist`);
  if (h.state !== 'RECONCILED' && h.state !== 'APPROVED') {
    throw new RefusedError(`release ${release} is ${h.state}: an incremental reconciliation re-checks a RECONCILED or APPROVED release (run a full one: genfill reconcile ${release})`);
  }
  if (!h.parent || h.parent_state !== 'RECONCILED') throw new RefusedError(`release ${release} has no passing reconciliation to be incremental on: run a full one`);
  if (!h.cf) throw new RefusedError(`reconciliation #${h.parent} of ${release} recorded no catch-up frontier (not a live release, or from an older version): run a full one`);

  const check = await verifyTail(db, release, h.cf, { limit: MAX_FINDINGS });
  const state = check.mismatchCount === 0 ? 'RECONCILED' : 'RECONCILIATION_REQUIRED';
  const ms = Math.round((performance.now() - started) * 10) / 10;
  const summary = {
    incremental: { parent: h.parent, from: h.cf, to: check.to, keys: check.keys, quarantined: check.quarantined, mismatches: check.mismatchCount, ms },
    // As a full reconciliation records it: the catch-up frontier the candidate was verified at
    // (the next incremental run, and the cutover's tail check, start from it).
    live: { catchupFrontier: check.to, pendingKeys: 0, rounds: null, receiptsSuperseded: [] },
  };
  const stored = await withTransaction(db, async (conn) => {
    // Under the release row lock: the state and the latest reconciliation are still the ones read.
    const { rows } = await conn.query<{ state: ReleaseState; digest: string; latest: string }>(
      `SELECT r.state, r.digest, (SELECT max(c.id)::text FROM genfill.reconciliations c WHERE c.release = r.id) AS latest
         FROM genfill.releases r WHERE r.id = $1 FOR UPDATE`,
      [release],
    );
    const now = rows[0]!;
    if (now.state !== h.state || now.latest !== h.parent) {
      throw new RefusedError(`release ${release} changed while it was checked (now ${now.state}, latest reconciliation #${now.latest}): run it again`);
    }
    const { rows: ins } = await conn.query<{ id: string }>(
      `INSERT INTO genfill.reconciliations (release, snapshot, from_state, release_digest, state, summary, findings_count, kind, parent)
       VALUES ($1, $2::pg_snapshot, $3, $4, $5, $6, $7, 'incremental', $8) RETURNING id::text`,
      [release, check.snapshot, h.state, now.digest, state, JSON.stringify(summary), check.mismatchCount, h.parent],
    );
    const id = ins[0]!.id;
    if (check.mismatches.length > 0) {
      await conn.query(
        `INSERT INTO genfill.reconciliation_findings (reconciliation_id, seq, partition, kind, check_name, key, detail)
         SELECT $1, f.ord, NULL, f.m->>'kind', 'dual_compute', f.m->'key', jsonb_build_object('incremental', true, 'parent', $2::bigint)
           FROM jsonb_array_elements($3::jsonb) WITH ORDINALITY AS f (m, ord)`,
        [id, h.parent, JSON.stringify(check.mismatches)],
      );
    }
    const detail = { reconciliation: id, incremental: true, parent: h.parent, keys: check.keys, findings: check.mismatchCount };
    if (state !== h.state && state === 'RECONCILIATION_REQUIRED') {
      await casTransition(conn, { release, from: h.state, to: state, action: RELEASE_ACTIONS.reconcile, detail });
    } else {
      await logAction(conn, { release, action: RELEASE_ACTIONS.reconcile, detail: { ...detail, state } });
    }
    return { id, transition: state !== h.state };
  });
  return {
    id: stored.id,
    release,
    kind: 'incremental',
    parent: h.parent,
    from: h.state,
    state,
    transition: stored.transition && state === 'RECONCILIATION_REQUIRED',
    snapshot: check.snapshot,
    since: h.cf,
    to: check.to,
    keys: check.keys,
    quarantined: check.quarantined,
    findings: { count: check.mismatchCount, first: check.mismatches.slice(0, 20) },
    ms,
  };
}
