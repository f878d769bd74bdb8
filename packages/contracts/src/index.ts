export { type ApiToken, type Config, loadConfig } from './config.ts';
export {
  bareNumberMeans,
  DURATION_GRAMMAR,
  type DurationBounds,
  durationForms,
  durationLiteral,
  type DurationUnit,
  InvalidDurationError,
  parseDuration,
} from './duration.ts';
export {
  CasConflictError,
  ConfigError,
  type ExitCode,
  exitCodeOf,
  GenerationGoneError,
  GenfillError,
  IngressBusyError,
  type IngressConflict,
  IngressConflictError,
  InvalidInputError,
  LockNotAvailableError,
  NotFoundError,
  PartitionFailedError,
  PermissionDeniedError,
  type Problem,
  ProjectorBehindError,
  RangeOverlapError,
  ReconciliationRequiredError,
  RedisUnavailableError,
  RefusedError,
  RequestFailedError,
  ReleaseConflictError,
  SchemaVersionError,
  SourceReadRefusedError,
  StaleLeaseError,
  type SwitchKind,
  SwitchRefusedError,
  TransformRefusedError,
  UnknownDatasetError,
} from './errors.ts';
export {
  CARRY_MAX,
  CARRY_MIN,
  computeGrid,
  coverageProof,
  type CoverageProof,
  type GridPartition,
  type GridSteps,
  isCarryMax,
  isCarryMin,
  plannedGrid,
} from './grid.ts';
export {
  DEFAULT_RETRY_AFTER_SECONDS,
  errorFromPg,
  isPgError,
  type MappedSqlstate,
  PG_ERRORS,
  type PgError,
  type PgErrorContext,
  pgErrorCode,
  SQLSTATE,
  type Sqlstate,
} from './pg-errors.ts';
export { type LoadedRelease, loadRelease, releaseSchema, type ReleaseSpec, sha256 } from './release.ts';
export {
  isRequestKind,
  type KindsOf,
  parseRequestArgs,
  type RequestArgs,
  requestArgsSchema,
  type RequestKind,
  REQUEST_KIND_NAMES,
  REQUEST_KINDS,
  REQUEST_SERVICES,
  type RequestService,
  serviceOf,
} from './requests.ts';
export { type Query, quoteIdent, quoteQualified } from './sql.ts';
export { ERROR_CLASSES, type ErrorClassName, fromStoredError, type StoredError, toStoredError } from './stored-errors.ts';
export { canTransition, OPEN_STATES, RELEASE_STATES, type ReleaseState, TRANSITIONS } from './states.ts';
export { ambiguousZoneProblem, wallClockBounds, type WallClockBounds } from './zone.ts';
