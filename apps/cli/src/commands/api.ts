// `genfill api`: the API service of apps/api, started as every service is.
import type { Command } from 'commander';
import { api } from '@genfill/api-service';
import { registerService, type Run } from './service-verb.ts';

export const register = (program: Command, run: Run): void => registerService(program, run, api);
