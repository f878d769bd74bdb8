export { type CleanupResult, cleanupRound, releasesDueForCleanup } from './cleanup.ts';
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
export { type RetainedGeneration, RETENTION_DEFAULTS, type RetentionOptions, retentionRound, type RetentionRoundResult, retentionStatus } from './retention.ts';
