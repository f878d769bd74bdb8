export * from './server.ts';
export * from './app.ts';
export * from './auth.ts';
export * from './http-errors.ts';
export { BOARD_PATH } from './board.ts';
export { ReleaseQueues, type ShownRelease } from './queues.ts';
