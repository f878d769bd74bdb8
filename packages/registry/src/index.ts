export { relationColumns, type RelationColumn } from './columns.ts';
export {
  findDataset,
  findGeneration,
  insertDataset,
  insertTransform,
  overlayTransformMap,
  type TransformRange,
  upsertCandidateGeneration,
} from './datasets.ts';
export { type Conn, createPool, type Db, poolAs, withTransaction } from './db.ts';
export { contentHash, rootAgg, rowHashExpr } from './hashing.ts';
export {
  addGeneration,
  createParent,
  createTargetView,
  DATA_SCHEMA,
  dataColumns,
  generationTable,
  parentExists,
  qualifiedGenerationTable,
  qualifiedParent,
  SYSTEM_COLUMNS,
  targetViewSql,
} from './layout.ts';
export { type HeldLock, holdLock, type LockKind, type LockMode, takeLock } from './locks.ts';
export { DATASET_ACTIONS, type DatasetAction, logAction, logDatasetAction, RELEASE_ACTIONS, type ReleaseAction } from './log.ts';
export {
  dependencyPins,
  findManifest,
  insertDependencyPin,
  insertGrid,
  insertManifest,
  insertPartitions,
  manifestEnds,
  rangeUnion,
  storedCoverage,
  storedGrid,
} from './manifest.ts';
export { assertSchemaCurrent, LATEST_VERSION, migrate, type OwnerSettings, ownerSettingsFromConfig } from './migrate.ts';
export {
  DEFAULT_READER_LEASE_MS,
  generationGoneReason,
  type ReaderLease,
  readerLeases,
  releaseReaderLease,
  takeReaderLease,
} from './reader-leases.ts';
export {
  formatDuration,
  NO_RATES,
  partitionCounts,
  pausedBy,
  type ProgressRow,
  progressLine,
  ProgressMeter,
  progressRates,
  progressSample,
  type ProgressSample,
  type Rates,
  releaseProgress,
} from './progress.ts';
export { getRelease, type ReleaseRow } from './releases.ts';
export {
  latestThrottleDecision,
  oldestPreparedTransaction,
  PARTITION_PAGE,
  PARTITION_STATUSES,
  type PartitionListing,
  type PartitionStatus,
  parsePartitionListing,
  type PreparedTransactions,
  receiptSummary,
  type ReceiptSummary,
  releaseList,
  type ReleaseStatus,
  releaseStatus,
  type ThrottleDecisionSummary,
} from './status.ts';
export { casTransition, commitPartition, type PartitionCommit, setThrottlePause } from './transitions.ts';
export { asPrincipal, approveVerb, type ApproveRow, boardActionVerb, cancelReleaseVerb, operatorPauseVerb, submitReleaseVerb } from './verbs.ts';
export {
  awaitRequest,
  claimRequest,
  executeRequest,
  finishRequest,
  getRequest,
  isServiceLogin,
  requestError,
  type RequestHandler,
  type RequestHandlers,
  type RequestOf,
  type RequestOutcome,
  type RequestRow,
  type RequestState,
  serveRequests,
  type ServiceHandlers,
  submitRequest,
  waitServingRequests,
} from './requests.ts';
