// Operator verbs: pause, resume, cancel — each one function in the database (migration 0006),
// the only way a person changes a release. The registry is what workers obey (a claim checks the
// pause flags and the state in its own transaction); the BullMQ queue only mirrors it, so the
// Redis half of each verb (mirrorPause, removeReleaseQueue in @genfill/queue) is best effort and
// re-applied by the planner.
import type { ReleaseState } from '@genfill/contracts';
import { asPrincipal, cancelReleaseVerb, operatorPauseVerb, type Db } from '@genfill/registry';

/**
 * Who acts through a front end other than the CLI: the API passes its token's subject, which
 * is recorded as the principal instead of the database login the API connects as, and `via`
 * goes into the log detail. The CLI passes none: its principal is session_user.
 */
export interface Actor {
  principal: string;
  via: string;
}

export interface PauseResult {
  release: string;
  state: ReleaseState;
  paused: boolean;
  /** False when the flag already had that value: nothing was written. */
  changed: boolean;
}

/**
 * Set the operator flag through genfill.set_operator_pause: of two operators racing, one
 * records the change and the other learns it was a no-op. The actor, when given, is recorded
 * as the principal (the database honours it only for the API's and the fleet's logins).
 */
export async function setOperatorPause(db: Db, id: string, paused: boolean, reason: string | null = null, actor?: Actor): Promise<PauseResult> {
  return asPrincipal(db, actor?.principal, async (conn) => {
    const r = await operatorPauseVerb(conn, { release: id, paused, reason, detail: actor ? { via: actor.via } : undefined });
    return { release: id, state: r.state, paused, changed: r.changed };
  });
}

export interface CancelResult {
  release: string;
  from: ReleaseState;
  state: 'CANCELLED';
}

/** Any open state → CANCELLED through genfill.cancel_release; CANCELLED again or a closed state is refused. */
export async function cancelRelease(db: Db, id: string, reason: string | null = null, actor?: Actor): Promise<CancelResult> {
  return asPrincipal(db, actor?.principal, async (conn) => {
    const from = await cancelReleaseVerb(conn, { release: id, reason, detail: actor ? { via: actor.via } : undefined });
    return { release: id, from, state: 'CANCELLED' as const };
  });
}
