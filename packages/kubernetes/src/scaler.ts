// What KEDA's PostgreSQL scaler asks the registry: how many partitions still need a worker.
//
// A partition needs one while it is PENDING (claimable now) or RUNNING (in flight; claimable
// again once its lease lapses) in a release that is BUILDING and not operator-paused. So the
// count drops to zero when the operator pauses (the claim refuses anyway; the workers drain
// and go), when the release is BUILT (every partition has its receipt), cancelled or failed
// over to RECONCILIATION_REQUIRED. It never reads throttle_paused: the controller that sets
// and clears that flag runs inside the workers — scaled to zero, nothing would ever clear it.
// FAILED partitions are not counted: they wait for the operator's `genfill plan`, which
// puts them back to PENDING.
//
// KEDA sends the query as text with no parameters, so the release id is a quoted literal
// (ids are letters, digits and . _ @ + -; quoting is still done properly).
import { quoteLiteral } from './literal.ts';

const BASE = `SELECT count(*)
  FROM genfill.partitions p
  JOIN genfill.releases r ON r.id = p.release
 WHERE r.state = 'BUILDING'
   AND NOT r.operator_paused
   AND p.status IN ('PENDING', 'RUNNING')`;

/** The scaler's query: every open release's partitions (the generic worker), or one release's. */
export function claimablePartitionsQuery(release?: string): string {
  return release === undefined ? BASE : `${BASE}\n   AND r.id = ${quoteLiteral(release)}`;
}
