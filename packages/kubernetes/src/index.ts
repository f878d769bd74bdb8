export { claimablePartitionsQuery } from './scaler.ts';
export {
  DEFAULT_IMAGE,
  genericWorkers,
  type KubeObject,
  releaseWorkers,
} from './workers.ts';
export { toYamlDocuments } from './yaml.ts';
