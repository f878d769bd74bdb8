export { createLogger, type Logger, scoped } from './logger.ts';
export {
  createMetricsRegistry,
  type MetricsServer,
  type PlannerMetrics,
  plannerMetrics,
  type Registry,
  serveMetrics,
  type WorkerMetrics,
  workerMetrics,
} from './metrics.ts';
