// The release state machine: one table of allowed transitions. Every move is a
// compare-and-swap in the registry (casTransition) checked against this table.
//
// Two orders are supported (SPEC "State machine"):
//  seed order:   … BUILDING → INGRESS_SEALED → CAUGHT_UP → RECONCILED → APPROVED → ACTIVE
//  short freeze: … BUILDING → BUILT → RECONCILED → APPROVED, then `cutover` runs
//                APPROVED → INGRESS_SEALED → CAUGHT_UP → ACTIVE
// Pausing is not a state: it is two flags on the release.

export const RELEASE_STATES = [
  'DRAFT',
  'SNAPSHOT_PINNED',
  'BUILDING',
  'BUILT',
  'INGRESS_SEALED',
  'CAUGHT_UP',
  'RECONCILED',
  'APPROVED',
  'ACTIVE',
  'SUPERSEDED',
  'RETIRED',
  'RECONCILIATION_REQUIRED',
  'ROLLED_BACK',
  'CANCELLED',
] as const;

export type ReleaseState = (typeof RELEASE_STATES)[number];

export const TRANSITIONS: Readonly<Record<ReleaseState, readonly ReleaseState[]>> = {
  // → RECONCILIATION_REQUIRED from every open state: a column change of the captured source
  // (the DDL event trigger of migration 0010) blocks the release, DRAFT included.
  DRAFT: ['SNAPSHOT_PINNED', 'RECONCILIATION_REQUIRED', 'CANCELLED'],
  SNAPSHOT_PINNED: ['BUILDING', 'RECONCILIATION_REQUIRED', 'CANCELLED'],
  BUILDING: ['BUILT', 'INGRESS_SEALED', 'RECONCILIATION_REQUIRED', 'CANCELLED'],
  BUILT: ['RECONCILED', 'INGRESS_SEALED', 'RECONCILIATION_REQUIRED', 'CANCELLED'],
  // A sealed epoch either catches up or fails back to APPROVED with ingress reopened; unseal
  // returns a release to the state it was sealed from (BUILT in the seed's order, migration 0013).
  INGRESS_SEALED: ['CAUGHT_UP', 'APPROVED', 'BUILT', 'RECONCILIATION_REQUIRED', 'CANCELLED'],
  CAUGHT_UP: ['RECONCILED', 'ACTIVE', 'APPROVED', 'BUILT', 'RECONCILIATION_REQUIRED', 'CANCELLED'],
  RECONCILED: ['APPROVED', 'RECONCILIATION_REQUIRED', 'CANCELLED'],
  APPROVED: ['INGRESS_SEALED', 'ACTIVE', 'RECONCILIATION_REQUIRED', 'CANCELLED'],
  // A cutover moves the release that was active aside (its generation RETAINED for rollback,
  // migration 0015); a rollback of the release that superseded it makes it ACTIVE again.
  ACTIVE: ['SUPERSEDED', 'RETIRED', 'ROLLED_BACK'],
  SUPERSEDED: ['ACTIVE', 'RETIRED'],
  RETIRED: [],
  // Leaves by repair (back to BUILDING) and a passing reconcile, or by cancel.
  RECONCILIATION_REQUIRED: ['BUILDING', 'RECONCILED', 'CANCELLED'],
  ROLLED_BACK: ['RETIRED'],
  CANCELLED: [],
};

/** States in which a release still holds its range and may take work. */
export const OPEN_STATES: readonly ReleaseState[] = RELEASE_STATES.filter(
  (s) => !['ACTIVE', 'SUPERSEDED', 'RETIRED', 'ROLLED_BACK', 'CANCELLED'].includes(s),
);

export function canTransition(from: ReleaseState, to: ReleaseState): boolean {
  return TRANSITIONS[from].includes(to);
}

