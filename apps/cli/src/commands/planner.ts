// `genfill planner`: the planner service of apps/planner, started as every service is.
import type { Command } from 'commander';
import { planner } from '@genfill/planner-service';
import { registerService, type Run } from './service-verb.ts';

export const register = (program: Command, run: Run): void => registerService(program, run, planner);
