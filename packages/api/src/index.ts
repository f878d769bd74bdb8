export { SessionStore } from './auth.ts';
export { httpStatusOf } from './http-errors.ts';
export { type ApiServer, startApi } from './server.ts';
