export * from './errors.ts';
export * from './config.ts';
export * from './grid.ts';
export * from './release.ts';
export * from './states.ts';
export * from './sql.ts';
