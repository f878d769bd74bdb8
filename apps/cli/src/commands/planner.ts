// `genfill planner`: the planner service of apps/planner, started as every service is.
import { InvalidArgumentError, type Command } from 'commander';
import { planner } from '@genfill/planner-service';
import { registerService, type Run } from './service-verb.ts';

/** A positive number of seconds for the CLI's own --interval options (status --watch). */
export function parseSeconds(value: string): number {
  const n = Number(value);
  if (!/^\d+(\.\d+)?$/.test(value) || !(n > 0)) throw new InvalidArgumentError('expected a positive number of seconds');
  return n;
}

export const register = (program: Command, run: Run): void => registerService(program, run, planner);
