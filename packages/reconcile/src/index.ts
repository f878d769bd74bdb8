export { approveRelease, type ApproveResult, latestReconciliation } from './approve.ts';
export { type CleanupResult, cleanupRound, releasesDueForCleanup, removeReleaseDispatch } from './cleanup.ts';
export { driftCheck, type DriftResult } from './drift.ts';
export { defaultFindingsPath, exportFindings, FindingsExportError } from './export.ts';
export { describeFinding, type Finding, type FindingRow, findingLine } from './findings.ts';
export {
  computeHorizon,
  type Horizon,
  type HorizonBlocker,
  HorizonHistory,
  type HorizonPart,
  type HorizonTransaction,
  StandbyError,
  usableHorizon,
} from './horizon.ts';
export { housekeepingMetrics, type HousekeepingOptions, housekeepingRound, type HousekeepingResult } from './housekeeping.ts';
export { OwnerConnectionError, withOwnerConnection } from './owner.ts';
export { type LogPartition, logPartitions, PRUNE_DEFAULTS, type PruneOptions, prunablePartitions, pruneLog, type PruneResult } from './prune.ts';
export { reconcile, type ReconcileResult } from './reconcile.ts';
export { type RetainedGeneration, RETENTION_DEFAULTS, type RetentionOptions, retentionRound, type RetentionRoundResult, retentionStatus } from './retention.ts';
export {
  type ReconcilerRunResult,
  type RoundResult as ReconcilerRoundResult,
  runReconcilerService,
  startReconcilerService,
} from './service.ts';
export { partitionsOfReconciliation, type ReconciliationPartitions, storedFindings } from './stored.ts';
export { type TailCheck, type TailMismatch, verifyTail } from './tail.ts';
export { type IncrementalResult, reconcileIncremental } from './incremental.ts';
