export { type ApiServer, startApi } from './server.ts';
