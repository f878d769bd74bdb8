// The API service's entry point (two replicas behind the Service in deploy/): status,
// operator actions, pinned reads, ingress, /metrics and Bull Board at /admin/queues on
// GENFILL_API_PORT (or --port). SIGTERM: /readyz turns 503, the server stops accepting
// requests and closes its connections, exit 0.
//   node --import tsx apps/api/src/main.ts [--port n]
//   genfill api …   (the same service)
import { startApi } from '@genfill/api';
import { defineService, flag, runIfMain, untilStopped } from '@genfill/service';

export const api = defineService({
  name: 'api',
  summary:
    'the HTTP API: /healthz, /metrics, /releases (status, pause, resume, cancel) and Bull Board at /admin/queues, ' +
    'behind GENFILL_API_TOKENS (bearer tokens, or a login cookie for browsers); SIGTERM stops it',
  flags: {
    port: flag.port('listen here instead of GENFILL_API_PORT (default 3000)'),
  },
  // This pool only answers /readyz and the schema check: the API makes its own two pools (reads
  // and verbs; ingest), each connection with the API's statement and idle timeouts.
  pool: () => ({ max: 1 }),
  async run({ args, config, log, metrics, signal, out }) {
    const server = await startApi({ config, log, registry: metrics, port: args.port });
    out(`genfill api listening on http://localhost:${server.port} — Bull Board at /admin/queues (log in at /login)`);
    await untilStopped(signal);
    await server.close();
    log.info('api stopped');
  },
});

export const start = (argv?: string[]) => api.main(argv);

await runIfMain(import.meta.url, api);
