export * from './db.ts';
export * from './migrate.ts';
export * from './releases.ts';
export * from './datasets.ts';
export * from './manifest.ts';
export * from './hashing.ts';
export * from './status.ts';
export * from './layout.ts';
