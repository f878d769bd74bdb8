export * from './claim.ts';
export * from './build.ts';
export * from './statement.ts';
