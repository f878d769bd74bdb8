// An error that crosses a process — a request a service ran for the CLI or the API — keeps its
// class, code and fields (temporal's failure converter does the same for activities): the
// service stores `toStoredError(err)`, the waiting side rebuilds the same class with
// `fromStoredError`, so the failure maps to the exit code and HTTP status the error would have
// had in-process. A class this process does not know is rebuilt as its nearest known ancestor
// (`lineage`), and failing that as a RequestFailedError of the stored exit code.
import {
  CasConflictError,
  ConfigError,
  DependencyChangedError,
  type ExitCode,
  GenerationGoneError,
  GenfillError,
  IngressBusyError,
  IngressConflictError,
  InvalidInputError,
  LockNotAvailableError,
  LockWaitTimeoutError,
  NotFoundError,
  PartitionFailedError,
  PermissionDeniedError,
  ProjectorBehindError,
  RangeOverlapError,
  ReconciliationRequiredError,
  RedisUnavailableError,
  RefusedError,
  ReleaseConflictError,
  RequestFailedError,
  SchemaVersionError,
  SourceReadRefusedError,
  StaleLeaseError,
  SwitchRefusedError,
  TransformRefusedError,
  UnknownDatasetError,
  UnmappedPrincipalError,
  PersonAlreadyApprovedError,
  SubmitterApprovalError,
} from './errors.ts';
import { pgErrorCode } from './pg-errors.ts';

/** Every error class of contracts, by name: what a stored error is rebuilt as. */
export const ERROR_CLASSES = {
  GenfillError,
  InvalidInputError,
  ConfigError,
  UnknownDatasetError,
  RefusedError,
  CasConflictError,
  ReleaseConflictError,
  RangeOverlapError,
  IngressBusyError,
  IngressConflictError,
  GenerationGoneError,
  SchemaVersionError,
  SourceReadRefusedError,
  NotFoundError,
  PermissionDeniedError,
  LockNotAvailableError,
  LockWaitTimeoutError,
  ProjectorBehindError,
  SwitchRefusedError,
  DependencyChangedError,
  StaleLeaseError,
  PartitionFailedError,
  RequestFailedError,
  ReconciliationRequiredError,
  RedisUnavailableError,
  TransformRefusedError,
  UnmappedPrincipalError,
  PersonAlreadyApprovedError,
  SubmitterApprovalError,
} as const;

export type ErrorClassName = keyof typeof ERROR_CLASSES;

/** An error as a request stores it (genfill.requests.error). */
export interface StoredError {
  /** The class that was raised (`NotFoundError`, `LeaseLost`), or a non-genfill error's name. */
  name: string;
  /** The class and its ancestors up to GenfillError, nearest first. */
  lineage: string[];
  message: string;
  exitCode: ExitCode;
  /** The SQLSTATE behind it (the error's own, or its cause's), or null. */
  code: string | null;
  retryable: boolean;
  /** The class's structured fields: CasConflictError's release, expected, …; InvalidInputError's problems. */
  fields: Record<string, unknown>;
}

/** What every Error has or GenfillError declares: never a structured field. */
const NOT_FIELDS = new Set(['name', 'message', 'stack', 'cause', 'exitCode', 'retryable', '__proto__', 'constructor', 'prototype']);

/** A value as JSON would keep it; what cannot be (a cycle, a bigint) becomes its text. */
function plain(value: unknown): unknown {
  try {
    return JSON.parse(JSON.stringify(value) ?? 'null') as unknown;
  } catch {
    return String(value);
  }
}

function lineageOf(err: object): string[] {
  const names: string[] = [];
  for (let p = Object.getPrototypeOf(err) as object | null; p && p !== Error.prototype && p !== Object.prototype; p = Object.getPrototypeOf(p) as object | null) {
    const name = (p as { constructor?: { name?: string } }).constructor?.name;
    if (name) names.push(name);
  }
  return names;
}

export function toStoredError(err: unknown): StoredError {
  if (err instanceof GenfillError) {
    const fields: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(err)) if (!NOT_FIELDS.has(k)) fields[k] = plain(v);
    return {
      name: err.name,
      lineage: lineageOf(err),
      message: err.message,
      exitCode: err.exitCode,
      code: pgErrorCode(err) ?? pgErrorCode(err.cause),
      retryable: err.retryable,
      fields,
    };
  }
  const e = err as Error | null;
  return { name: e?.name ?? 'Error', lineage: [], message: e?.message ?? String(err), exitCode: 1, code: pgErrorCode(err), retryable: false, fields: {} };
}

function known(name: string): name is ErrorClassName {
  return Object.hasOwn(ERROR_CLASSES, name);
}

/**
 * The stored error as the class that was raised (or its nearest known ancestor): the same
 * message, exit code and fields. It is rebuilt without running the constructor — the stored
 * message and fields are what the constructor made. `request` is the request it failed.
 * Rows stored before errors kept their class (`{name, message, exitCode, problems?}`) are read too.
 */
export function fromStoredError(stored: Partial<StoredError> & { message: string; exitCode: ExitCode; problems?: unknown }, request: string): GenfillError {
  const name = stored.name ?? 'Error';
  const fields = stored.fields ?? (stored.problems ? { problems: stored.problems } : {});
  const as = [name, ...(stored.lineage ?? [])].find(known);
  if (!as || as === 'GenfillError' || as === 'RequestFailedError') {
    return new RequestFailedError(stored.message, stored.exitCode, request, name === 'RequestFailedError' ? ((fields.errorName as string | null) ?? null) : name);
  }
  const err = Object.create(ERROR_CLASSES[as].prototype as object) as GenfillError;
  const own = (key: string, value: unknown, enumerable: boolean) => Object.defineProperty(err, key, { value, writable: true, configurable: true, enumerable });
  own('message', stored.message, false);
  own('name', name, true);
  own('exitCode', stored.exitCode, true);
  own('retryable', stored.retryable ?? false, true);
  for (const [k, v] of Object.entries(fields)) if (!NOT_FIELDS.has(k)) own(k, v, true);
  own('request', request, true);
  own('stack', `${name}: ${stored.message}\n    at request #${request}`, false);
  return err;
}
