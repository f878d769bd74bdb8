// The drift check on a schedule (issue 29; SPEC "Drift check"): the reconciler service runs
// drift.ts on every live dataset — adopted or cut over: an active generation with a projector
// frontier over a captured source — every GENFILL_DRIFT_CHECK_EVERY (default 1h), and at once
// when the dataset's active generation is not the one its last verdict checked (a cutover or
// a rollback switched it: the first check of a new generation does not wait for the schedule).
// Every verdict goes to genfill.drift_checks (migration 0032); this file only decides which
// dataset is due and exports genfill_dataset_drift_rows{dataset}.
//
// Paced, like a build, so a check never competes with the application for long:
//   - one dataset per round of the reconciler, one statement at a time (a check is one
//     REPEATABLE READ transaction on one connection);
//   - every check runs under a statement_timeout (half the schedule, between 30 s and 15 min):
//     a check that cannot finish is cancelled, logged and tried again a schedule later;
//   - after a check that took t, the next one (of any dataset) waits at least t: the checks
//     take at most half of one connection's time, whatever the datasets' sizes.
// What it does not do yet: read the throttle's signals (replica lag, the foreground SLI), and
// check incrementally — every check compares the whole generation (docs/reconciliation.md).
//
// Why due-ness is read from the registry and not only kept in memory: a restarted reconciler
// (or a second one after a failover) continues the schedule from the last recorded verdict,
// and the generation-change trigger needs nothing from the projector or the cutover — the
// cutover commits the new pointer, the next round here sees a pointer no verdict names.
import { Gauge, type Registry } from 'prom-client';
import type { Logger } from '@genfill/observability';
import type { Db } from '@genfill/registry';
import { driftCheck, type DriftReason, type DriftResult } from './drift.ts';

/** GENFILL_DRIFT_CHECK_EVERY's default: hourly. */
export const DEFAULT_DRIFT_CHECK_EVERY_MS = 3_600_000;

/** statement_timeout of a scheduled check: half the schedule, within [30 s, 15 min]. */
export function driftStatementTimeout(everyMs: number): number {
  return Math.min(15 * 60_000, Math.max(30_000, Math.floor(everyMs / 2)));
}

export interface DriftMetrics {
  observe(dataset: string, driftedRows: number): void;
  failed(dataset: string): void;
}

export function driftMetrics(registry: Registry): DriftMetrics {
  const registers = [registry];
  const rows = new Gauge({
    name: 'genfill_dataset_drift_rows',
    help: "Rows of the dataset's live generation that differ from its transform map of the source at the last drift check (missing or different, plus extra)",
    labelNames: ['dataset'] as const,
    registers,
  });
  const failures = new Gauge({
    name: 'genfill_dataset_drift_check_failing',
    help: '1 while the last scheduled drift check of the dataset failed (the log says why; it is tried again a schedule later)',
    labelNames: ['dataset'] as const,
    registers,
  });
  return {
    observe: (dataset, n) => {
      rows.set({ dataset }, n);
      failures.set({ dataset }, 0);
    },
    failed: (dataset) => failures.set({ dataset }, 1),
  };
}

/** A live dataset and its last recorded verdict. */
export interface DriftCandidate {
  dataset: string;
  generation: string;
  last: { generation: string; driftedRows: number; ageMs: number } | null;
}

/** Datasets the schedule covers, with their last verdict (one query). */
export async function driftCandidates(db: Db): Promise<DriftCandidate[]> {
  const { rows } = await db.query<{ dataset: string; generation: string; last_generation: string | null; drifted: string | null; age_ms: number | null }>(
    `SELECT d.name AS dataset, d.active_generation AS generation, v.generation AS last_generation, v.drifted_rows::text AS drifted,
            (extract(epoch FROM clock_timestamp() - v.finished_at) * 1000)::float8 AS age_ms
       FROM genfill.datasets d
       JOIN genfill.frontiers f ON f.dataset = d.name AND f.generation = d.active_generation
       JOIN genfill.captures c ON c.relid = to_regclass(d.source_table)
       LEFT JOIN LATERAL (SELECT x.generation, x.drifted_rows, x.finished_at FROM genfill.drift_checks x WHERE x.dataset = d.name ORDER BY x.id DESC LIMIT 1) v ON true
      WHERE d.active_generation IS NOT NULL
      ORDER BY d.name`,
  );
  return rows.map((r) => ({
    dataset: r.dataset,
    generation: r.generation,
    last: r.last_generation === null ? null : { generation: r.last_generation, driftedRows: Number(r.drifted), ageMs: r.age_ms ?? 0 },
  }));
}

/** Why a dataset is due now, or the milliseconds until it is. */
export function dueness(c: DriftCandidate, everyMs: number, tried: { generation: string; at: number } | undefined, now: number): DriftReason | number {
  // This process tried this generation within the schedule (a failure included): wait it out.
  if (tried && tried.generation === c.generation && now - tried.at < everyMs) return everyMs - (now - tried.at);
  if (!c.last || c.last.generation !== c.generation) return c.last ? 'generation_changed' : 'schedule';
  return c.last.ageMs >= everyMs ? 'schedule' : everyMs - c.last.ageMs;
}

export interface DriftScheduleOptions {
  everyMs: number;
  metrics?: DriftMetrics;
  /** Override the statement_timeout of a check (default driftStatementTimeout(everyMs)). */
  statementTimeoutMs?: number;
}

export interface DriftRoundResult {
  checked: (DriftResult & { reason: DriftReason; ms: number })[];
  failed: { dataset: string; error: string }[];
  /** Milliseconds until the next check is due (the service waits no longer than this). */
  nextDueMs: number;
}

/**
 * The reconciler's drift schedule: `round()` checks at most one due dataset (a changed
 * generation first, then the one waiting longest) and says when the next is due.
 */
export class DriftSchedule {
  private readonly tried = new Map<string, { generation: string; at: number }>();
  private notBefore = 0;

  constructor(private readonly o: DriftScheduleOptions) {}

  async round(db: Db, log: Logger): Promise<DriftRoundResult> {
    const out: DriftRoundResult = { checked: [], failed: [], nextDueMs: this.o.everyMs };
    const now = Date.now();
    const candidates = await driftCandidates(db);
    // A restarted reconciler exports the recorded verdicts before it checks anything again.
    for (const c of candidates) if (c.last && c.last.generation === c.generation) this.o.metrics?.observe(c.dataset, c.last.driftedRows);
    const due: { c: DriftCandidate; reason: DriftReason; wait: number }[] = [];
    for (const c of candidates) {
      const d = dueness(c, this.o.everyMs, this.tried.get(c.dataset), now);
      if (typeof d === 'number') out.nextDueMs = Math.min(out.nextDueMs, d);
      else due.push({ c, reason: d, wait: c.last?.ageMs ?? Number.POSITIVE_INFINITY });
    }
    if (due.length === 0) return out;
    if (now < this.notBefore) {
      out.nextDueMs = Math.min(out.nextDueMs, this.notBefore - now);
      return out;
    }
    due.sort((a, b) => Number(b.reason === 'generation_changed') - Number(a.reason === 'generation_changed') || b.wait - a.wait);
    const { c, reason } = due[0]!;
    const started = Date.now();
    this.tried.set(c.dataset, { generation: c.generation, at: started });
    const dlog = log.child({ dataset: c.dataset, generation: c.generation });
    try {
      const r = await driftCheck(db, c.dataset, { reason, statementTimeoutMs: this.o.statementTimeoutMs ?? driftStatementTimeout(this.o.everyMs) });
      const ms = Date.now() - started;
      out.checked.push({ ...r, reason, ms });
      this.o.metrics?.observe(c.dataset, r.missing + r.extra);
      if (r.generation !== c.generation) this.tried.set(c.dataset, { generation: r.generation, at: started });
      const fields = { reason, check: r.check, rowsChecked: r.rowsChecked, missing: r.missing, extra: r.extra, pending: r.pending, ms };
      if (r.verified) dlog.info(fields, 'drift check: no drift');
      else dlog.warn({ ...fields, driftedKeys: r.driftedKeys, sample: r.sample }, 'drift check: the live generation differs from its transform map of the source');
    } catch (err) {
      this.o.metrics?.failed(c.dataset);
      out.failed.push({ dataset: c.dataset, error: (err as Error).message });
      dlog.error({ reason, err: (err as Error).message }, 'drift check did not complete; tried again a schedule later');
    }
    const took = Date.now() - started;
    this.notBefore = Date.now() + took;
    out.nextDueMs = due.length > 1 ? Math.min(out.nextDueMs, took) : Math.min(out.nextDueMs, this.o.everyMs);
    return out;
  }
}
