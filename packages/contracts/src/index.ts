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
  NotFoundError,
  PartitionFailedError,
  type Problem,
  RangeOverlapError,
  ReconciliationRequiredError,
  RedisUnavailableError,
  RefusedError,
  RequestFailedError,
  ReleaseConflictError,
  SchemaVersionError,
  StaleLeaseError,
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
export { type LoadedRelease, loadRelease, releaseSchema, type ReleaseSpec, sha256 } from './release.ts';
export { type Query, quoteIdent, quoteQualified } from './sql.ts';
export { canTransition, OPEN_STATES, RELEASE_STATES, type ReleaseState, TRANSITIONS } from './states.ts';
export { ambiguousZoneProblem, wallClockBounds, type WallClockBounds } from './zone.ts';
