// `genfill worker`: the worker service of apps/worker, started as every service is.
import type { Command } from 'commander';
import { worker } from '@genfill/worker-service';
import { registerService, type Run } from './service-verb.ts';

export const register = (program: Command, run: Run): void => registerService(program, run, worker);
