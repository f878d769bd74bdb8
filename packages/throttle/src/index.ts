export { Admission, shareBucket, workerSlots } from './admission.ts';
export { type Budget, decide, FAR_OVER, HEADROOM, initialKnobs, mayStep, NO_PRESSURE, Pacer } from './aimd.ts';
export { throttleMetrics } from './metrics.ts';
export {
  CanarySignal,
  canaryStatements,
  PrometheusSignal,
  quantile,
  type Reading,
  StandbyLagEstimator,
} from './signals.ts';
export { createThrottle, DEFAULT_INTERVAL_MS } from './throttle.ts';
