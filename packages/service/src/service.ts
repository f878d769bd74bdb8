// How every genfill service process starts and stops — planner, worker, reconciler, api (and
// the projector): one definition per service, run by its own entry point (`apps/<role>`) and
// by the CLI verb (`genfill <role>`) alike, so no service is wired twice.
//
//   parse flags → load the configuration (a malformed value: exit 2, before any connection)
//   → the service's own checks → metrics port with /metrics, /healthz, /readyz
//   → registry pool, schema checked → run(ctx) until it returns
//   SIGTERM/SIGINT abort ctx.signal: /readyz turns 503 ("draining"), the service stops taking
//   work, finishes what is in flight, returns → connections close → exit 0.
//   A failure → the error's exit code (1 internal, 2 invalid input, 3 refused).
//
// The drain has no timer of its own: the pod's terminationGracePeriodSeconds is the bound,
// sized in deploy/ to outlast the longest build (lock duration + statement timeout).
import { pathToFileURL } from 'node:url';
import { exitCodeOf, loadConfig, type Config, type ExitCode } from '@genfill/contracts';
import { createLogger, createMetricsRegistry, serveMetrics, type Logger, type MetricsServer, type Registry } from '@genfill/observability';
import { assertSchemaCurrent, createPool, type Db } from '@genfill/registry';
import { helpText, parseFlags, type FlagSpecs, type FlagValues } from './flags.ts';
import { Readiness } from './readiness.ts';

export interface ServiceContext<A> {
  args: A;
  config: Config;
  /** The process's logger (`service` = the service's name). */
  log: Logger;
  /** The process's one metrics registry, served on GENFILL_METRICS_PORT. */
  metrics: Registry;
  /** The registry pool, its schema checked current. Closed after run() returns. */
  db: Db;
  /** Aborted by SIGTERM/SIGINT (or ServeOptions.signal): take no new work, finish, return. */
  signal: AbortSignal;
  /** User-facing output (stdout; the CLI's output under `genfill`). */
  out(text: string): void;
}

export interface ServiceDefinition<F extends FlagSpecs> {
  /** The role: `genfill <name>`, `apps/<name>`, the logger's and the metrics' `service` label. */
  name: string;
  /** One sentence for --help and the CLI's list of verbs. */
  summary: string;
  flags: F;
  /** The registry pool the service works with (and /readyz checks): its size, and whether it takes the fleet's lock and idle-in-transaction timeouts. */
  pool(args: FlagValues<F>): { max: number; fleet?: boolean };
  /** Checks of flags against configuration that must refuse before anything connects (throw InvalidInputError or ConfigError). */
  check?(args: FlagValues<F>, config: Config): void;
  /** The service itself: return once ctx.signal is aborted and the work in flight is done (or at once for one-shot flags such as --once). */
  run(ctx: ServiceContext<FlagValues<F>>): Promise<void>;
}

export interface ServeOptions {
  env?: NodeJS.ProcessEnv;
  out?: (text: string) => void;
  /** Stop as SIGTERM would (tests, embedding). SIGTERM and SIGINT always do. */
  signal?: AbortSignal;
}

export interface Service {
  readonly name: string;
  readonly summary: string;
  /** Run the service; throws what made it fail (the CLI maps that to an exit code). */
  serve(argv: string[], opts?: ServeOptions): Promise<void>;
  /** Run the service as a process entry point: the failure is logged and becomes the exit code. */
  main(argv?: string[], opts?: ServeOptions): Promise<ExitCode>;
}

const stdout = (text: string) => void process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);

export function defineService<F extends FlagSpecs>(def: ServiceDefinition<F>): Service {
  const serve = async (argv: string[], opts: ServeOptions = {}): Promise<void> => {
    const out = opts.out ?? stdout;
    const parsed = parseFlags(def.flags, argv);
    if (parsed.help) {
      out(helpText(`genfill ${def.name}`, def.summary, def.flags));
      return;
    }
    const args = parsed.values;
    const config = loadConfig(opts.env ?? process.env);
    def.check?.(args, config);
    const log = createLogger(def.name, config.GENFILL_LOG_LEVEL);
    const metrics = createMetricsRegistry(def.name);
    const stopping = new AbortController();
    const readiness = new Readiness(config, log);
    const stop = (why: string) => {
      if (stopping.signal.aborted) {
        log.warn({ signal: why }, 'already stopping: the work in flight is finishing (SIGKILL ends it at once; a fenced commit writes nothing)');
        return;
      }
      readiness.draining();
      log.info({ signal: why }, 'stopping: no new work; the work in flight finishes');
      stopping.abort();
    };
    const onSignal = (signal: NodeJS.Signals) => stop(signal);
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
    const onAbort = () => stop('abort');
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    if (opts.signal?.aborted) onAbort();

    const pool = def.pool(args);
    const db = createPool(config, `genfill-${def.name}`, pool.max, { fleet: pool.fleet });
    let server: MetricsServer | undefined;
    try {
      if (config.GENFILL_METRICS_PORT !== undefined) {
        server = await serveMetrics(metrics, { port: config.GENFILL_METRICS_PORT, health: { ready: () => readiness.check(db) } });
        log.info({ metricsPort: server.port }, 'serving /metrics, /healthz and /readyz');
      }
      await assertSchemaCurrent(db);
      readiness.started();
      await def.run({ args, config, log, metrics, db, signal: stopping.signal, out });
    } finally {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
      opts.signal?.removeEventListener('abort', onAbort);
      await server?.close();
      await readiness.close();
      await db.end();
    }
  };

  return {
    name: def.name,
    summary: def.summary,
    serve,
    main: async (argv = process.argv.slice(2), opts = {}) => {
      try {
        await serve(argv, opts);
        return 0;
      } catch (err) {
        createLogger(def.name).fatal({ err }, `${def.name} failed`);
        return exitCodeOf(err);
      }
    },
  };
}

/** Resolves once `signal` is aborted: a service's "run until told to stop". */
export function untilStopped(signal: AbortSignal): Promise<void> {
  return signal.aborted ? Promise.resolve() : new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

/**
 * The tail of every `apps/<role>/src/main.ts`: when that file is the process's entry point,
 * run the service and exit with its code.
 */
export async function runIfMain(moduleUrl: string, service: Service): Promise<void> {
  if (process.argv[1] && moduleUrl === pathToFileURL(process.argv[1]).href) process.exitCode = await service.main();
}
