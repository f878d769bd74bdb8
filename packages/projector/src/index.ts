export { type BatchOptions, type BatchOutcome, type Lease, runBatch } from './batch.ts';
export { changedDependencies, markDependencyStale } from './dependencies.ts';
export { loadDataset, type MapEntry, projectableDatasets, type ProjectedDataset, ProjectorNotReadyError } from './dataset.ts';
export { type DriftVerdict, lastDriftChecks, projectorStatus, type ProjectorStatus, type SourceRewrite } from './lag.ts';
export { findPoison, type PoisonEvent } from './poison.ts';
export { type ProjectorMetrics } from './metrics.ts';
export { PROJECTOR_DEFAULTS, projectDataset, type ProjectorExtension, type ProjectorOptions, runProjectorService, type ProjectorServiceOptions } from './service.ts';
export { type Applied, applyStatement, applyStep, type ApplyCounts, EVENTS_TABLE, type Poison } from './statement.ts';
