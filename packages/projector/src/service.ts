// `genfill projector`: the live writer of every dataset with an active generation and a
// frontier (SPEC "Parts"). Per dataset, one holder under a lease with a token
// (genfill.projector_acquire): a second process waits, and takes over — with a new token that
// fences the old holder's late commit — once the lease expires, so a SIGKILLed holder is
// replaced within one lease period. The holder runs batches (batch.ts) back to back while
// events wait and polls every `pollMs` when none do; empty batches still advance the frontier,
// so a quiet dataset never stalls a seal. What the service does besides the live writer — the
// seal, unseal, catch-up, cutover and rollback requests and the catch-up rounds of built
// candidates, all of @genfill/switch — is handed in by the app as a ProjectorExtension, so the
// live writer never depends on the switch (or on the verifier the switch calls).
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Config } from '@genfill/contracts';
import { createMetricsRegistry, serveMetrics, type Logger, type MetricsServer, type Registry } from '@genfill/observability';
import { assertSchemaCurrent, createPool, serveRequests, type Db, type RequestHandlers, type ServiceHandlers } from '@genfill/registry';
import { runBatch, type BatchOutcome, type Lease } from './batch.ts';
import { projectableDatasets } from './dataset.ts';
import { projectorStatus } from './lag.ts';
import { projectorMetrics, type ProjectorMetrics } from './metrics.ts';

export const PROJECTOR_DEFAULTS = {
  pollMs: 100,
  leaseMs: 10_000,
  maxBatchEvents: 50_000,
  statementTimeoutMs: 5_000,
  discoverMs: 2_000,
} as const;

export interface ProjectorOptions {
  db: Db;
  log: Logger;
  /** Serve only these datasets; default every one with an active generation and a frontier. */
  datasets?: string[];
  id?: string;
  pollMs?: number;
  leaseMs?: number;
  maxBatchEvents?: number;
  statementTimeoutMs?: number;
  discoverMs?: number;
  metrics?: ProjectorMetrics;
  signal?: AbortSignal;
  /** Called after every batch (tests, the demo's figures). */
  onBatch?: (outcome: BatchOutcome) => void;
}

function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return sleep(ms, undefined, { signal }).catch(() => undefined);
}

async function recordStop(db: Db, o: Extract<BatchOutcome, { kind: 'poison' }>): Promise<void> {
  await db.query(
    `INSERT INTO genfill.projector_stops (dataset, generation, key, event_id, revision, error) VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (dataset) DO NOTHING`,
    [o.dataset, o.generation, JSON.stringify(o.key), o.eventId, o.revision, o.error.slice(0, 2000)],
  );
}

/**
 * Hold the lease of `dataset` and run batches until `signal` aborts (or, with `untilIdle`, until
 * a batch finds nothing to consume). Returns the outcomes' totals.
 */
export async function projectDataset(
  dataset: string,
  o: ProjectorOptions & { untilIdle?: boolean },
): Promise<{ batches: number; events: number; applied: number; fenced: number; last: BatchOutcome | null }> {
  const id = o.id ?? `${hostname()}:${process.pid}`;
  const pollMs = o.pollMs ?? PROJECTOR_DEFAULTS.pollMs;
  const leaseMs = o.leaseMs ?? PROJECTOR_DEFAULTS.leaseMs;
  const statementTimeoutMs = Math.min(o.statementTimeoutMs ?? PROJECTOR_DEFAULTS.statementTimeoutMs, Math.floor(leaseMs / 2));
  let maxEvents = o.maxBatchEvents ?? PROJECTOR_DEFAULTS.maxBatchEvents;
  const totals = { batches: 0, events: 0, applied: 0, fenced: 0, last: null as BatchOutcome | null };
  let lease: Lease | null = null;
  let renewedAt = 0;
  let lagAt = 0;
  try {
    while (!o.signal?.aborted) {
      if (!lease) {
        const { rows } = await o.db.query<{ t: string | null }>('SELECT genfill.projector_acquire($1, $2, $3)::text AS t', [dataset, id, leaseMs]);
        if (!rows[0]!.t) {
          o.metrics?.holding(dataset, false);
          if (o.untilIdle) throw new Error(`the projector lease of ${dataset} is held by another process`);
          await abortableSleep(Math.max(50, Math.floor(leaseMs / 4)), o.signal);
          continue;
        }
        lease = { holder: id, token: BigInt(rows[0]!.t) };
        renewedAt = performance.now();
        o.metrics?.holding(dataset, true);
        o.log.info({ dataset, token: rows[0]!.t }, 'projector lease taken');
      } else if (performance.now() - renewedAt > leaseMs / 3) {
        const { rows } = await o.db.query<{ ok: boolean }>('SELECT genfill.projector_renew($1, $2, $3, $4) AS ok', [dataset, id, lease.token.toString(), leaseMs]);
        if (!rows[0]!.ok) {
          o.log.warn({ dataset }, 'projector lease lost (expired and taken over): waiting to take it again');
          o.metrics?.holding(dataset, false);
          lease = null;
          continue;
        }
        renewedAt = performance.now();
      }
      const { rows: stop } = await o.db.query<{ key: unknown; error: string }>('SELECT key, error FROM genfill.projector_stops WHERE dataset = $1', [dataset]);
      if (stop[0]) {
        o.metrics?.stopped(dataset, true);
        if (o.untilIdle) return totals;
        await abortableSleep(Math.max(pollMs * 10, 500), o.signal);
        continue;
      }
      o.metrics?.stopped(dataset, false);

      const out = await runBatch(o.db, dataset, { lease, maxEvents, statementTimeoutMs });
      totals.last = out;
      o.onBatch?.(out);
      let idle = false;
      switch (out.kind) {
        case 'applied': {
          const c = out.counts;
          const applied = c.upserted + c.flagged + c.remembered;
          totals.batches += 1;
          totals.events += c.events;
          totals.applied += applied;
          o.metrics?.batch(dataset, c.events, applied, out.ms / 1000);
          if (out.dependenciesChanged.length > 0) {
            o.log.warn({ dataset, relations: out.dependenciesChanged, releases: out.staleReleases }, 'a dependency changed: dataset marked DEPENDENCY_STALE');
          }
          idle = c.events === 0 && !out.capped;
          break;
        }
        case 'fenced':
          totals.fenced += 1;
          o.metrics?.fenced(dataset);
          o.log.debug({ dataset, reason: out.reason }, 'batch fenced: nothing written');
          idle = true;
          break;
        case 'sealed':
          if (o.untilIdle) return totals;
          idle = true;
          break;
        case 'timeout':
          maxEvents = Math.max(100, Math.floor(maxEvents / 2));
          o.log.warn({ dataset, maxEvents }, 'batch hit its statement_timeout: smaller batches from now on');
          break;
        case 'poison':
          await recordStop(o.db, out);
          o.metrics?.stopped(dataset, true);
          o.log.error(
            { dataset, key: out.key, eventId: out.eventId, revision: out.revision, error: out.error, alert: 'PROJECTOR_POISON' },
            `poison event: the projector of ${dataset} stopped at key ${JSON.stringify(out.key)}; fix the transform or quarantine the key: genfill quarantine ${dataset} --key '${JSON.stringify(out.key)}' --reason …`,
          );
          if (o.untilIdle) return totals;
          break;
      }
      if (o.metrics && performance.now() - lagAt > 1000) {
        lagAt = performance.now();
        const s = await projectorStatus(o.db, dataset).catch(() => null);
        if (s) {
          o.metrics.lag(dataset, s.pendingEvents, s.lagSeconds);
          o.metrics.sealHeld(dataset, s.seal?.heldSeconds ?? 0);
          o.metrics.sourceRewritten(dataset, s.sourceRewrite !== null);
        }
      }
      if (idle) {
        if (o.untilIdle) return totals;
        await abortableSleep(pollMs, o.signal);
      }
    }
    return totals;
  } finally {
    if (lease) {
      await o.db.query('SELECT genfill.projector_release($1, $2, $3)', [dataset, id, lease.token.toString()]).catch(() => undefined);
      o.metrics?.holding(dataset, false);
    }
  }
}

/**
 * What runs beside the live writer in the projector service, given the service's holder id and
 * lease period: the requests it executes for people, and a round run before each discovery.
 */
export type ProjectorExtension = (ctx: { holder: string; leaseMs: number; log: Logger; datasets?: string[] }) => {
  handlers: ServiceHandlers<'projector'>;
  round?: (db: Db) => Promise<void>;
};

export interface ProjectorServiceOptions extends Omit<ProjectorOptions, 'db' | 'metrics'> {
  config: Config;
  /** The switch's requests and rounds (apps/projector wires @genfill/switch's). */
  extension?: ProjectorExtension;
  db?: Db;
  registry?: Registry;
  /** The caller serves `registry` (the service helper's /metrics, /healthz, /readyz): do not bind GENFILL_METRICS_PORT here. */
  metricsServed?: boolean;
}

/** The service: discover datasets, run one projectDataset loop per dataset, serve the extension's requests and rounds. */
export async function runProjectorService(opts: ProjectorServiceOptions): Promise<void> {
  const { config, log } = opts;
  const db = opts.db ?? createPool(config, 'genfill-projector', 6, { fleet: true });
  let metricsServer: MetricsServer | undefined;
  const loops = new Map<string, Promise<unknown>>();
  try {
    await assertSchemaCurrent(db);
    const registry = opts.registry ?? createMetricsRegistry('projector');
    const metrics = projectorMetrics(registry);
    if (config.GENFILL_METRICS_PORT !== undefined && !opts.metricsServed) metricsServer = await serveMetrics(registry, { port: config.GENFILL_METRICS_PORT });
    const id = opts.id ?? `projector:${hostname()}:${process.pid}`;
    const discoverMs = opts.discoverMs ?? PROJECTOR_DEFAULTS.discoverMs;
    log.info({ id, datasets: opts.datasets ?? 'all', metricsPort: metricsServer?.port ?? null }, 'projector started');
    const leaseMs = opts.leaseMs ?? PROJECTOR_DEFAULTS.leaseMs;
    const extension: { handlers: RequestHandlers; round?: (db: Db) => Promise<void> } = opts.extension?.({ holder: id, leaseMs, log, datasets: opts.datasets }) ?? { handlers: {} };
    while (!opts.signal?.aborted) {
      try {
        // Requests under the projector's lease period: a holder SIGKILLed mid-cutover is replaced within it.
        await serveRequests(db, { handlers: extension.handlers, worker: id, log, signal: opts.signal, leaseMs });
        await extension.round?.(db);
        for (const dataset of await projectableDatasets(db, opts.datasets)) {
          if (loops.has(dataset)) continue;
          const loop = projectDataset(dataset, { ...opts, db, id, metrics })
            .catch((err: unknown) => log.error({ err, dataset }, 'projector loop failed; restarting it'))
            .finally(() => loops.delete(dataset));
          loops.set(dataset, loop);
        }
      } catch (err) {
        log.error({ err }, 'projector round failed; trying again');
      }
      await abortableSleep(Math.min(discoverMs, 500), opts.signal);
    }
    await Promise.all(loops.values());
    log.info('projector stopped');
  } finally {
    await Promise.all(loops.values());
    await metricsServer?.close();
    if (!opts.db) await db.end();
  }
}
