// The read model behind `genfill status` and (later) GET /releases/:id, read in one snapshot.
import { withTransaction, type Conn, type Db } from './db.ts';
import { findManifest, listPartitions, partitionCounts, dependencyPins } from './manifest.ts';
import { releaseLog } from './log.ts';
import { getRelease, listReleases } from './releases.ts';

function iso(d: Date | null): string | null {
  return d ? d.toISOString() : null;
}

/** The throttle controller's latest decision for a release (migration 0005), or null. */
export async function latestThrottleDecision(conn: Pick<Db, 'query'>, release: string) {
  const { rows } = await conn.query<{
    at: Date;
    holder: string;
    token: string;
    action: string;
    binding: string;
    ratio: number | null;
    concurrency: number;
    rows_per_second: number;
    live_workers: number;
    worker_rows_per_second: number;
    throttle_paused: boolean;
    signals: Record<string, { value: number | null }>;
  }>(
    `SELECT at, holder, token::text AS token, action, binding, ratio, concurrency, rows_per_second, live_workers,
            worker_rows_per_second, throttle_paused, signals
       FROM genfill.throttle_decisions WHERE release = $1 ORDER BY id DESC LIMIT 1`,
    [release],
  );
  const r = rows[0];
  if (!r) return null;
  return {
    at: iso(r.at),
    holder: r.holder,
    token: Number(r.token),
    action: r.action,
    binding: r.binding,
    ratio: r.ratio,
    concurrency: r.concurrency,
    rowsPerSecond: r.rows_per_second,
    liveWorkers: r.live_workers,
    workerRowsPerSecond: r.worker_rows_per_second,
    throttlePaused: r.throttle_paused,
    signals: Object.fromEntries(Object.entries(r.signals).map(([k, v]) => [k, v.value])),
  };
}
export type ThrottleDecisionSummary = NonNullable<Awaited<ReturnType<typeof latestThrottleDecision>>>;

/**
 * The prepared transaction with the oldest transaction id in the cluster (pg_prepared_xacts),
 * or null. It stays in progress in every snapshot until COMMIT PREPARED or ROLLBACK PREPARED:
 * its events reach no consumer before that, and it pins the xmin of every frontier taken
 * meanwhile, which holds log pruning back (SPEC "Capture rules", invariant 15). Snapshots are
 * cluster-wide, so one prepared in another database counts too.
 */
export async function oldestPreparedTransaction(conn: Pick<Db, 'query'>) {
  const { rows } = await conn.query<{
    gid: string;
    xid: string;
    database: string;
    owner: string;
    prepared: Date;
    age_seconds: number;
    count: number;
  }>(
    `SELECT gid, transaction::text AS xid, database, owner, prepared,
            extract(epoch FROM clock_timestamp() - prepared)::float8 AS age_seconds, count(*) OVER ()::int AS count
       FROM pg_catalog.pg_prepared_xacts
      ORDER BY age(transaction) DESC, prepared
      LIMIT 1`,
  );
  const r = rows[0];
  if (!r) return null;
  return {
    count: r.count,
    oldest: { gid: r.gid, xid: Number(r.xid), database: r.database, owner: r.owner, preparedAt: iso(r.prepared), ageSeconds: Math.max(0, r.age_seconds) },
  };
}
export type PreparedTransactions = NonNullable<Awaited<ReturnType<typeof oldestPreparedTransaction>>>;

async function switchesOf(conn: Conn, id: string) {
  const { rows } = await conn.query<{
    id: string; kind: string; state: string; step: string; from: string; to: string; holder: string; recovered_by: string[];
    freeze_ms: string | null; cas_ms: string | null; started_at: Date; finished_at: Date | null; reason: string | null;
  }>(
    `SELECT id::text, kind, state, step, from_generation AS from, to_generation AS to, holder, recovered_by, freeze_ms::text, cas_ms::text,
            started_at, finished_at, outcome->>'reason' AS reason
       FROM genfill.cutovers c WHERE release = $1 ORDER BY c.id`,
    [id],
  );
  return rows.map((r) => ({
    id: r.id,
    kind: r.kind,
    state: r.state,
    step: r.step,
    from: r.from,
    to: r.to,
    holder: r.holder,
    recoveredBy: r.recovered_by,
    freezeMs: r.freeze_ms === null ? null : Number(r.freeze_ms),
    casMs: r.cas_ms === null ? null : Number(r.cas_ms),
    startedAt: iso(r.started_at),
    finishedAt: r.finished_at ? iso(r.finished_at) : null,
    reason: r.reason,
  }));
}

async function liveOf(conn: Conn, id: string, expectedActive: string | null, hasCarry: boolean) {
  const { rows } = await conn.query<{ cf: string | null; floor: string | null; round: Record<string, unknown> | null }>(
    `SELECT (SELECT snapshot::text FROM genfill.catchup_frontiers WHERE release = $1) AS cf,
            (SELECT floor::text FROM genfill.release_floors WHERE release = $1) AS floor,
            (SELECT jsonb_build_object('id', id, 'to', to_snapshot::text, 'toBarrier', to_barrier, 'events', events, 'upserted', upserted,
                                       'tombstones', tombstones, 'noops', noops, 'root', root::text, 'at', at)
               FROM genfill.catchup_rounds WHERE release = $1 ORDER BY id DESC LIMIT 1) AS round`,
    [id],
  );
  const floor = rows[0]!.floor;
  return {
    catchupFrontier: rows[0]!.cf,
    floor,
    lastRound: rows[0]!.round,
    /** Planned with an expected active generation but without carry chunks (before they existed): it can never be cut over. */
    precarry: expectedActive !== null && floor === null && !hasCarry,
  };
}

export async function releaseStatus(db: Db, id: string) {
  return withTransaction(
    db,
    async (conn) => {
      const r = await getRelease(conn, id);
      const manifest = await findManifest(conn, id);
      const parts = manifest ? await listPartitions(conn, id) : [];
      return {
        release: r.id,
        state: r.state,
        stateChangedAt: iso(r.state_changed_at),
        paused: { operator: r.operator_paused, throttle: r.throttle_paused },
        dataset: r.dataset,
        generation: r.generation,
        expectedActive: r.expected_active,
        digest: r.digest,
        transformDigest: r.transform_digest,
        range: { from: iso(r.range_from), to: iso(r.range_to), timezone: r.timezone, every: r.every },
        owner: r.owner,
        approvalsRequired: r.approvals_required,
        deadline: iso(r.deadline),
        submittedBy: r.submitted_by,
        submittedAt: iso(r.submitted_at),
        manifest: manifest
          ? {
              partitions: manifest.partition_count,
              boundariesSha256: manifest.boundaries_sha256,
              coverage: manifest.coverage_proof,
              createdBy: manifest.created_by,
              createdAt: iso(manifest.created_at),
            }
          : null,
        counts: manifest ? await partitionCounts(conn, id) : {},
        // The live path of the candidate: its catch-up frontier and latest round, and whether it
        // can ever be cut over (a release planned before carry partitions existed cannot).
        live: await liveOf(conn, id, r.expected_active, manifest !== null && parts.some((p) => p.kind === 'carry')),
        // Its cutovers and rollbacks (genfill.cutovers): each attempt, how it ended, the freeze.
        switches: await switchesOf(conn, id),
        dependencies: await dependencyPins(conn, id),
        throttle: await latestThrottleDecision(conn, id),
        preparedTransactions: await oldestPreparedTransaction(conn),
        partitions: parts.map((p) => ({
          id: p.id,
          seq: p.seq,
          kind: p.kind,
          lower: iso(p.lower),
          upper: iso(p.upper),
          status: p.status,
          attempt: p.attempt,
          estRows: p.est_rows === null ? null : Number(p.est_rows),
          reason: p.reason,
          evidence: p.evidence,
          updatedAt: iso(p.updated_at),
          receipt: p.receipt
            ? {
                id: p.receipt.id,
                kind: p.receipt.kind,
                rowsIn: Number(p.receipt.rows_in),
                rowsOut: Number(p.receipt.rows_out),
                keyRoot: p.receipt.key_root,
                rowRoot: p.receipt.row_root,
                watermark: p.receipt.watermark,
                timingsMs: p.receipt.timings,
              }
            : null,
        })),
        history: (await releaseLog(conn, id)).map((l) => ({
          action: l.action,
          from: l.from_state,
          to: l.to_state,
          principal: l.principal,
          at: iso(l.at),
          reason: l.reason,
          detail: l.detail,
        })),
      };
    },
    'REPEATABLE READ',
  );
}

export type ReleaseStatus = Awaited<ReturnType<typeof releaseStatus>>;

export async function releaseList(db: Db) {
  const conn = await db.connect();
  try {
    return (await listReleases(conn)).map((r) => ({
      release: r.id,
      state: r.state,
      dataset: r.dataset,
      generation: r.generation,
      paused: { operator: r.operator_paused, throttle: r.throttle_paused },
      range: { from: iso(r.range_from), to: iso(r.range_to) },
      submittedBy: r.submitted_by,
      submittedAt: iso(r.submitted_at),
    }));
  } finally {
    conn.release();
  }
}

/** What a release's current receipts add up to: the evidence summary of a build. */
export async function receiptSummary(db: Db, release: string) {
  const { rows } = await db.query<{
    partitions: number;
    receipts: number;
    rows_in: string;
    rows_out: string;
    first_at: Date | null;
    last_at: Date | null;
    max_attempt: number | null;
    retried: number;
    conserved_equal: boolean | null;
    timings: Record<string, number> | null;
  }>(
    `WITH cur AS (
       SELECT r.* FROM genfill.receipts r
        WHERE r.release = $1 AND NOT EXISTS (SELECT 1 FROM genfill.receipts s WHERE s.supersedes = r.id))
     SELECT (SELECT count(*) FROM genfill.partitions WHERE release = $1)::int AS partitions,
            (SELECT count(*) FROM cur)::int AS receipts,
            (SELECT coalesce(sum(rows_in), 0) FROM cur)::text AS rows_in,
            (SELECT coalesce(sum(rows_out), 0) FROM cur)::text AS rows_out,
            (SELECT min(created_at) FROM cur) AS first_at,
            (SELECT max(created_at) FROM cur) AS last_at,
            (SELECT max(attempt) FROM cur) AS max_attempt,
            (SELECT count(*) FROM cur WHERE attempt > 1)::int AS retried,
            (SELECT bool_and(v->>'source' = v->>'candidate') FROM cur, jsonb_each(cur.conserved_sums) AS e(k, v)) AS conserved_equal,
            (SELECT jsonb_object_agg(k, total) FROM (
               SELECT k, round(sum(v::numeric)) AS total FROM cur, jsonb_each_text(cur.timings) AS t(k, v)
                WHERE k <> 'deleted' GROUP BY k) s) AS timings`,
    [release],
  );
  const r = rows[0]!;
  return {
    release,
    partitions: r.partitions,
    receipts: r.receipts,
    rowsIn: Number(r.rows_in),
    rowsOut: Number(r.rows_out),
    firstAt: iso(r.first_at),
    lastAt: iso(r.last_at),
    maxAttempt: r.max_attempt ?? 0,
    retriedPartitions: r.retried,
    conservedEqual: r.conserved_equal,
    /** Milliseconds summed over every receipt, per phase (claim, prepare, statement, fence, total). */
    timingsMs: r.timings ?? {},
  };
}
export type ReceiptSummary = Awaited<ReturnType<typeof receiptSummary>>;
