// The API service's entry point: parse configuration, wire the logger, start the server in
// @genfill/api, stop on SIGTERM/SIGINT.
//   node --import tsx apps/api/src/main.ts
import { pathToFileURL } from 'node:url';
import { exitCodeOf, loadConfig } from '@genfill/contracts';
import { startApi } from '@genfill/api';
import { createLogger } from '@genfill/observability';

export async function start(env: NodeJS.ProcessEnv = process.env): Promise<number> {
  let log = createLogger('api');
  try {
    const config = loadConfig(env);
    log = createLogger('api', config.GENFILL_LOG_LEVEL);
    const server = await startApi({ config, log });
    const signal = await new Promise<NodeJS.Signals>((resolve) => {
      process.once('SIGTERM', () => resolve('SIGTERM'));
      process.once('SIGINT', () => resolve('SIGINT'));
    });
    log.info({ signal }, 'stopping');
    await server.close();
    return 0;
  } catch (err) {
    log.fatal({ err }, 'api failed');
    return exitCodeOf(err);
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await start();
}
