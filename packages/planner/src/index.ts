export * from './admission.ts';
export * from './submit.ts';
export * from './plan.ts';
export * from './adopt.ts';
