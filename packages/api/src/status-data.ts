// What the status page (GET /) shows, read in one REPEATABLE READ snapshot so the numbers on
// one page agree with each other: releases with their progress and pause flags, the throttle's
// latest decision, the latest reconciliation, per-release heatmaps and failed/running
// partitions, datasets with their projector lag and a change of their source without DML that
// awaits a drift check (genfill.source_rewrite_pending, migration 0030). One query per function; the shared parts come
// from the registry: latestThrottleDecision, and the progress read model of `status --watch`
// (the partition counts, the sample and its ETA rule).
import { OPEN_STATES, type ReleaseState } from '@genfill/contracts';
import {
  latestThrottleDecision,
  NO_RATES,
  partitionCounts,
  type ProgressRow,
  progressRates,
  progressSample,
  type Rates,
  withTransaction,
  type Conn,
  type Db,
  type ThrottleDecisionSummary,
} from '@genfill/registry';
import { type DriftVerdict, lastDriftChecks, type SourceRewrite } from '@genfill/projector';
import { loadHeatmap, type Heatmap } from './heatmap.ts';
import { projectorLag, type ProjectorLag } from './projector-lag.ts';

/** Releases listed at most (open ones first, then the most recently submitted). */
const MAX_RELEASES = 50;
/** rows/s and the ETA follow the receipts of the last five minutes, as the throttle changes the pace. */
const RATE_WINDOW_SECONDS = 300;
/** Failed and running partitions listed under a heatmap, each. */
const MAX_LISTED = 20;

export interface PauseEntry {
  action: string;
  principal: string;
  at: Date;
  reason: string | null;
  via: string | null;
}

export interface ReleaseOverview {
  id: string;
  state: ReleaseState;
  dataset: string;
  generation: string;
  timezone: string;
  every: string;
  from: Date;
  to: Date;
  paused: { operator: boolean; throttle: boolean };
  counts: { total: number; built: number; running: number; failed: number; pending: number };
  rowsOut: number;
  rates: Rates;
  /** The latest operator pause or resume, from release_log. */
  lastPause: PauseEntry | null;
}

export interface ReconciliationOverview {
  id: string;
  state: string;
  findings: number;
  principal: string;
  at: Date;
  rows: { source?: string; stored?: string } | null;
}

export interface ListedPartition {
  id: string;
  status: 'FAILED' | 'RUNNING';
  attempt: number;
  reason: string | null;
  leasedBy: string | null;
  updatedAt: Date;
}

export interface ReleaseDetail {
  release: ReleaseOverview;
  throttle: ThrottleDecisionSummary | null;
  reconciliation: ReconciliationOverview | null;
  heatmap: Heatmap;
  listed: ListedPartition[];
}

export interface DatasetOverview {
  name: string;
  targetTable: string;
  activeGeneration: string | null;
  ingress: { state: string; epoch: number };
  lag: ProjectorLag | null;
  /** The source changed without DML and no drift check has verified the active generation since: cutovers are refused. */
  sourceRewrite: SourceRewrite | null;
  /** The drift check's last verdict (issue 29), null before the first. */
  drift: DriftVerdict | null;
}

export interface StatusData {
  at: Date;
  releases: ReleaseOverview[];
  /** Open releases, each with what its section shows. */
  details: ReleaseDetail[];
  datasets: DatasetOverview[];
}

/** A release's progress columns, its range and the receipts of the rate window, the latest pause entry. */
type OverviewRow = ProgressRow & {
  id: string;
  dataset: string;
  generation: string;
  timezone: string;
  every: string;
  range_from: Date;
  range_to: Date;
  recent_rows: string;
  recent_built: number;
  window_seconds: number | null;
  now_ms: string;
  pause_action: string | null;
  pause_principal: string | null;
  pause_at: Date | null;
  pause_reason: string | null;
  pause_via: string | null;
};

async function releaseOverviews(conn: Conn): Promise<ReleaseOverview[]> {
  const { rows } = await conn.query<OverviewRow>(
    `SELECT r.id, r.state, r.dataset, r.generation, r.timezone, r.every, lower(r.range) AS range_from, upper(r.range) AS range_to,
            r.operator_paused, r.throttle_paused, p.*, x.*,
            (extract(epoch FROM clock_timestamp()) * 1000)::bigint::text AS now_ms,
            l.action AS pause_action, l.principal AS pause_principal, l.at AS pause_at, l.reason AS pause_reason, l.detail->>'via' AS pause_via
       FROM genfill.releases r
      CROSS JOIN LATERAL (${partitionCounts('r.id')}) p
      CROSS JOIN LATERAL (
            SELECT coalesce(sum(rows_out), 0)::text AS rows_out,
                   coalesce(sum(rows_out) FILTER (WHERE created_at > clock_timestamp() - $1 * interval '1 second'), 0)::text AS recent_rows,
                   count(*) FILTER (WHERE supersedes IS NULL AND created_at > clock_timestamp() - $1 * interval '1 second')::int AS recent_built,
                   extract(epoch FROM CASE WHEN min(created_at) IS NOT NULL THEN least($1 * interval '1 second', clock_timestamp() - min(created_at)) END)::float8 AS window_seconds
              FROM genfill.receipts WHERE release = r.id) x
       LEFT JOIN LATERAL (
            SELECT action, principal, at, reason, detail FROM genfill.release_log
             WHERE release = r.id AND action IN ('pause', 'resume') ORDER BY id DESC LIMIT 1) l ON true
      ORDER BY r.state = ANY($2::text[]) DESC, r.submitted_at DESC, r.id
      LIMIT $3`,
    [RATE_WINDOW_SECONDS, OPEN_STATES, MAX_RELEASES],
  );
  return rows.map((r) => {
    const now = progressSample(r.id, r, Number(r.now_ms));
    // The release as it stood at the start of the window (its receipts since taken away) stands
    // in for the earlier sample `status --watch` would have taken.
    const rates: Rates =
      r.window_seconds !== null && r.window_seconds > 0
        ? progressRates({ ...now, built: now.built - r.recent_built, rowsOut: now.rowsOut - Number(r.recent_rows), at: now.at - r.window_seconds * 1000 }, now)
        : NO_RATES;
    return {
      id: r.id,
      state: r.state,
      dataset: r.dataset,
      generation: r.generation,
      timezone: r.timezone,
      every: r.every,
      from: r.range_from,
      to: r.range_to,
      paused: now.paused,
      counts: { total: r.total, built: r.built, running: r.running, failed: r.failed, pending: r.pending },
      rowsOut: now.rowsOut,
      rates,
      lastPause:
        r.pause_action === null
          ? null
          : { action: r.pause_action, principal: r.pause_principal!, at: r.pause_at!, reason: r.pause_reason, via: r.pause_via },
    };
  });
}

async function latestReconciliations(conn: Conn, releases: string[]): Promise<Map<string, ReconciliationOverview>> {
  const { rows } = await conn.query<{ release: string; id: string; state: string; findings: string; principal: string; at: Date; rows: ReconciliationOverview['rows'] }>(
    `SELECT DISTINCT ON (release) release, id::text, state, findings_count::text AS findings, principal, at, summary->'rows' AS rows
       FROM genfill.reconciliations WHERE release = ANY($1::text[])
      ORDER BY release, id DESC`,
    [releases],
  );
  return new Map(rows.map((r) => [r.release, { id: r.id, state: r.state, findings: Number(r.findings), principal: r.principal, at: r.at, rows: r.rows }]));
}

async function failedAndRunning(conn: Conn, release: string): Promise<ListedPartition[]> {
  const { rows } = await conn.query<{ id: string; status: 'FAILED' | 'RUNNING'; attempt: number; reason: string | null; leased_by: string | null; updated_at: Date }>(
    `SELECT id, status, attempt, reason, leased_by, updated_at
       FROM (SELECT p.*, row_number() OVER (PARTITION BY status ORDER BY seq) AS n
               FROM genfill.partitions p WHERE release = $1 AND status IN ('FAILED', 'RUNNING')) l
      WHERE n <= $2
      ORDER BY status, seq`,
    [release, MAX_LISTED],
  );
  return rows.map((p) => ({ id: p.id, status: p.status, attempt: p.attempt, reason: p.reason, leasedBy: p.leased_by, updatedAt: p.updated_at }));
}

async function datasets(conn: Conn): Promise<DatasetOverview[]> {
  const { rows } = await conn.query<{ name: string; target_table: string; active_generation: string | null; ingress_state: string; ingress_epoch: string; rewrite: SourceRewrite | null }>(
    'SELECT name, target_table, active_generation, ingress_state, ingress_epoch::text, genfill.source_rewrite_pending(name) AS rewrite FROM genfill.datasets ORDER BY name',
  );
  const lag = new Map((await projectorLag(conn)).map((l) => [l.dataset, l]));
  const drift = await lastDriftChecks(conn);
  return rows.map((d) => ({
    name: d.name,
    targetTable: d.target_table,
    activeGeneration: d.active_generation,
    ingress: { state: d.ingress_state, epoch: Number(d.ingress_epoch) },
    lag: lag.get(d.name) ?? null,
    sourceRewrite: d.rewrite,
    drift: drift.get(d.name) ?? null,
  }));
}

export async function statusData(db: Db): Promise<StatusData> {
  return withTransaction(
    db,
    async (conn) => {
      const releases = await releaseOverviews(conn);
      const open = releases.filter((r) => OPEN_STATES.includes(r.state));
      const reconciliations = await latestReconciliations(conn, open.map((r) => r.id));
      const details: ReleaseDetail[] = [];
      for (const r of open) {
        details.push({
          release: r,
          throttle: await latestThrottleDecision(conn, r.id),
          reconciliation: reconciliations.get(r.id) ?? null,
          heatmap: await loadHeatmap(conn, { id: r.id, timezone: r.timezone, from: r.from, to: r.to, total: r.counts.total }),
          listed: await failedAndRunning(conn, r.id),
        });
      }
      return { at: new Date(), releases, details, datasets: await datasets(conn) };
    },
    'REPEATABLE READ',
  );
}
