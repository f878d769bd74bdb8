export { main } from './main.ts';
export type { Io } from './io.ts';
