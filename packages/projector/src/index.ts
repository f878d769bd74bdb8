export { type CatchupRound, catchupCandidates, catchupRound, lockCatchup } from './catchup.ts';
export { type BatchOptions, type BatchOutcome, type Lease, runBatch } from './batch.ts';
export { entryFilter, loadDataset, type MapEntry, projectableDatasets, type ProjectedDataset, ProjectorNotReadyError } from './dataset.ts';
export { LAG_COUNT_LIMIT, projectorStatus, type ProjectorStatus } from './lag.ts';
export { projectorMetrics, type ProjectorMetrics } from './metrics.ts';
export { type SealOptions, sealRelease, type SealResult, unsealRelease, type UnsealResult } from './seal.ts';
export { PROJECTOR_DEFAULTS, projectDataset, type ProjectorOptions, projectorRequestHandlers, runProjectorService, type ProjectorServiceOptions } from './service.ts';
export { applyStatement, type ApplyCounts } from './statement.ts';
export { CUTOVER_DEFAULTS, type CutoverCheck, cutoverChecks, type CutoverOptions, cutoverRelease, type CutoverResult, type CutoverStep } from './cutover.ts';
