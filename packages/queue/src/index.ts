export { buildJobSchema, jobId, queueName } from './names.ts';
export { buildJob, type BuildQueue, qualifiedQueueName, releaseQueue, syncQueuePause } from './queue.ts';
export {
  asRedisUnavailable,
  connectRedis,
  createRedis,
  createServiceRedis,
  Redis,
  redisAddress,
  redisAnswers,
  warnIfEvicting,
  withDeadline,
} from './redis.ts';
