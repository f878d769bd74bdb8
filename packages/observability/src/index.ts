export { createLogger, type Logger, scoped } from './logger.ts';
export {
  type Check,
  createMetricsRegistry,
  type MetricsServer,
  type MetricsServerOptions,
  type PlannerMetrics,
  plannerMetrics,
  type Readiness,
  type Registry,
  serveMetrics,
  type WorkerMetrics,
  workerMetrics,
} from './metrics.ts';
