// The one place where errors become HTTP statuses and `{error, message}` bodies, as
// apps/cli/src/exit.ts is for exit codes. A 500 says only that something broke: the stack
// goes to the log, not to the caller.
import type { ErrorRequestHandler, RequestHandler, Response } from 'express';
import {
  CasConflictError,
  GenerationGoneError,
  GenfillError,
  IngressBusyError,
  IngressConflictError,
  InvalidInputError,
  NotFoundError,
  ReconciliationRequiredError,
  RedisUnavailableError,
  RefusedError,
  RequestFailedError,
  SchemaVersionError,
  UnknownDatasetError,
  type Problem,
} from '@genfill/contracts';
import type { Logger } from '@genfill/observability';

/** No credentials, or a token or session this API does not know. 401. */
export class UnauthenticatedError extends Error {
  constructor(message = 'send Authorization: Bearer <token> (GENFILL_API_TOKENS), or log in at /login') {
    super(message);
    this.name = 'UnauthenticatedError';
  }
}

/** Known caller, but the role does not allow this. 403. */
export class ForbiddenError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ForbiddenError';
  }
}

export interface HttpError {
  status: number;
  body: { error: string; message: string; problems?: Problem[]; [field: string]: unknown };
  headers?: Record<string, string>;
}

/** Errors express's own parsers raise (malformed JSON, a body too large) carry a 4xx status. */
function clientErrorStatus(err: unknown): number | null {
  const e = err as { status?: unknown; expose?: unknown } | null;
  return e && typeof e.status === 'number' && e.status >= 400 && e.status < 500 && e.expose === true ? e.status : null;
}

export function toHttp(err: unknown): HttpError {
  const body = (status: number, error: string, message: string): HttpError => ({ status, body: { error, message } });
  if (err instanceof UnauthenticatedError) return body(401, err.name, err.message);
  if (err instanceof ForbiddenError) return body(403, err.name, err.message);
  // A read of a dataset the registry does not know: bad input for the CLI, a missing resource here.
  if (err instanceof UnknownDatasetError) return { status: 404, body: { error: err.name, message: err.message, problems: err.problems } };
  if (err instanceof InvalidInputError) return { status: 400, body: { error: err.name, message: err.message, problems: err.problems } };
  if (err instanceof NotFoundError) return body(404, err.name, err.message);
  // Busy is an answer to retry, never a drop.
  if (err instanceof IngressBusyError) {
    return {
      status: 429,
      body: { error: err.name, message: err.message, pending: err.pending, events: err.events, max: err.max },
      headers: { 'Retry-After': String(err.retryAfterSeconds) },
    };
  }
  if (err instanceof IngressConflictError) {
    return { status: 409, body: { error: err.name, message: err.message, conflicts: err.conflicts, conflictIds: err.conflictIds, releases: err.releases } };
  }
  // A pinned read of a generation that is gone, for good: the reason says what the registry recorded.
  if (err instanceof GenerationGoneError) {
    return { status: 410, body: { error: err.name, message: err.message, reason: err.reason, dataset: err.dataset, generation: err.generation } };
  }
  // A CAS against a release that does not exist found no row at all.
  if (err instanceof CasConflictError && err.actual === null) return body(404, err.name, err.message);
  // The schema is older or newer than this API: not the caller's fault, and not for good.
  if (err instanceof SchemaVersionError) return body(503, err.name, err.message);
  if (err instanceof RefusedError) return body(409, err.name, err.message);
  // A request a service ran and refused: its exit code says which answer it is.
  if (err instanceof RequestFailedError) {
    const status = ({ 2: 400, 3: 409, 4: 422 } as Record<number, number>)[err.exitCode] ?? 500;
    return { status, body: { error: err.name, message: err.message, request: err.request } };
  }
  if (err instanceof ReconciliationRequiredError) return body(422, err.name, err.message);
  if (err instanceof RedisUnavailableError) return body(503, err.name, err.message);
  if (err instanceof GenfillError) return body(500, err.name, err.message);
  const status = clientErrorStatus(err);
  if (status !== null) return body(status, 'InvalidRequestError', (err as Error).message);
  return body(500, 'InternalError', 'internal error: the api log has the details');
}

export function sendError(res: Response, err: unknown): HttpError {
  const http = toHttp(err);
  if (http.status === 401) res.setHeader('WWW-Authenticate', 'Bearer realm="genfill"');
  for (const [name, value] of Object.entries(http.headers ?? {})) res.setHeader(name, value);
  res.status(http.status).json(http.body);
  return http;
}

export function errorHandler(log: Logger): ErrorRequestHandler {
  return (err, req, res, next) => {
    if (res.headersSent) return next(err);
    const http = sendError(res, err);
    if (http.status >= 500) log.error({ err, method: req.method, path: req.path }, 'request failed');
  };
}

export const notFound: RequestHandler = (req, res) => {
  res.status(404).json({ error: 'NotFoundError', message: `no route ${req.method} ${req.path}` });
};
