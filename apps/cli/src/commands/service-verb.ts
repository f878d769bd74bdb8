// The CLI's service verbs (`genfill planner | worker | reconciler | api`) hand their arguments
// to the very service definition their apps/<role> entry point runs (@genfill/service): one
// parser, one wiring, one drain per service. A failure is thrown to the CLI's one mapping of
// errors to exit codes. Adding a service is `registerService(program, run, itsService)`.
import type { Command } from 'commander';
import type { Service } from '@genfill/service';
import type { Context } from '../context.ts';

export type Run = (fn: (ctx: Context) => Promise<void>) => Promise<void>;

export function registerService(program: Command, run: Run, service: Service): void {
  program
    .command(service.name)
    .description(service.summary)
    // The service parses its own flags (and --help) from its definition.
    .helpOption(false)
    .allowUnknownOption()
    .allowExcessArguments()
    .action((_opts: unknown, cmd: Command) => run((ctx) => service.serve(cmd.args, { env: ctx.io.env, out: (text) => ctx.io.out(text) })));
}
