export { buildJobSchema, jobId, MAX_UNIT_PARTITIONS, queueName, unitJobId } from './names.ts';
export { buildJob, type BuildQueue, qualifiedQueueName, releaseQueue, syncQueuePause } from './queue.ts';
export {
  asRedisUnavailable,
  clusterTarget,
  type ClusterTarget,
  connectRedis,
  createRedis,
  createServiceRedis,
  isRedisClient,
  type Redis,
  redisAnswers,
  warnIfEvicting,
  withDeadline,
} from './redis.ts';
export { type Dispatcher, mirrorPause, type QueueMirror, type QueueRemoval, removeReleaseDispatch, removeReleaseQueue } from './dispatcher.ts';
