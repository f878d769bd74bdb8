// genfill: every operator action. Thin: parse, wire, run, map errors to exit codes.
import { Command, CommanderError } from 'commander';
import type { ExitCode } from '@genfill/contracts';
import { Context } from './context.ts';
import { report } from './exit.ts';
import { processIo, type Io } from './io.ts';
import * as apiCmd from './commands/api.ts';
import * as captureCmd from './commands/capture.ts';
import * as controlCmd from './commands/control.ts';
import * as datasetCmd from './commands/dataset.ts';
import * as demoCmd from './commands/demo.ts';
import * as deployCmd from './commands/deploy.ts';
import * as diffCmd from './commands/diff.ts';
import * as ingestCmd from './commands/ingest.ts';
import * as migrateCmd from './commands/migrate.ts';
import * as planCmd from './commands/plan.ts';
import * as plannerCmd from './commands/planner.ts';
import * as projectorCmd from './commands/projector.ts';
import * as readCmd from './commands/read.ts';
import * as reconcileCmd from './commands/reconcile.ts';
import * as reconcilerCmd from './commands/reconciler.ts';
import * as releaseCmd from './commands/release.ts';
import * as repairCmd from './commands/repair.ts';
import * as statusCmd from './commands/status.ts';
import * as workerCmd from './commands/worker.ts';

export async function main(argv: string[], io: Io = processIo): Promise<ExitCode> {
  const ctx = new Context(io);
  let code: ExitCode = 0;
  const run = async (fn: (ctx: Context) => Promise<void>): Promise<void> => {
    try {
      await fn(ctx);
    } catch (err) {
      code = report(io, err);
    }
  };

  const program = new Command('genfill')
    .description('safe, provable historical backfills of PostgreSQL datasets while live traffic continues')
    .showHelpAfterError()
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.out(s.trimEnd()), writeErr: (s) => io.err(s.trimEnd()) })
    .addHelpText(
      'after',
      '\nExit codes: 0 ok, 1 internal error, 2 invalid input, 3 refused (a precondition or CAS lost), 4 reconciliation required.\n' +
        'Configuration comes from the environment: DATABASE_URL, REDIS_URL, GENFILL_* (see README).',
    );
  for (const cmd of [migrateCmd, releaseCmd, planCmd, statusCmd, controlCmd, plannerCmd, datasetCmd, demoCmd, workerCmd, repairCmd, reconcileCmd, reconcilerCmd, apiCmd, ingestCmd, captureCmd, projectorCmd, readCmd, diffCmd, deployCmd]) cmd.register(program, run);

  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version exit 0; a usage error is invalid input.
      code = err.exitCode === 0 ? 0 : 2;
    } else {
      code = report(io, err);
    }
  } finally {
    await ctx.close();
  }
  return code;
}
