export { flag, type Flag, type FlagSpecs, type FlagValues, helpText, parseFlags } from './flags.ts';
export { defineService, runIfMain, type ServeOptions, type Service, type ServiceContext, type ServiceDefinition, untilStopped } from './service.ts';
export { dependencyChecks, timedCheck } from './readiness.ts';
