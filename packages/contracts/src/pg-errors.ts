// The one table from the SQLSTATEs genfill's SQL raises to the error classes the rest of the
// code sees (the role bullmq's error-code.ts plays for its Lua scripts): one code, one class.
// A call site hands what it caught to `errorFromPg` with what it knows (the release, the
// dataset, what a refusal means there) and gets the named error back, the database's error as
// its `cause`; anything else comes back unchanged. Nothing branches on message text.
//
// The genfill codes are raised by the registry's functions (`RAISE … USING ERRCODE = 'GF…'`);
// a test reads every SQL file under packages/registry and checks each code has its entry here.
// The standard codes in the table are those genfill's SQL raises by name or that mean one thing
// wherever genfill meets them; the others in SQLSTATE are outcomes a caller handles itself
// (retries, a pending step, a batch's result) and never become an error class.
import {
  type GenfillError,
  type IngressConflict,
  IngressBusyError,
  IngressConflictError,
  InvalidInputError,
  GenerationGoneError,
  LockNotAvailableError,
  type LockHolder,
  LockWaitTimeoutError,
  NotFoundError,
  PermissionDeniedError,
  PersonAlreadyApprovedError,
  type PrincipalKind,
  type Problem,
  ProjectorBehindError,
  RangeOverlapError,
  RefusedError,
  ReleaseConflictError,
  SourceReadRefusedError,
  StaleLeaseError,
  TransformRefusedError,
  SubmitterApprovalError,
  UnmappedPrincipalError,
} from './errors.ts';

/** The fields of a node-postgres DatabaseError genfill reads. */
export interface PgError extends Error {
  code: string;
  severity?: string;
  detail?: string;
  hint?: string;
  where?: string;
  schema?: string;
  table?: string;
  column?: string;
  constraint?: string;
}

/** An error the server raised (node-postgres's DatabaseError): a SQLSTATE and a severity. */
export function isPgError(err: unknown): err is PgError {
  const e = err as { code?: unknown; severity?: unknown } | null;
  return err instanceof Error && typeof e!.code === 'string' && /^[0-9A-Z]{5}$/.test(e!.code) && typeof e!.severity === 'string';
}

/** The SQLSTATE of a server error, or null for anything else. */
export function pgErrorCode(err: unknown): string | null {
  return isPgError(err) ? err.code : null;
}

/** Every SQLSTATE genfill names, genfill's own first. */
export const SQLSTATE = {
  /** A named release, dataset or generation does not exist. */
  notFound: 'GFN01',
  /** A precondition or a state's compare-and-swap refused; the message says which. */
  refused: 'GFR01',
  /** A release id exists with other content (DETAIL: the stored digest). */
  releaseConflict: 'GFC01',
  /** A release's range overlaps another open release's (DETAIL: its id, HINT: its range). */
  rangeOverlap: 'GFO01',
  /** A lease or fencing token is no longer current. */
  staleLease: 'GFS01',
  /** A pinned read's generation is gone (DETAIL: its state). */
  generationGone: 'GFG01',
  /** The projector frontier lacks build watermarks (DETAIL: the partitions, JSON). */
  projectorBehind: 'GFL01',
  /** Ingress events that do not fit (DETAIL: `[{line, message}]`, JSON). */
  invalidEvents: 'GFI01',
  /** Ingress past its pending bound (DETAIL: `{pending, events, max}`, JSON). */
  ingressBusy: 'GFB01',
  /** Ingress: an equal revision with another payload (DETAIL: the conflicts, JSON). */
  ingressConflict: 'GFX01',
  /** A login may not read a source's events or conflict images (genfill.source_events, 0025). */
  sourceReadRefused: 'GFP01',
  /** genfill.request: a request of that kind and release is open with other arguments (DETAIL: `{request, state}`). */
  requestOpen: 'GFQ01',
  /** genfill.request: the principal has request.max_open_per_principal open requests (DETAIL: `{open, max}`). */
  requestCap: 'GFQ02',
  /** genfill.request: the arguments do not fit the kind's schema (DETAIL: `[{path, message}]`). */
  requestArgs: 'GFQ03',
  /** genfill.reader_lease: the live lease of that holder is another principal's. */
  readerLeaseNotYours: 'GFQ04',
  /** genfill.reader_lease: the lease reached reader_lease.max_lifetime and expired. */
  readerLeaseLifetime: 'GFQ05',
  /** genfill.quarantine_key: the key is neither a projector stop's nor named by a reconciliation. */
  quarantineUnnamed: 'GFQ06',
  /** genfill.settings: a setting is missing, or a value the owner wrote does not read as its type. */
  setting: 'GFQ07',
  /**
   * A transform reads what its submitter may not (genfill.submit_release at submit,
   * genfill.transform_admissible at plan), or its submitter is no database role. DETAIL: the
   * problems, `[{path, message}]` JSON.
   */
  transformRefused: 'GFT01',
  /** An approver or submitter that maps to no person (DETAIL: `{principal, kind}`, JSON). */
  unmappedPrincipal: 'GFM01',
  /** One person, one approval: this person approved under another principal. */
  personAlreadyApproved: 'GFM02',
  /** The submitter's person cannot approve, under any principal. */
  submitterApproval: 'GFM03',
  /** One of genfill's locks (genfill.take_lock) not granted in time (DETAIL: `{lock, key, mode, timeoutMs, holders}`, JSON). */
  lockWaitTimeout: 'GFK01',

  invalidParameterValue: '22023',
  uniqueViolation: '23505',
  exclusionViolation: '23P01',
  serializationFailure: '40001',
  deadlockDetected: '40P01',
  insufficientPrivilege: '42501',
  duplicateTable: '42P07',
  lockNotAvailable: '55P03',
  queryCanceled: '57014',
} as const;

export type Sqlstate = (typeof SQLSTATE)[keyof typeof SQLSTATE];

/** What a call site knows that the server's error does not carry. */
export interface PgErrorContext {
  release?: string;
  /** The digest of the release file being submitted. */
  digest?: string;
  dataset?: string;
  generation?: string;
  partition?: string;
  attempt?: number;
  /** The input an invalid value came from (InvalidInputError's path): `lease`, `generation`, … */
  input?: string;
  /** What a busy answer asks the caller to wait. */
  retryAfterSeconds?: number;
  /**
   * What a code means at this call site, in words that name the fix (the server's message is
   * given): the class stays the table's.
   */
  messages?: Partial<Record<MappedSqlstate, (e: PgError) => string>>;
}

/** Seconds a busy answer asks the caller to wait, unless the caller says otherwise. */
export const DEFAULT_RETRY_AFTER_SECONDS = 5;

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type ErrorClass = abstract new (...args: any[]) => GenfillError;

interface PgErrorMapping<C extends ErrorClass> {
  class: C;
  /** The message when the call site gives none: the server's unless said here. */
  message?: (e: PgError) => string;
  make: (e: PgError, c: PgErrorContext, message: string) => InstanceType<C>;
}

const mapping = <C extends ErrorClass>(m: PgErrorMapping<C>): PgErrorMapping<C> => m;

function json<T>(text: string | undefined, fallback: T): T {
  try {
    return text === undefined ? fallback : (JSON.parse(text) as T);
  } catch {
    return fallback;
  }
}

/** GFI01's DETAIL, `[{line, message}]`, as problems; the message alone when it is not that. */
function problemsOf(e: PgError, c: PgErrorContext, message: string): Problem[] {
  const list = json<unknown>(e.detail, null);
  if (!Array.isArray(list)) return [{ path: c.input ?? '', message }];
  return list.map((p: { line?: number | null; message?: string }) => ({
    path: typeof p.line === 'number' ? `line ${p.line}` : '',
    message: String(p.message ?? message),
  }));
}

/** The table: each SQLSTATE genfill maps, to exactly one class. */
export const PG_ERRORS = {
  [SQLSTATE.notFound]: mapping({ class: NotFoundError, make: (_e, _c, m) => new NotFoundError(m) }),
  [SQLSTATE.refused]: mapping({ class: RefusedError, make: (_e, _c, m) => new RefusedError(m) }),
  [SQLSTATE.releaseConflict]: mapping({
    class: ReleaseConflictError,
    make: (e, c) => new ReleaseConflictError(c.release ?? '?', e.detail ?? '?', c.digest ?? '?'),
  }),
  [SQLSTATE.rangeOverlap]: mapping({ class: RangeOverlapError, make: (e, c) => new RangeOverlapError(c.release ?? '?', e.detail ?? '?', e.hint ?? '') }),
  [SQLSTATE.staleLease]: mapping({
    class: StaleLeaseError,
    make: (_e, c, m) => new StaleLeaseError(c.release ?? null, c.partition ?? null, c.attempt ?? null, { message: m }),
  }),
  [SQLSTATE.generationGone]: mapping({
    class: GenerationGoneError,
    make: (e, c, m) => new GenerationGoneError(c.dataset ?? '?', c.generation ?? '?', e.detail ?? null, m),
  }),
  [SQLSTATE.projectorBehind]: mapping({ class: ProjectorBehindError, make: (e, _c, m) => new ProjectorBehindError(m, json(e.detail, e.detail ?? null)) }),
  [SQLSTATE.invalidEvents]: mapping({ class: InvalidInputError, make: (e, c, m) => new InvalidInputError(problemsOf(e, c, m)) }),
  [SQLSTATE.ingressBusy]: mapping({
    class: IngressBusyError,
    make: (e, c) => {
      const d = json<{ pending?: number; events?: number; max?: number }>(e.detail, {});
      return new IngressBusyError(c.dataset ?? '?', d.pending ?? 0, d.events ?? 0, d.max ?? 0, c.retryAfterSeconds ?? DEFAULT_RETRY_AFTER_SECONDS);
    },
  }),
  // Raised inside genfill.ingest_apply and recorded there (migration 0026): a caller sees the
  // conflicts in the verb's result, not this code. Kept for a conflict raised anywhere else.
  [SQLSTATE.ingressConflict]: mapping({
    class: IngressConflictError,
    make: (e, c) => new IngressConflictError(c.dataset ?? '?', json<IngressConflict[]>(e.detail, []), [], []),
  }),
  [SQLSTATE.requestOpen]: mapping({ class: RefusedError, make: (_e, _c, m) => new RefusedError(m) }),
  [SQLSTATE.requestCap]: mapping({ class: RefusedError, make: (_e, _c, m) => new RefusedError(m) }),
  // DETAIL `[{path, message}]`: each problem by its path (`args.waitMs`).
  [SQLSTATE.requestArgs]: mapping({
    class: InvalidInputError,
    make: (e, c, m) => {
      const list = json<unknown>(e.detail, null);
      if (!Array.isArray(list)) return new InvalidInputError([{ path: c.input ?? 'args', message: m }]);
      return new InvalidInputError(list.map((p: { path?: string; message?: string }) => ({ path: String(p.path ?? 'args'), message: String(p.message ?? m) })));
    },
  }),
  [SQLSTATE.readerLeaseNotYours]: mapping({ class: PermissionDeniedError, make: (_e, _c, m) => new PermissionDeniedError(m) }),
  [SQLSTATE.readerLeaseLifetime]: mapping({ class: RefusedError, make: (_e, _c, m) => new RefusedError(m) }),
  [SQLSTATE.quarantineUnnamed]: mapping({ class: RefusedError, make: (_e, _c, m) => new RefusedError(m) }),
  [SQLSTATE.setting]: mapping({ class: RefusedError, make: (_e, _c, m) => new RefusedError(m) }),
  [SQLSTATE.unmappedPrincipal]: mapping({
    class: UnmappedPrincipalError,
    make: (e, _c, m) => {
      const d = json<{ principal?: string; kind?: PrincipalKind }>(e.detail, {});
      return new UnmappedPrincipalError(m, d.principal ?? null, d.kind ?? null);
    },
  }),
  [SQLSTATE.personAlreadyApproved]: mapping({ class: PersonAlreadyApprovedError, make: (_e, _c, m) => new PersonAlreadyApprovedError(m) }),
  [SQLSTATE.submitterApproval]: mapping({ class: SubmitterApprovalError, make: (_e, _c, m) => new SubmitterApprovalError(m) }),
  // Raised by name by genfill's functions for a bad holder, TTL or batch size: the caller's input.
  [SQLSTATE.invalidParameterValue]: mapping({ class: InvalidInputError, make: (_e, c, m) => new InvalidInputError([{ path: c.input ?? '', message: m }]) }),
  // The releases' exclusion constraint: a submission that raced another one over the same range.
  [SQLSTATE.exclusionViolation]: mapping({
    class: RangeOverlapError,
    make: (_e, c) => new RangeOverlapError(c.release ?? '?', '(a concurrent submission)', ''),
  }),
  [SQLSTATE.insufficientPrivilege]: mapping({
    class: PermissionDeniedError,
    message: (e) =>
      `your login may not do this (${e.message}): operators need the genfill_operator role, approvers genfill_approver ` +
      '(README "Roles"); people change the registry only through genfill verbs',
    make: (_e, _c, m) => new PermissionDeniedError(m),
  }),
  // genfill.create_target_view: the target table exists and is not genfill's view.
  [SQLSTATE.duplicateTable]: mapping({ class: RefusedError, make: (_e, _c, m) => new RefusedError(m) }),
  [SQLSTATE.sourceReadRefused]: mapping({ class: SourceReadRefusedError, make: (_e, _c, m) => new SourceReadRefusedError(m) }),
  [SQLSTATE.lockNotAvailable]: mapping({ class: LockNotAvailableError, make: (_e, _c, m) => new LockNotAvailableError(m) }),
  [SQLSTATE.transformRefused]: mapping({
    class: TransformRefusedError,
    make: (e, c, m) =>
      new TransformRefusedError(
        json<Problem[]>(e.detail, [{ path: 'transform.sql', message: m }]),
        null,
        c.release ?? null,
        { message: m },
      ),
  }),
  [SQLSTATE.lockWaitTimeout]: mapping({
    class: LockWaitTimeoutError,
    make: (e, _c, m) => {
      const d = json<{ lock?: string; key?: string; timeoutMs?: number; holders?: LockHolder[] }>(e.detail, {});
      return new LockWaitTimeoutError(m, d.lock ?? '?', d.key ?? '?', d.timeoutMs ?? null, Array.isArray(d.holders) ? d.holders : []);
    },
  }),
} as const;

export type MappedSqlstate = keyof typeof PG_ERRORS;

function isMapped(code: string): code is MappedSqlstate {
  return Object.hasOwn(PG_ERRORS, code);
}

/**
 * The named error for what the server raised, with the server's error as its `cause`; `err`
 * itself when it is not a server error or its code is not in the table.
 */
export function errorFromPg(err: unknown, context: PgErrorContext = {}): unknown {
  if (!isPgError(err) || !isMapped(err.code)) return err;
  const m: PgErrorMapping<ErrorClass> = PG_ERRORS[err.code];
  const message = context.messages?.[err.code]?.(err) ?? m.message?.(err) ?? err.message;
  const out = m.make(err, context, message);
  Object.defineProperty(out, 'cause', { value: err, writable: true, configurable: true, enumerable: false });
  return out;
}
