export { type CleanupResult, cleanupRound } from './cleanup.ts';
export {
  computeHorizon,
  type Horizon,
  type HorizonBlocker,
  HorizonHistory,
  type HorizonPart,
  type HorizonTransaction,
  StandbyError,
} from './horizon.ts';
export { housekeepingMetrics, type HousekeepingOptions, housekeepingRound, type HousekeepingResult } from './housekeeping.ts';
export { OwnerConnectionError, withOwnerConnection } from './owner.ts';
export { type LogPartition, logPartitions, type PruneOptions, prunablePartitions, pruneLog, type PruneResult } from './prune.ts';
export { type RetainedGeneration, type RetentionOptions, retentionRound, type RetentionRoundResult, retentionStatus } from './retention.ts';
