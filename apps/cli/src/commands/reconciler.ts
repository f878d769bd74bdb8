// `genfill reconciler`: the reconciler service of apps/reconciler, started as every service is.
import type { Command } from 'commander';
import { reconciler } from '@genfill/reconciler-service';
import { registerService, type Run } from './service-verb.ts';

export const register = (program: Command, run: Run): void => registerService(program, run, reconciler);
