// The reconciler service: every interval, reconcile each release that is BUILT (once per
// round, one at a time: a reconciliation already reads with two connections). A release
// that fails moves to RECONCILIATION_REQUIRED and is not picked again until a repair
// rebuilds it to BUILT; one that passes moves to RECONCILED. Errors are logged, never fatal.
// Its findings are stored with the verdict in the registry, so nothing is written on the
// machine it runs on: `genfill reconcile … --findings-out` or `genfill repair --reconciliation`
// reach them from anywhere.
//
// Between rounds it executes the people's reconcile requests (migration 0006) within a second.
// After each round's reconciliations it keeps house (housekeeping.ts, migration 0018): retires
// old generations past their rollback window and reader leases, prunes the change log below
// its horizon, and cleans up the queues of releases past their rollback window.
// And it runs the drift check of every live dataset on its schedule (drift-schedule.ts,
// GENFILL_DRIFT_CHECK_EVERY): after each round, and between rounds each time it looks for
// requests (every second), so a cutover's new generation is checked within about a second of
// the switch, not a reconciler interval later. At most one check at a time, paced.
// runReconcilerService is the foreground loop `genfill reconciler` runs, shaped like the
// planner's runPlannerService (once, an abort signal that stops it after the reconciliation in
// progress; apps/reconciler serves its metrics and probes); startReconcilerService is the same
// round on a timer, for callers that embed it.
import { RefusedError, type Config } from '@genfill/contracts';
import type { Logger, Registry } from '@genfill/observability';
import { createServiceRedis, type Redis } from '@genfill/queue';
import { HorizonHistory, housekeepingMetrics, type HousekeepingOptions, housekeepingRound, type HousekeepingResult } from '@genfill/retention';
import { assertSchemaCurrent, createPool, serveRequests, waitServingRequests, type Db, type ServiceHandlers } from '@genfill/registry';
import { DEFAULT_DRIFT_CHECK_EVERY_MS, driftMetrics, type DriftRoundResult, DriftSchedule } from './drift-schedule.ts';
import { reconcileIncremental } from './incremental.ts';
import { reconcile, type ReconcileOptions, type ReconcileResult } from './reconcile.ts';

/** Options of every reconciliation the service runs (no findingsOut: one file for every release makes no sense). */
export type ServiceReconcileOptions = Omit<ReconcileOptions, 'log' | 'findingsOut'>;

export interface RoundResult {
  at: string;
  reconciled: ReconcileResult[];
  failed: { release: string; error: string }[];
  /** Retention, pruning and cleanup after the reconciliations (null when switched off). */
  housekeeping?: HousekeepingResult | null;
  /** Drift checks run after the round (absent when none was due or the schedule is off). */
  drift?: DriftRoundResult;
}

async function builtReleases(db: Db): Promise<string[]> {
  const { rows } = await db.query<{ id: string }>(`SELECT id FROM genfill.releases WHERE state = 'BUILT' ORDER BY state_changed_at, id`);
  return rows.map((r) => r.id);
}

/** One round: every BUILT release, one after the other; `stop()` true ends it between two. */
export async function reconcilingRound(db: Db, log: Logger, opts: { reconcile?: ServiceReconcileOptions; stop?: () => boolean } = {}): Promise<RoundResult> {
  const out: RoundResult = { at: new Date().toISOString(), reconciled: [], failed: [] };
  for (const release of await builtReleases(db)) {
    if (opts.stop?.()) break;
    try {
      const r = await reconcile(db, release, { ...opts.reconcile, log });
      out.reconciled.push(r);
      log.info({ release, reconciliation: r.id, state: r.state, findings: r.findings.count, path: r.findings.path }, 'release reconciled');
    } catch (err) {
      // A lost race (the release moved meanwhile) is normal; the next round looks again.
      const level = err instanceof RefusedError ? 'info' : 'error';
      log[level]({ release, err: (err as Error).message }, 'reconciliation did not complete');
      out.failed.push({ release, error: (err as Error).message });
    }
  }
  return out;
}

/**
 * What the reconciler executes for a person: `genfill reconcile` as a request. The findings
 * go to the registry only; the requesting CLI exports them on its own machine.
 */
export function reconcilerRequestHandlers(options: ServiceReconcileOptions = {}): ServiceHandlers<'reconciler'> {
  const { findingsDir: _none, ...rest } = options;
  return {
    reconcile: async (db, req) => ({
      result: req.args.incremental ? await reconcileIncremental(db, req.release) : await reconcile(db, req.release, rest),
    }),
  };
}

export interface ReconcilerRunOptions {
  config: Config;
  log: Logger;
  intervalSeconds: number;
  /** One round, then return (tests, cron). */
  once?: boolean;
  /** Aborting stops the service after the reconciliation in progress. */
  signal?: AbortSignal;
  /** A registry pool to use (the CLI's); otherwise the service makes and closes its own. */
  db?: Db;
  /**
   * The process's metrics registry, for the reconciler's own metrics (housekeeping.ts: the log
   * horizon, retained generations, …). The service helper that runs this (@genfill/service,
   * apps/reconciler) serves it on GENFILL_METRICS_PORT with /healthz and /readyz.
   */
  registry?: Registry;
  reconcile?: ServiceReconcileOptions;
  /** Retention, pruning and cleanup options; false switches housekeeping off. */
  housekeeping?: Omit<HousekeepingOptions, 'history' | 'dispatcher' | 'metrics' | 'ownerUrl'> | false;
  /** The drift check's schedule (default config.GENFILL_DRIFT_CHECK_EVERY); false switches it off. */
  drift?: { everyMs: number } | false;
}

export interface ReconcilerRunResult {
  rounds: number;
  last: RoundResult | null;
}

export async function runReconcilerService(opts: ReconcilerRunOptions): Promise<ReconcilerRunResult> {
  const { config, log } = opts;
  // A reconciliation reads on two connections side by side; one more for the round's own queries.
  const db = opts.db ?? createPool(config, 'genfill-reconciler', 3);
  const out: ReconcilerRunResult = { rounds: 0, last: null };
  let redis: Redis | undefined;
  try {
    await assertSchemaCurrent(db);
    const intervalMs = Math.max(1, opts.intervalSeconds * 1000);
    log.info({ intervalSeconds: opts.intervalSeconds }, 'reconciler started');
    const handlers = reconcilerRequestHandlers(opts.reconcile);
    const worker = `reconciler:${process.pid}`;
    const serve = () => serveRequests(db, { handlers, worker, log, signal: opts.signal }).catch((err) => log.error({ err }, 'serving requests failed; trying again'));
    const house = opts.housekeeping === false ? null : opts.housekeeping ?? {};
    // Cleanup's Redis (fail-fast commands): an unreachable one stops only cleanup.
    if (house) redis = createServiceRedis(config.REDIS_URL, log);
    const keep: HousekeepingOptions | null = house && {
      ...house,
      ownerUrl: config.GENFILL_OWNER_DATABASE_URL ?? null,
      history: new HorizonHistory(),
      dispatcher: redis ? { redis, prefix: config.GENFILL_QUEUE_PREFIX } : null,
      ...(opts.registry ? { metrics: housekeepingMetrics(opts.registry) } : {}),
    };
    const schedule =
      opts.drift === false
        ? null
        : new DriftSchedule({
            everyMs: opts.drift?.everyMs ?? config.GENFILL_DRIFT_CHECK_EVERY ?? DEFAULT_DRIFT_CHECK_EVERY_MS,
            ...(opts.registry ? { metrics: driftMetrics(opts.registry) } : {}),
          });
    const driftLog = log.child({ step: 'drift' });
    const drift = async (): Promise<DriftRoundResult | undefined> => {
      if (!schedule || opts.signal?.aborted) return undefined;
      return schedule.round(db, driftLog).catch((err) => {
        driftLog.error({ err: (err as Error).message }, 'drift schedule failed; trying again');
        return undefined;
      });
    };
    const between = async () => {
      await serve();
      const d = await drift();
      if (d && out.last && (d.checked.length || d.failed.length)) out.last.drift = d;
    };
    while (!opts.signal?.aborted) {
      await serve();
      out.last = await reconcilingRound(db, log, { reconcile: opts.reconcile, stop: () => opts.signal?.aborted ?? false });
      if (keep && !opts.signal?.aborted) out.last.housekeeping = await housekeepingRound(db, log.child({ step: 'housekeeping' }), keep);
      const d = await drift();
      if (d) out.last.drift = d;
      out.rounds += 1;
      if (opts.once || opts.signal?.aborted) break;
      try {
        await waitServingRequests(between, intervalMs, opts.signal);
      } catch {
        break; // aborted while waiting: no reconciliation is in progress
      }
    }
    log.info({ rounds: out.rounds }, 'reconciler stopped');
    return out;
  } finally {
    redis?.disconnect();
    if (!opts.db) await db.end();
  }
}

export interface ReconcilerServiceOptions {
  db: Db;
  log: Logger;
  intervalMs: number;
  /** Passed to every reconciliation (findingsDir, connections, …). */
  reconcile?: ServiceReconcileOptions;
  /** Retention, pruning and cleanup after each round (none when absent). */
  housekeeping?: HousekeepingOptions;
  /** The drift check's schedule, run after each round (none when absent). */
  drift?: DriftSchedule;
}

export interface ReconcilerService {
  /** Run one round now (also what the timer runs). */
  runOnce(): Promise<RoundResult>;
  close(): Promise<void>;
}

export function startReconcilerService(o: ReconcilerServiceOptions): ReconcilerService {
  const log = o.log.child({ service: 'reconciler' });
  let closing = false;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<RoundResult> | undefined;

  const runOnce = (): Promise<RoundResult> => {
    // One round at a time: the timer and a caller never reconcile the same release twice at once.
    running ??= reconcilingRound(o.db, log, { reconcile: o.reconcile, stop: () => closing })
      .then(async (r) => (o.housekeeping && !closing ? { ...r, housekeeping: await housekeepingRound(o.db, log, o.housekeeping) } : r))
      .then(async (r) => (o.drift && !closing ? { ...r, drift: await o.drift.round(o.db, log.child({ step: 'drift' })) } : r))
      .finally(() => (running = undefined));
    return running;
  };

  const schedule = () => {
    if (closing) return;
    timer = setTimeout(() => {
      runOnce()
        .catch((err) => log.error({ err: (err as Error).message }, 'reconciler round failed'))
        .finally(schedule);
    }, o.intervalMs);
  };
  schedule();

  return {
    runOnce,
    close: async () => {
      closing = true;
      if (timer) clearTimeout(timer);
      await running?.catch(() => undefined);
    },
  };
}
