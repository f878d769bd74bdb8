export * from './admission.ts';
export * from './submit.ts';
export * from './plan.ts';
export * from './adopt.ts';
export * from './dispatch.ts';
export * from './control.ts';
export * from './progress.ts';
export * from './service.ts';
