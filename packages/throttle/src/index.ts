export { Admission } from './admission.ts';
export { type Budget, decide, FAR_OVER, HEADROOM, mayStep, NO_PRESSURE, Pacer } from './aimd.ts';
export { throttleMetrics } from './metrics.ts';
export { quantile, type Reading } from './signals.ts';
export { createThrottle, DEFAULT_INTERVAL_MS } from './throttle.ts';
