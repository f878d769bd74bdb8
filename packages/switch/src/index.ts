export { CATCHUP_DEFAULTS, type CatchupRound, catchupCandidates, catchupRound, type CatchupStatements, catchupStatements, lockCatchup, STAGED_KEYS } from './catchup.ts';
export { CUTOVER_DEFAULTS, type CutoverCheck, cutoverChecks, type CutoverOptions, cutoverRelease, type CutoverResult, type CutoverStep } from './cutover.ts';
export { ROLLBACK_DEFAULTS, type RollbackOptions, rollbackRelease, type RollbackResult, type RollbackStep } from './rollback.ts';
export { type SealOptions, sealRelease, type SealResult, unsealRelease, type UnsealResult } from './seal.ts';
export { catchupCandidatesRound, recoverCutovers, switchExtension, switchRequestHandlers, type SwitchServiceOptions } from './service.ts';
