// The planner service's entry point (one Deployment replica is enough; two are harmless):
// parse configuration, wire the logger, handle signals, run the loop in @genfill/planner.
//   node --import tsx apps/planner/src/main.ts [--interval <seconds>] [--once]
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { repairRequest } from '@genfill/builder';
import { exitCodeOf, InvalidInputError, loadConfig } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { runPlannerService, stopOnSignals } from '@genfill/planner';

export async function start(argv: string[] = process.argv.slice(2), env: NodeJS.ProcessEnv = process.env): Promise<number> {
  let log = createLogger('planner');
  try {
    let values: { interval: string; once: boolean };
    try {
      values = parseArgs({ args: argv, options: { interval: { type: 'string', default: '10' }, once: { type: 'boolean', default: false } } }).values;
    } catch (err) {
      throw new InvalidInputError((err as Error).message);
    }
    const intervalSeconds = Number(values.interval);
    if (!(intervalSeconds > 0)) throw new InvalidInputError([{ path: '--interval', message: `must be a positive number of seconds, got ${values.interval}` }]);
    const config = loadConfig(env);
    log = createLogger('planner', config.GENFILL_LOG_LEVEL);
    const controller = new AbortController();
    const unhook = stopOnSignals(controller, log);
    try {
      await runPlannerService({ config, log, intervalSeconds, once: values.once, signal: controller.signal, requestHandlers: { repair: repairRequest } });
    } finally {
      unhook();
    }
    return 0;
  } catch (err) {
    log.fatal({ err }, 'planner failed');
    return exitCodeOf(err);
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await start();
}
