// The fleet's one writer of release state and of the throttle's pause flag. A state move is a
// compare-and-swap (`WHERE state = $from`) against the transition table in @genfill/contracts
// (which the database holds too, and enforces with a trigger for every writer), with its log
// row in the same transaction; a flag change is a CAS on the flag's old value, logged the
// same way. Zero rows is a lost race, reported — never treated as success. A person's moves
// (submit, pause, resume, cancel, approve) are verb functions in the database: verbs.ts.
import { CasConflictError, canTransition, errorFromPg, OPEN_STATES, type ReleaseState } from '@genfill/contracts';
import type { Conn } from './db.ts';
import { logAction, RELEASE_ACTIONS, type ReleaseAction } from './log.ts';

export interface Transition {
  release: string;
  from: ReleaseState;
  to: ReleaseState;
  action: ReleaseAction;
  reason?: string | null;
  detail?: unknown;
}

async function applyTransition(conn: Conn, t: Transition): Promise<boolean> {
  if (!canTransition(t.from, t.to)) {
    throw new Error(`${t.from} → ${t.to} is not in the transition table`);
  }
  const res = await conn.query(
    `UPDATE genfill.releases SET state = $3, state_changed_at = now() WHERE id = $1 AND state = $2`,
    [t.release, t.from, t.to],
  );
  if (res.rowCount !== 1) return false;
  await logAction(conn, { release: t.release, action: t.action, from: t.from, to: t.to, reason: t.reason ?? null, detail: t.detail });
  return true;
}

async function currentState(conn: Conn, release: string): Promise<string | null> {
  const { rows } = await conn.query<{ state: string }>('SELECT state FROM genfill.releases WHERE id = $1', [release]);
  return rows[0]?.state ?? null;
}

/**
 * The one compare-and-swap for release states. Zero rows is a lost race, reported as
 * CasConflictError naming the current state.
 */
export async function casTransition(conn: Conn, t: Transition): Promise<void> {
  if (!(await applyTransition(conn, t))) {
    throw new CasConflictError(t.release, t.from, await currentState(conn, t.release), t.to);
  }
}

export interface PartitionCommit {
  release: string;
  partition: string;
  attempt: number;
  kind: 'build' | 'repair';
  releaseDigest: string;
  transformDigest: string;
  watermark: string;
  dependencyHashes: unknown;
  rowsIn: string;
  rowsOut: string;
  conserved: unknown;
  keyRoot: string;
  rowRoot: string;
  timings: unknown;
  supersedes: string | null;
}

/**
 * The end of a partition's build transaction, in one statement (genfill.commit_partition,
 * migration 0008): under the release row lock, fence the partition on its attempt, insert the
 * receipt, and move BUILDING → BUILT when it completes the manifest. A release no longer
 * BUILDING is RefusedError; a stale attempt is StaleLeaseError — both leave the transaction
 * to roll back, rows included.
 */
export async function commitPartition(conn: Conn, c: PartitionCommit): Promise<{ receiptId: string; releaseBuilt: boolean }> {
  try {
    const { rows } = await conn.query<{ receipt_id: string; release_built: boolean }>(
      `SELECT receipt_id::text, release_built FROM genfill.commit_partition($1, $2, $3, $4, $5, $6, $7::pg_snapshot, $8, $9, $10, $11, $12, $13, $14, $15)`,
      [
        c.release, c.partition, c.attempt, c.kind, c.releaseDigest, c.transformDigest, c.watermark, JSON.stringify(c.dependencyHashes),
        c.rowsIn, c.rowsOut, JSON.stringify(c.conserved), c.keyRoot, c.rowRoot, JSON.stringify(c.timings), c.supersedes,
      ],
    );
    return { receiptId: rows[0]!.receipt_id, releaseBuilt: rows[0]!.release_built };
  } catch (err) {
    throw errorFromPg(err, { release: c.release, partition: c.partition, attempt: c.attempt });
  }
}

export interface ThrottlePauseChange {
  release: string;
  paused: boolean;
  reason: string;
  detail: unknown;
}

/**
 * The throttle controller's pause flag of an open release, fenced on its old value: of two
 * writers racing, one records the change and the other learns it was a no-op. True when this
 * call changed it. The operator's flag is a person's verb (genfill.set_operator_pause).
 */
export async function setThrottlePause(conn: Conn, c: ThrottlePauseChange): Promise<boolean> {
  const res = await conn.query(
    `UPDATE genfill.releases SET throttle_paused = $2 WHERE id = $1 AND throttle_paused = $3 AND state = ANY($4::text[])`,
    [c.release, c.paused, !c.paused, OPEN_STATES],
  );
  if (res.rowCount !== 1) return false;
  const action = c.paused ? RELEASE_ACTIONS.throttlePause : RELEASE_ACTIONS.throttleResume;
  await logAction(conn, { release: c.release, action, reason: c.reason, detail: c.detail });
  return true;
}
