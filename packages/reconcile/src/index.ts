export { approveRelease, type ApproveResult, latestReconciliation } from './approve.ts';
export { driftCheck, type DriftCheckOptions, type DriftReason, type DriftResult, DRIFT_KEY_SAMPLE } from './drift.ts';
export { DEFAULT_DRIFT_CHECK_EVERY_MS, driftMetrics, type DriftRoundResult, DriftSchedule } from './drift-schedule.ts';
export { defaultFindingsDir, defaultFindingsPath, exportFindings, FindingsExportError } from './export.ts';
export { describeFinding, type Finding, type FindingRow, findingLine } from './findings.ts';
export { reconcile, type ReconcileResult } from './reconcile.ts';
export {
  type ReconcilerRunResult,
  type RoundResult as ReconcilerRoundResult,
  runReconcilerService,
  startReconcilerService,
} from './service.ts';
export { partitionsOfReconciliation, type ReconciliationPartitions, storedFindings } from './stored.ts';
export { type TailCheck, type TailMismatch, verifyTail } from './tail.ts';
export { type IncrementalResult, reconcileIncremental } from './incremental.ts';
