export { claimablePartitionsQuery } from './scaler.ts';
export {
  DEFAULT_IMAGE,
  GENERIC_MAX_WORKERS,
  genericWorkers,
  type KubeObject,
  METRICS_PORT,
  RELEASE_ANNOTATION,
  releaseWorkers,
  SCALER_AUTH,
  WORKER_GRACE_SECONDS,
  WORKER_LOCK_DURATION_MS,
  WORKER_STATEMENT_TIMEOUT,
  workerName,
} from './workers.ts';
export { toYamlDocuments } from './yaml.ts';
