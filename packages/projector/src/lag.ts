// How far the projector of a dataset is behind, and everything an operator asks next: the
// epoch and its seal, the lease holder, a poison stop, quarantined keys, the dataset's flags
// (a change of the source without DML not yet verified by a drift check among them),
// the oldest prepared transaction (it holds every frontier back until it finishes), the
// live reader leases (pinned reads of each generation, which hold its retirement back), the
// generations kept after a cutover, rollback or cancel (until when, why, their size), and the
// change log's pruning horizon with what holds it back (a long or prepared transaction).
import { type Conn, type Db, type ReaderLease, readerLeases } from '@genfill/registry';
import { computeHorizon, type HorizonPart, type HorizonTransaction, prunablePartitions, type RetainedGeneration, retentionStatus } from '@genfill/retention';

/** Pending events are counted up to this many. */
export const LAG_COUNT_LIMIT = 100_000;

export interface ProjectorStatus {
  dataset: string;
  generation: string | null;
  sourceTable: string | null;
  frontier: string | null;
  frontierUpdatedAt: string | null;
  /** Events not yet in the frontier (up to LAG_COUNT_LIMIT; `pendingCapped` when more). */
  pendingEvents: number;
  pendingCapped: boolean;
  oldestPendingAt: string | null;
  lagSeconds: number;
  ingress: 'OPEN' | 'SEALED';
  epoch: number;
  seal: { release: string | null; barrier: string | null; sealedAt: string | null; sealedBy: string | null; heldSeconds: number } | null;
  lease: { holder: string; token: string; expiresAt: string; live: boolean } | null;
  stop: { key: unknown; eventId: string; revision: string; error: string; at: string } | null;
  quarantinedKeys: number;
  dependencyStaleSince: string | null;
  staleRelations: string[];
  adoptUnverified: boolean;
  /**
   * The source changed without DML (a table rewrite, an enum label renamed: migration 0030) and
   * no drift check has verified the active generation since; a cutover is refused until one does.
   */
  sourceRewrite: SourceRewrite | null;
  oldestPrepared: { gid: string; prepared: string; owner: string } | null;
  /** Live reader leases of the dataset's generations (genfill read, GET /datasets/:ds/rows), longest first. */
  readers: ReaderLease[];
  /** With `retention`: generations that no longer serve readers and are not gone yet — until when they are kept, why, their size. */
  retained?: RetainedGeneration[];
  /** With `retention`: the change log's pruning horizon (shared by every dataset) and what holds it back. */
  logHorizon?: LogHorizonStatus;
  /** The last verdict of the drift check (genfill.drift_checks), whichever generation it checked. */
  lastDriftCheck: DriftVerdict | null;
}

/** genfill.source_rewrite_pending: what changed the source without DML, and a later drift check's finding. */
export interface SourceRewrite {
  at: string;
  table: string;
  command: string;
  /** column-rewrite, column-added-with-values, column-type, type-changed */
  reasons: string[];
  principal: string;
  /** The drift check that ran after it and found a difference (null: none ran yet). */
  driftCheck: { at: string; missing: number; extra: number; sample: Record<string, unknown>[] | null } | null;
}

export interface LogHorizonStatus {
  horizon: string;
  ageSeconds: number;
  /** The snapshots at the horizon's xmin: what keeps it where it is. */
  holders: HorizonPart[];
  /** Long or prepared transactions it waits for. */
  transactions: HorizonTransaction[];
  /** Partitions wholly below it still attached (the reconciler drops them). */
  prunablePartitions: number;
  lastPrune: { what: string; partition: string | null; rows: number; at: string } | null;
}

async function logHorizonStatus(conn: Conn | Db): Promise<LogHorizonStatus> {
  const h = await computeHorizon(conn);
  const { rows } = await conn.query<NonNullable<LogHorizonStatus['lastPrune']>>(
    `SELECT what, partition, rows::float8 AS rows, to_json(at) #>> '{}' AS at FROM genfill.change_log_prunes ORDER BY id DESC LIMIT 1`,
  );
  return {
    horizon: h.horizon,
    ageSeconds: h.ageSeconds,
    holders: h.holders,
    transactions: h.transactions,
    prunablePartitions: await prunablePartitions(conn, h.horizon),
    lastPrune: rows[0] ?? null,
  };
}

/**
 * The dataset's live path; `retention` adds the retained generations and the log's horizon
 * (`genfill status --dataset` asks for them; the projector's once-a-second lag metrics do not).
 */
export async function projectorStatus(conn: Conn | Db, dataset: string, opts: { retention?: boolean } = {}): Promise<ProjectorStatus | null> {
  const { rows } = await conn.query<{
    generation: string | null;
    source_table: string | null;
    frontier: string | null;
    frontier_at: string | null;
    ingress: 'OPEN' | 'SEALED';
    epoch: string;
  }>(
    `SELECT d.active_generation AS generation, c.source_table, f.snapshot::text AS frontier, f.updated_at::text AS frontier_at,
            d.ingress_state AS ingress, d.ingress_epoch::text AS epoch
       FROM genfill.datasets d
       LEFT JOIN genfill.captures c ON c.relid = to_regclass(d.source_table)
       LEFT JOIN genfill.frontiers f ON f.dataset = d.name AND f.generation = d.active_generation
      WHERE d.name = $1`,
    [dataset],
  );
  const d = rows[0];
  if (!d) return null;
  let pending = 0;
  let oldest: string | null = null;
  let lagSeconds = 0;
  if (d.source_table && d.frontier) {
    // Counted by the owner's function (migration 0025): people may not read the change log,
    // and the status they read is the same count.
    const { rows: p } = await conn.query<{ n: number; oldest: string | null; age: number | null }>(
      'SELECT events AS n, oldest::text AS oldest, age_seconds AS age FROM genfill.dataset_pending($1, $2)',
      [dataset, LAG_COUNT_LIMIT],
    );
    pending = p[0]!.n;
    oldest = p[0]!.oldest;
    lagSeconds = Math.max(0, p[0]!.age ?? 0);
  }
  const { rows: extra } = await conn.query<{
    seal: ProjectorStatus['seal'];
    lease: ProjectorStatus['lease'];
    stop: ProjectorStatus['stop'];
    quarantined: number;
    stale_since: string | null;
    stale: string[] | null;
    unverified: boolean | null;
    rewrite: SourceRewrite | null;
    prepared: ProjectorStatus['oldestPrepared'];
  }>(
    `SELECT (SELECT jsonb_build_object('release', e.release, 'barrier', e.barrier::text, 'sealedAt', e.sealed_at, 'sealedBy', e.sealed_by,
                                       'heldSeconds', extract(epoch FROM clock_timestamp() - e.sealed_at)::float8)
               FROM genfill.epochs e WHERE e.dataset = $1 AND e.epoch = $2 AND e.sealed_at IS NOT NULL AND e.closed_at IS NULL) AS seal,
            (SELECT jsonb_build_object('holder', l.holder, 'token', l.token::text, 'expiresAt', l.expires_at, 'live', l.expires_at > clock_timestamp())
               FROM genfill.projector_leases l WHERE l.dataset = $1) AS lease,
            (SELECT jsonb_build_object('key', s.key, 'eventId', s.event_id::text, 'revision', s.revision::text, 'error', s.error, 'at', s.at)
               FROM genfill.projector_stops s WHERE s.dataset = $1) AS stop,
            (SELECT count(*)::int FROM genfill.quarantined_keys q WHERE q.dataset = $1) AS quarantined,
            fl.dependency_stale_since::text AS stale_since, fl.stale_relations AS stale, fl.adopt_unverified AS unverified,
            genfill.source_rewrite_pending($1) AS rewrite,
            (SELECT jsonb_build_object('gid', x.gid, 'prepared', x.prepared, 'owner', x.owner) FROM pg_prepared_xacts x ORDER BY x.prepared LIMIT 1) AS prepared
       FROM (SELECT 1) AS one LEFT JOIN genfill.dataset_flags fl ON fl.dataset = $1`,
    [dataset, d.epoch],
  );
  const x = extra[0]!;
  return {
    dataset,
    generation: d.generation,
    sourceTable: d.source_table,
    frontier: d.frontier,
    frontierUpdatedAt: d.frontier_at,
    pendingEvents: pending,
    pendingCapped: pending >= LAG_COUNT_LIMIT,
    oldestPendingAt: oldest,
    lagSeconds,
    ingress: d.ingress,
    epoch: Number(d.epoch),
    seal: x.seal,
    lease: x.lease,
    stop: x.stop,
    quarantinedKeys: x.quarantined,
    dependencyStaleSince: x.stale_since,
    staleRelations: x.stale ?? [],
    adoptUnverified: x.unverified ?? false,
    sourceRewrite: x.rewrite,
    oldestPrepared: x.prepared,
    readers: await readerLeases(conn, dataset),
    lastDriftCheck: (await lastDriftChecks(conn, dataset)).get(dataset) ?? null,
    ...(opts.retention ? { retained: await retentionStatus(conn, dataset), logHorizon: await logHorizonStatus(conn) } : {}),
  };
}

// --- The drift check's last verdict (issue 29; migration 0032). The reconciler service checks
// every live generation against its transform map of the source on a schedule and at once after
// a cutover; `status --dataset` and the status page show the latest verdict. Keys, never rows.

export interface DriftVerdict {
  id: string;
  generation: string;
  /** The generation checked is the active one (false: the new one is not checked yet). */
  current: boolean;
  reason: 'schedule' | 'generation_changed' | 'manual';
  frontier: string;
  startedAt: string;
  finishedAt: string;
  rowsChecked: number;
  /** Missing or different plus extra rows (a changed row counts in both). */
  driftedRows: number;
  missingRows: number;
  extraRows: number;
  pendingKeys: number;
  /** Distinct drifted keys, and up to 20 of them. */
  driftedKeys: number;
  keySample: Record<string, unknown>[];
  principal: string;
}

/** The latest drift verdict of each dataset (or of one). */
export async function lastDriftChecks(conn: Conn | Db, dataset?: string): Promise<Map<string, DriftVerdict>> {
  const { rows } = await conn.query<DriftVerdict & { dataset: string }>(
    `SELECT DISTINCT ON (x.dataset) x.dataset, x.id::text AS id, x.generation, x.generation IS NOT DISTINCT FROM d.active_generation AS current, x.reason,
            x.frontier::text AS frontier, to_json(x.started_at) #>> '{}' AS "startedAt", to_json(x.finished_at) #>> '{}' AS "finishedAt",
            x.rows_checked::float8 AS "rowsChecked", x.drifted_rows::float8 AS "driftedRows", x.missing_rows::float8 AS "missingRows",
            x.extra_rows::float8 AS "extraRows", x.pending_keys::float8 AS "pendingKeys", x.drifted_keys::float8 AS "driftedKeys",
            x.key_sample AS "keySample", x.principal
       FROM genfill.drift_checks x JOIN genfill.datasets d ON d.name = x.dataset
      WHERE $1::text IS NULL OR x.dataset = $1
      ORDER BY x.dataset, x.id DESC`,
    [dataset ?? null],
  );
  return new Map(rows.map(({ dataset: ds, ...v }) => [ds, v]));
}
