// One pino logger per process; one child per unit of work with the fixed scope keys.
import { pino, type Logger, type LoggerOptions } from 'pino';

export type { Logger };

export interface Scope {
  service?: string;
  release?: string;
  dataset?: string;
  generation?: string;
  partition?: string;
  attempt?: number;
  jobId?: string;
}

export function createLogger(service: string, level: LoggerOptions['level'] = 'info', destination?: NodeJS.WritableStream): Logger {
  const options: LoggerOptions = { level, base: { service }, timestamp: pino.stdTimeFunctions.isoTime };
  return destination ? pino(options, destination as pino.DestinationStream) : pino(options, pino.destination(2));
}

export function scoped(logger: Logger, scope: Scope): Logger {
  return logger.child(scope);
}
