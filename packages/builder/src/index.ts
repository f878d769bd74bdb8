export * from './claim.ts';
export * from './build.ts';
export * from './statement.ts';
export * from './processor.ts';
export * from './service.ts';
export * from './repair.ts';
