export * from './names.ts';
export * from './redis.ts';
export * from './queue.ts';
export * from './enqueue.ts';
