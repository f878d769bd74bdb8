// Every error the operator can meet is a named class with structured fields. The CLI maps
// them to exit codes in one place (apps/cli/src/exit.ts); `retryable` says whether trying
// the same thing again can help (the role bullmq's UnrecoverableError plays for jobs).

export type ExitCode = 0 | 1 | 2 | 3 | 4;

export interface Problem {
  /** Where the problem is: a path into the release (`range.from`), a file, a column. */
  path: string;
  message: string;
}

export abstract class GenfillError extends Error {
  abstract readonly exitCode: ExitCode;
  readonly retryable: boolean = false;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Bad input: nothing was written. Exit 2. */
export class InvalidInputError extends GenfillError {
  readonly exitCode = 2 as const;
  readonly problems: Problem[];
  constructor(problems: Problem[] | string, options?: { cause?: unknown }) {
    const list = typeof problems === 'string' ? [{ path: '', message: problems }] : problems;
    super(list.map((p) => (p.path ? `${p.path}: ${p.message}` : p.message)).join('\n'), options);
    this.problems = list;
  }
}

/** A precondition does not hold or a compare-and-swap was lost. Exit 3. */
export class RefusedError extends GenfillError {
  readonly exitCode = 3 as const;
}

/** A state transition's compare-and-swap found another state. */
export class CasConflictError extends RefusedError {
  constructor(
    readonly release: string,
    readonly expected: string,
    readonly actual: string | null,
    readonly wanted: string,
  ) {
    super(
      actual === null
        ? `release ${release} does not exist`
        : `release ${release} is ${actual}, not ${expected}: the move to ${wanted} was refused; check \`genfill status ${release}\``,
    );
  }
}

/** The release id exists with other content: releases are immutable. */
export class ReleaseConflictError extends RefusedError {
  constructor(
    readonly release: string,
    readonly existingDigest: string,
    readonly submittedDigest: string,
  ) {
    super(
      `release ${release} already exists with digest ${existingDigest}, this file has ${submittedDigest}: ` +
        'a release is immutable, submit the change under a new release id',
    );
  }
}

/** Another open release of the same dataset and generation claims part of the range. */
export class RangeOverlapError extends RefusedError {
  constructor(
    readonly release: string,
    readonly other: string,
    readonly otherRange: string,
  ) {
    super(
      `release ${release} overlaps release ${other} (${otherRange}) on the same dataset and target generation: ` +
        'ranges are half-open [from, to) and may touch but not overlap; cancel the other release or change the range',
    );
  }
}

/**
 * Ingress: the dataset's pending events (logged, not yet in its frontier) plus this file would
 * pass GENFILL_MAX_PENDING_EVENTS. Nothing was written; retry after `retryAfterSeconds` (HTTP
 * 429 with Retry-After) — busy, never a drop.
 */
export class IngressBusyError extends RefusedError {
  override readonly retryable = true;
  constructor(
    readonly dataset: string,
    readonly pending: number,
    readonly events: number,
    readonly max: number,
    readonly retryAfterSeconds: number,
  ) {
    super(
      `dataset ${dataset} is busy: ${pending} events are pending and ${events} more would pass GENFILL_MAX_PENDING_EVENTS (${max}); ` +
        `nothing was written — retry in ${retryAfterSeconds}s, once the projector has consumed some`,
    );
  }
}

export interface IngressConflict {
  key: Record<string, unknown>;
  revision: number | string;
  /** The file's lines at that revision. */
  incoming: { line: number; op: string; row: unknown }[];
  /** What the mirror held at that revision, or null when two lines of the file disagree. */
  stored: { op: string; row: unknown } | null;
}

/**
 * Ingress: a key arrived at a revision genfill already holds (or the file holds twice) with
 * another payload. The whole file was refused and nothing applied; the conflicts were recorded
 * (genfill.ingress_conflicts) and the open releases built from the mirror moved to
 * RECONCILIATION_REQUIRED. Exit 3, HTTP 409.
 */
export class IngressConflictError extends RefusedError {
  constructor(
    readonly dataset: string,
    readonly conflicts: IngressConflict[],
    readonly conflictIds: string[],
    readonly releases: string[],
  ) {
    const first = conflicts[0];
    const named = conflicts
      .slice(0, 5)
      .map((c) => `${JSON.stringify(c.key)} at revision ${c.revision}`)
      .join(', ');
    super(
      `conflict in dataset ${dataset}: equal revision with another payload for key ${named}` +
        `${conflicts.length > 5 ? ` and ${conflicts.length - 5} more` : ''}` +
        `${first?.stored === null ? ' (two lines of the file disagree)' : ''}; the file was refused, nothing was applied. ` +
        `Recorded as conflict ${conflictIds.map((id) => `#${id}`).join(', ')}` +
        (releases.length > 0 ? `; moved to RECONCILIATION_REQUIRED: ${releases.join(', ')}` : '; no open release was moved') +
        '. Ask the source which payload is right, send it at a higher revision, then repair and reconcile',
    );
  }
}

/**
 * A pinned read named a generation that is gone: RETIRED, ABANDONED, or its table no longer
 * exists. `reason` is what the registry records (genfill.generation_gone). Exit 3, HTTP 410.
 */
export class GenerationGoneError extends RefusedError {
  constructor(
    readonly dataset: string,
    readonly generation: string,
    readonly state: string | null,
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super(reason, options);
  }
}

/** A read named a dataset the registry does not know: bad input (exit 2), HTTP 404. */
export class UnknownDatasetError extends InvalidInputError {
  constructor(readonly dataset: string) {
    super([{ path: 'dataset', message: `dataset ${dataset} does not exist: \`genfill status\` lists the releases and their datasets` }]);
  }
}

/** The database schema is newer than this code, or not migrated yet. */
export class SchemaVersionError extends RefusedError {}

/** A named thing (release, dataset, generation, table) is not there (SQLSTATE GFN01). Exit 3, HTTP 404. */
export class NotFoundError extends RefusedError {}

/**
 * The login lacks a privilege (SQLSTATE 42501). The message names the role or grant that
 * would allow it. Exit 3.
 */
export class PermissionDeniedError extends RefusedError {}

/** Which principal a person-check was about: a database login or an API token's subject. */
export type PrincipalKind = 'login' | 'token';

/**
 * An approval by, or of a release submitted by, a principal that maps to no person (SQLSTATE
 * GFM01): approvals count persons, so genfill cannot tell who it is. The message quotes the SQL
 * the owner runs to map it. Exit 3.
 */
export class UnmappedPrincipalError extends RefusedError {
  constructor(
    message: string,
    readonly principal: string | null,
    readonly kind: PrincipalKind | null,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** This person already approved along the release's chain under another principal (SQLSTATE GFM02). Exit 3. */
export class PersonAlreadyApprovedError extends RefusedError {}

/** The approver is the release's submitter, as the same principal or another of theirs (SQLSTATE GFM03). Exit 3. */
export class SubmitterApprovalError extends RefusedError {}

/**
 * A login may not read a source's events or conflict images (SQLSTATE GFP01,
 * genfill.source_events / genfill.source_conflicts): it lacks SELECT on the source, row-level
 * security hides rows of it, or it is the API's login. The message names the grant. Exit 3.
 */
export class SourceReadRefusedError extends PermissionDeniedError {}

/**
 * A lock was not granted within lock_timeout (SQLSTATE 55P03): whoever held it was busy, and
 * trying again can help. Exit 3.
 */
export class LockNotAvailableError extends RefusedError {
  override readonly retryable = true;
}

/**
 * The projector's frontier does not yet contain every build watermark of the release
 * (SQLSTATE GFL01): the seal waits for it, then refuses. `partitions` is what the registry
 * listed (the partitions and their watermarks). Exit 3.
 */
export class ProjectorBehindError extends RefusedError {
  override readonly retryable = true;
  constructor(
    message: string,
    readonly partitions: unknown,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export type SwitchKind = 'cutover' | 'rollback';

/**
 * A cutover or rollback refused after it recorded the refusal (and undid its seal, when it
 * had one): callers rethrow it as it is — nothing is left to undo. `check` names what refused:
 * a precondition (a CutoverCheck name such as `manifest` or `approvals`, several joined by
 * `,`), or a step (`catch-up-root`, `recovered`, `holder-died`, `freeze`, `switch`). Exit 3.
 */
export class SwitchRefusedError extends RefusedError {
  constructor(
    readonly kind: SwitchKind,
    readonly check: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * A dependency the release declares changed after its content was pinned at plan (the pinned
 * hash no longer holds, or a captured event of it lies in (pin, S_cut]): the cutover refused
 * after undoing its seal, and the dataset is DEPENDENCY_STALE. `relations` names the tables.
 * Exit 3: rebuild with a new release once the dependency is as it should be.
 */
export class DependencyChangedError extends SwitchRefusedError {
  constructor(
    kind: SwitchKind,
    readonly relations: string[],
    message: string,
    options?: { cause?: unknown },
  ) {
    super(kind, 'dependencies', message, options);
  }
}

/**
 * A request a service runs could not be answered as its own error: the CLI stopped waiting for
 * it, or it failed with an error class this process does not know (`errorName`, the class the
 * service raised). A failure of a known class is rebuilt as that class (stored-errors.ts).
 */
export class RequestFailedError extends GenfillError {
  constructor(
    message: string,
    readonly exitCode: ExitCode,
    readonly request: string,
    readonly errorName: string | null = null,
  ) {
    super(message);
  }
}

/** Reconciliation found a difference. Exit 4. */
export class ReconciliationRequiredError extends GenfillError {
  readonly exitCode = 4 as const;
}

/** Configuration from the environment is malformed: a clear error at start. Exit 2. */
export class ConfigError extends InvalidInputError {}

export function exitCodeOf(err: unknown): ExitCode {
  return err instanceof GenfillError ? err.exitCode : 1;
}

/**
 * A lease or fencing token is no longer current (SQLSTATE GFS01): a newer claim took it, or
 * the work it fenced finished. Nothing was written. A partition's build names the partition
 * and attempt; a cutover's or rollback's lease names its record in `message`.
 */
export class StaleLeaseError extends RefusedError {
  constructor(
    readonly release: string | null,
    readonly partition: string | null,
    readonly attempt: number | null,
    options?: { message?: string; cause?: unknown },
  ) {
    super(
      partition !== null && attempt !== null
        ? `partition ${partition} of ${release ?? '?'}: attempt ${attempt} was fenced by a newer claim or a finished build; nothing was written`
        : (options?.message ?? `the lease of ${release ?? 'this work'} is no longer held: nothing was written`),
      options,
    );
  }
}

export const FINAL_FAILURE_REASONS = ['JOIN_FANOUT', 'DEPENDENCY_CHANGED', 'TRANSFORM_ERROR', 'WATERMARK_BELOW_FLOOR'] as const;
export type FinalFailureReason = (typeof FINAL_FAILURE_REASONS)[number];

/** A partition cannot be built by retrying: it fails with a reason and evidence. */
export class PartitionFailedError extends RefusedError {
  constructor(
    readonly release: string,
    readonly partition: string,
    readonly reason: FinalFailureReason | 'RETRIES_EXHAUSTED',
    readonly evidence: Record<string, unknown>,
    message: string,
  ) {
    super(`partition ${partition} of ${release} failed ${reason}: ${message}`);
  }
}

/**
 * Redis could not be reached. Redis holds only dispatch, so the registry is unaffected and
 * the step that needed Redis is safe to run again; exit 1.
 */
export class RedisUnavailableError extends GenfillError {
  readonly exitCode = 1 as const;
  override readonly retryable = true;
}

/**
 * Stored transform text did not pass the admission every service runs before it turns that
 * text into SQL (@genfill/transform admitTransform): it is not one plain SELECT, calls a function
 * that is not allowed, reads a relation its release did not declare, or its submitter may no
 * longer read what it reads (SQLSTATE GFT01 from genfill.submit_release and
 * genfill.transform_admissible). Nothing ran and nothing was written; retrying the same text
 * cannot help — submit a corrected release (or have the owner GRANT / allow-list what the
 * message names). Exit 3.
 */
export class TransformRefusedError extends RefusedError {
  constructor(
    readonly problems: Problem[],
    readonly digest: string | null = null,
    readonly release: string | null = null,
    options?: { cause?: unknown; message?: string },
  ) {
    const what = [digest && `transform ${digest}`, release && `of release ${release}`].filter(Boolean).join(' ') || 'the transform';
    super(
      options?.message ??
        `${what} was refused before it ran (nothing was executed or written): ` +
          problems.map((p) => (p.path ? `${p.path}: ${p.message}` : p.message)).join('; ') +
          '. Submit a corrected release; a function the owner trusts goes into genfill.transform_functions, a table the transform reads into dependencies',
      options,
    );
  }
}

/** A process that held (or holds) one of genfill's locks, as pg_locks listed it. */
export interface LockHolder {
  pid: number;
  mode: string;
  application: string | null;
}

/**
 * One of genfill's own locks (genfill.take_lock: a table in schema genfill_lock, SQLSTATE GFK01)
 * was not granted within its timeout. `lock` is its kind (`seal`, `ingress`, `plan`,
 * `dispatch`, `catchup`, `adopt`, `dataset`), `key` the dataset, release or source it guards,
 * `holders` who held it then. Only genfill's processes can hold these, so the holder is busy or
 * stuck: the message says which work holds the kind and how to end a stuck session. Nothing was
 * changed by the step that waited; running it again can help. Exit 3.
 */
export class LockWaitTimeoutError extends LockNotAvailableError {
  constructor(
    message: string,
    readonly lock: string,
    readonly key: string,
    readonly timeoutMs: number | null,
    readonly holders: LockHolder[],
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
