// The reconciler service's housekeeping, after each round's reconciliations: retention of old
// generations (retention.ts), pruning of the change log (prune.ts) and cleanup of releases
// past their rollback window (cleanup.ts). Each step's failure is logged and counted, never
// fatal, and never stops the other steps: a missing owner grant stops retention and pruning
// with a message naming the grant, a missing Redis stops only cleanup.
//
// Metrics (one registry per process, no key or partition labels):
//   genfill_log_horizon_age_seconds      how far behind now the log's horizon is (its oldest holder)
//   genfill_log_horizon_transactions     transactions in progress the horizon waits for (long or prepared)
//   genfill_log_partitions_prunable      partitions wholly below the horizon still attached
//   genfill_log_pruned_partitions_total  partitions detached and dropped
//   genfill_log_pruned_rows_total{what}  DEFAULT-partition rows and projector tombstones deleted
//   genfill_generations_retained{dataset}, genfill_generations_retained_bytes{dataset}
//   genfill_generations_retired_total{dataset}
//   genfill_releases_cleaned_total
//   genfill_housekeeping_refused{step}   1 while a step cannot run for a missing privilege
//   genfill_housekeeping_errors_total{step}
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Logger } from '@genfill/observability';
import type { Db } from '@genfill/registry';
import { cleanupRound, type CleanupResult } from './cleanup.ts';
import { HorizonHistory } from './horizon.ts';
import type { OwnerOptions } from './owner.ts';
import { type PruneOptions, pruneLog, type PruneResult } from './prune.ts';
import { retentionRound, type RetentionOptions, type RetentionRoundResult, retentionStatus } from './retention.ts';
import { type Dispatcher } from '@genfill/queue';

export interface HousekeepingMetrics {
  observe(r: HousekeepingResult, retained: { dataset: string; count: number; bytes: number }[]): void;
  error(step: 'retention' | 'prune' | 'cleanup'): void;
}

export function housekeepingMetrics(registry: Registry): HousekeepingMetrics {
  const registers = [registry];
  const age = new Gauge({ name: 'genfill_log_horizon_age_seconds', help: "Seconds the change log's pruning horizon is behind now (since its oldest holder: a transaction's start or a frontier's update)", registers });
  const waits = new Gauge({ name: 'genfill_log_horizon_transactions', help: 'Transactions in progress (long or prepared) the change log horizon waits for', registers });
  const prunable = new Gauge({ name: 'genfill_log_partitions_prunable', help: 'Change log partitions wholly below the horizon still attached (waiting for a lock or a genfill transaction)', registers });
  const prunedParts = new Counter({ name: 'genfill_log_pruned_partitions_total', help: 'Change log partitions detached and dropped below the horizon', registers });
  const prunedRows = new Counter({ name: 'genfill_log_pruned_rows_total', help: 'Rows deleted below the horizon: DEFAULT-partition events and projector tombstones', labelNames: ['what'] as const, registers });
  const retained = new Gauge({ name: 'genfill_generations_retained', help: 'Generations kept after they stopped serving readers (rollback window, reader leases)', labelNames: ['dataset'] as const, registers });
  const retainedBytes = new Gauge({ name: 'genfill_generations_retained_bytes', help: 'Size of the retained generations tables (pg_total_relation_size)', labelNames: ['dataset'] as const, registers });
  const retired = new Counter({ name: 'genfill_generations_retired_total', help: 'Generations retired (their table detached and dropped after)', labelNames: ['dataset'] as const, registers });
  const cleaned = new Counter({ name: 'genfill_releases_cleaned_total', help: 'Releases whose queue and Redis keys were removed after their rollback window', registers });
  const refused = new Gauge({ name: 'genfill_housekeeping_refused', help: '1 while a housekeeping step cannot run for a missing privilege (the log names the grant)', labelNames: ['step'] as const, registers });
  const errors = new Counter({ name: 'genfill_housekeeping_errors_total', help: 'Housekeeping steps that failed (logged; the next round tries again)', labelNames: ['step'] as const, registers });
  return {
    observe: (r, kept) => {
      if (r.prune) {
        age.set(r.prune.current.ageSeconds);
        waits.set(r.prune.current.transactions.length);
        prunable.set(r.prune.prunable);
        prunedParts.inc(r.prune.dropped.length);
        prunedRows.inc({ what: 'default-rows' }, r.prune.defaultRows);
        prunedRows.inc({ what: 'tombstones' }, r.prune.tombstones);
        refused.set({ step: 'prune' }, r.prune.refused ? 1 : 0);
      }
      if (r.retention) {
        for (const g of r.retention.retired) retired.inc({ dataset: g.dataset });
        refused.set({ step: 'retention' }, r.retention.owner ? 1 : 0);
      }
      retained.reset();
      retainedBytes.reset();
      for (const k of kept) {
        retained.set({ dataset: k.dataset }, k.count);
        retainedBytes.set({ dataset: k.dataset }, k.bytes);
      }
      if (r.cleanup) cleaned.inc(r.cleanup.cleaned.length);
    },
    error: (step) => errors.inc({ step }),
  };
}

export interface HousekeepingOptions extends OwnerOptions {
  retention?: Omit<RetentionOptions, keyof OwnerOptions>;
  prune?: Omit<PruneOptions, keyof OwnerOptions | 'history'>;
  /** Kept across rounds by the service (the horizon pruning may use depends on earlier ones). */
  history?: HorizonHistory;
  /** The release queues' Redis, for cleanup; null skips cleanup (logged). */
  dispatcher?: Dispatcher | null;
  metrics?: HousekeepingMetrics;
}

export interface HousekeepingResult {
  retention: RetentionRoundResult | null;
  prune: PruneResult | null;
  cleanup: CleanupResult | null;
  errors: { step: 'retention' | 'prune' | 'cleanup'; error: string }[];
}

/** Retention, pruning and cleanup, each on its own: one failing does not stop the others. */
export async function housekeepingRound(db: Db, log: Logger, o: HousekeepingOptions = {}): Promise<HousekeepingResult> {
  const out: HousekeepingResult = { retention: null, prune: null, cleanup: null, errors: [] };
  const owner = { ownerUrl: o.ownerUrl ?? null };
  const step = async <T>(name: 'retention' | 'prune' | 'cleanup', fn: () => Promise<T>): Promise<T | null> => {
    try {
      return await fn();
    } catch (err) {
      out.errors.push({ step: name, error: (err as Error).message });
      o.metrics?.error(name);
      log.error({ step: name, err: (err as Error).message }, `${name} failed; the next round tries again`);
      return null;
    }
  };
  out.retention = await step('retention', () => retentionRound(db, log, { ...o.retention, ...owner }));
  out.prune = await step('prune', () => pruneLog(db, log, { ...o.prune, ...owner, history: o.history ?? new HorizonHistory() }));
  out.cleanup = await step('cleanup', () => cleanupRound(db, log, o.dispatcher ?? null));
  if (o.metrics) {
    const kept = new Map<string, { dataset: string; count: number; bytes: number }>();
    for (const g of (await retentionStatus(db).catch(() => [])).filter((x) => x.state !== 'RETIRED')) {
      const k = kept.get(g.dataset) ?? { dataset: g.dataset, count: 0, bytes: 0 };
      k.count += 1;
      k.bytes += g.bytes ?? 0;
      kept.set(g.dataset, k);
    }
    o.metrics.observe(out, [...kept.values()]);
  }
  return out;
}
