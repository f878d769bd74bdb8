export { reconcile, type ReconcileOptions, type ReconcileResult } from './reconcile.ts';
export { approveRelease, type ApproveResult } from './approve.ts';
export { startReconcilerService, type ReconcilerService, type ReconcilerServiceOptions, type RoundResult } from './service.ts';
export { describeFinding, KEY_KINDS, PARTITION_KINDS, type Finding, type FindingCheck, type FindingKind } from './findings.ts';
export { addRoots, rootOfHashes, sameRoot, subtractRoot, type Root } from './roots.ts';
export type { ReconcileSummary, RowsRead } from './summary.ts';
