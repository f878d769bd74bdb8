export * from './signals.ts';
export * from './aimd.ts';
export * from './decisions.ts';
export * from './lease.ts';
export * from './admission.ts';
export * from './controller.ts';
export * from './metrics.ts';
export * from './throttle.ts';
