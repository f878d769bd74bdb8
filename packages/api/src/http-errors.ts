// The one place where errors become HTTP statuses and `{error, message}` bodies, as
// apps/cli/src/exit.ts is for exit codes. A 500 says only that something broke: the stack
// goes to the log, not to the caller.
import type { ErrorRequestHandler, RequestHandler, Response } from 'express';
import {
  CasConflictError,
  type ExitCode,
  GenerationGoneError,
  GenfillError,
  IngressBusyError,
  IngressConflictError,
  InvalidInputError,
  NotFoundError,
  RedisUnavailableError,
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

/** A request this API answers before (or instead of) reading its body: 408, 413 or 429. */
export class RequestRefusedError extends Error {
  constructor(
    readonly status: 408 | 413 | 429,
    message: string,
    /** Seconds, for 429: sent as Retry-After. */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = status === 408 ? 'UploadTooSlowError' : status === 413 ? 'BodyTooLargeError' : 'TooManyRequestsError';
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

/** A GenfillError's status by its exit code, for a class the rules below do not name. */
const STATUS_OF_EXIT: Record<ExitCode, number> = { 0: 200, 1: 500, 2: 400, 3: 409, 4: 422 };

/**
 * The one mapping from an error to its HTTP status, by class — the same whether the error was
 * raised here or by the service that ran a request (rebuilt as its class): bad input 400
 * (exit 2), refused 409 (exit 3), reconciliation required 422 (exit 4), and the classes
 * named here.
 */
export function httpStatusOf(err: unknown): number {
  if (err instanceof UnauthenticatedError) return 401;
  if (err instanceof ForbiddenError) return 403;
  if (err instanceof RequestRefusedError) return err.status;
  // A read of a dataset the registry does not know: bad input for the CLI, a missing resource here.
  if (err instanceof UnknownDatasetError || err instanceof NotFoundError) return 404;
  // A CAS against a release that does not exist found no row at all.
  if (err instanceof CasConflictError && err.actual === null) return 404;
  // A pinned read of a generation that is gone, for good.
  if (err instanceof GenerationGoneError) return 410;
  // Busy is an answer to retry, never a drop.
  if (err instanceof IngressBusyError) return 429;
  // The schema is older or newer than this API, or Redis is away: not the caller's fault, and not for good.
  if (err instanceof SchemaVersionError || err instanceof RedisUnavailableError) return 503;
  if (err instanceof GenfillError) return STATUS_OF_EXIT[err.exitCode];
  return clientErrorStatus(err) ?? 500;
}

/** What the body adds to `{error, message}` for the classes that carry more. */
function fieldsOf(err: GenfillError): Record<string, unknown> {
  const request = (err as { request?: unknown }).request;
  const fields: Record<string, unknown> = typeof request === 'string' ? { request } : {};
  if (err instanceof InvalidInputError) return { ...fields, problems: err.problems };
  if (err instanceof IngressBusyError) return { ...fields, pending: err.pending, events: err.events, max: err.max };
  if (err instanceof IngressConflictError) return { ...fields, conflicts: err.conflicts, conflictIds: err.conflictIds, releases: err.releases };
  if (err instanceof GenerationGoneError) return { ...fields, reason: err.reason, dataset: err.dataset, generation: err.generation };
  return fields;
}

export function toHttp(err: unknown): HttpError {
  const status = httpStatusOf(err);
  if (err instanceof UnauthenticatedError || err instanceof ForbiddenError) return { status, body: { error: err.name, message: err.message } };
  if (err instanceof RequestRefusedError) {
    return {
      status,
      body: { error: err.name, message: err.message },
      ...(err.retryAfterSeconds !== undefined ? { headers: { 'Retry-After': String(err.retryAfterSeconds) } } : {}),
    };
  }
  if (err instanceof GenfillError) {
    return {
      status,
      body: { error: err.name, message: err.message, ...fieldsOf(err) },
      ...(err instanceof IngressBusyError ? { headers: { 'Retry-After': String(err.retryAfterSeconds) } } : {}),
    };
  }
  if (status < 500) return { status, body: { error: 'InvalidRequestError', message: (err as Error).message } };
  return { status: 500, body: { error: 'InternalError', message: 'internal error: the api log has the details' } };
}

export function sendError(res: Response, err: unknown): HttpError {
  const http = toHttp(err);
  // Refused before its body was read (401, 403, an early 429): close the connection rather than
  // let node read the rest of the body to keep it alive.
  if (res.req && !res.req.complete) res.setHeader('Connection', 'close');
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
  if (!req.complete) res.setHeader('Connection', 'close');
  res.status(404).json({ error: 'NotFoundError', message: `no route ${req.method} ${req.path}` });
};
