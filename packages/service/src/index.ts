export { flag, type Flag, type FlagSpecs, type FlagValues } from './flags.ts';
export { defineService, runIfMain, type ServeOptions, type Service, type ServiceContext, type ServiceDefinition, untilStopped } from './service.ts';
export { dependencyChecks } from './readiness.ts';
