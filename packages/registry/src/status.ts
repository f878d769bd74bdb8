// The read model behind `genfill status` and GET /releases/:id, read in one snapshot.
//
// Its size does not grow with the release (issue 19: a ten-year hourly release has 87,672
// partitions, and listing them all made `status --json` 31 MB and 4 s). By default it carries a
// summary computed in SQL — counts by status and kind, the failed and running partitions as
// ranges of consecutive seq (gaps and islands), the slowest built ones — and the latest history
// entries with a count; the partitions themselves only as one page asked for by status.
import { InvalidInputError } from '@genfill/contracts';
import { withTransaction, type Conn, type Db } from './db.ts';
import { findManifest, dependencyPins, type PartitionRow } from './manifest.ts';
import { getRelease, listReleases } from './releases.ts';

/** How many ranges of failed (and of running) partitions, slowest partitions and history entries a status shows. */
export const STATUS_LIMITS = { ranges: 20, slowest: 10, history: 100, detailPartitions: 20 } as const;
/** The page size of a partition listing: its default and its largest. */
export const PARTITION_PAGE = { size: 1000, maxSize: 10_000 } as const;
export const PARTITION_STATUSES = ['PENDING', 'RUNNING', 'BUILT', 'FAILED'] as const;
export type PartitionStatus = (typeof PARTITION_STATUSES)[number];

/** Which partitions a status lists: those of one status (or all, null), one page of them by seq. */
export interface PartitionListing {
  status: PartitionStatus | null;
  page: number;
  pageSize: number;
}

/**
 * A partition listing as the CLI and the API receive it: `partitions` is a status, `all`, or
 * `true` (the CLI's bare `--partitions`); page and page size are decimal strings. Undefined when
 * no listing is asked for; InvalidInputError naming each problem (by the caller's own names)
 * when the input is wrong, before anything is read.
 */
export function parsePartitionListing(
  input: { partitions?: string | boolean; page?: string; pageSize?: string },
  names: { partitions: string; page: string; pageSize: string },
): PartitionListing | undefined {
  const problems: { path: string; message: string }[] = [];
  const int = (v: string | undefined, name: string, dflt: number, max: number): number => {
    if (v === undefined) return dflt;
    const n = /^\d{1,9}$/.test(v.trim()) ? Number(v.trim()) : NaN;
    if (!Number.isInteger(n) || n < 1 || n > max) problems.push({ path: name, message: `expected a whole number from 1 to ${max.toLocaleString('en-US')}, got '${v}'` });
    return n;
  };
  const want = input.partitions;
  if (want === undefined || want === false) {
    for (const [k, name] of [['page', names.page], ['pageSize', names.pageSize]] as const) {
      if (input[k] !== undefined) problems.push({ path: name, message: `pages a partition listing: add ${names.partitions} [STATUS]` });
    }
    if (problems.length) throw new InvalidInputError(problems);
    return undefined;
  }
  let status: PartitionStatus | null = null;
  if (typeof want === 'string' && want.toLowerCase() !== 'all') {
    const upper = want.toUpperCase() as PartitionStatus;
    if (PARTITION_STATUSES.includes(upper)) status = upper;
    else problems.push({ path: names.partitions, message: `expected one of ${PARTITION_STATUSES.join(', ')} or all, got '${want}'` });
  }
  const page = int(input.page, names.page, 1, 1_000_000_000 - 1);
  const pageSize = int(input.pageSize, names.pageSize, PARTITION_PAGE.size, PARTITION_PAGE.maxSize);
  if (problems.length) throw new InvalidInputError(problems);
  return { status, page, pageSize };
}

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
            -- The last round, recorded or not (an empty round is not recorded: 0033); before 0033, the last recorded one.
            coalesce((SELECT last_round FROM genfill.catchup_frontiers WHERE release = $1),
                     (SELECT jsonb_build_object('id', id, 'to', to_snapshot::text, 'toBarrier', to_barrier, 'events', events, 'upserted', upserted,
                                                'tombstones', tombstones, 'noops', noops, 'root', root::text, 'at', at, 'recorded', true)
                        FROM genfill.catchup_rounds WHERE release = $1 ORDER BY id DESC LIMIT 1)) AS round`,
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

/** Counts by status, and by kind then status, in one scan. */
async function partitionCountsByKind(conn: Conn, id: string) {
  const { rows } = await conn.query<{ kind: string; status: string; n: number }>(
    'SELECT kind, status, count(*)::int AS n FROM genfill.partitions WHERE release = $1 GROUP BY kind, status ORDER BY kind, status',
    [id],
  );
  const counts: Record<string, number> = {};
  const byKind: Record<string, Record<string, number>> = {};
  for (const r of rows) {
    counts[r.status] = (counts[r.status] ?? 0) + r.n;
    (byKind[r.kind] ??= {})[r.status] = r.n;
  }
  return { counts, byKind };
}

/**
 * The failed and running partitions as ranges of consecutive seq (gaps and islands: within one
 * status, seq minus its row number is constant along a run), the first `limit` of each status
 * by seq, each with its first and last partition and the first one's reason and attempt.
 */
async function partitionRanges(conn: Conn, id: string, limit: number) {
  const { rows } = await conn.query<{
    status: 'FAILED' | 'RUNNING'; first_seq: number; last_seq: number; n: number; islands: number;
    first_id: string; last_id: string; reason: string | null; attempt: number; reasons: number;
  }>(
    `WITH p AS (
       SELECT status, seq, seq - row_number() OVER (PARTITION BY status ORDER BY seq) AS grp
         FROM genfill.partitions WHERE release = $1 AND status IN ('FAILED', 'RUNNING')),
     islands AS (
       SELECT status, min(seq) AS first_seq, max(seq) AS last_seq, count(*)::int AS n FROM p GROUP BY status, grp),
     ranked AS (
       SELECT i.*, row_number() OVER (PARTITION BY status ORDER BY first_seq) AS k, count(*) OVER (PARTITION BY status)::int AS islands FROM islands i)
     SELECT r.status, r.first_seq, r.last_seq, r.n, r.islands, a.id AS first_id, b.id AS last_id, a.reason, a.attempt,
            (SELECT count(DISTINCT x.reason)::int FROM genfill.partitions x
              WHERE x.release = $1 AND x.seq BETWEEN r.first_seq AND r.last_seq) AS reasons
       FROM ranked r
       JOIN genfill.partitions a ON a.release = $1 AND a.seq = r.first_seq
       JOIN genfill.partitions b ON b.release = $1 AND b.seq = r.last_seq
      WHERE r.k <= $2
      ORDER BY r.status, r.first_seq`,
    [id, limit],
  );
  const of = (status: 'FAILED' | 'RUNNING') => {
    const mine = rows.filter((r) => r.status === status);
    const total = mine[0]?.islands ?? 0;
    return {
      ranges: mine.map((r) => ({
        first: r.first_id,
        last: r.last_id,
        seq: { first: r.first_seq, last: r.last_seq },
        partitions: r.n,
        reason: r.reason,
        attempt: r.attempt,
        /** How many distinct reasons the range holds (the first one is `reason`). */
        reasons: r.reasons,
      })),
      totalRanges: total,
      moreRanges: Math.max(0, total - mine.length),
    };
  };
  return { failed: of('FAILED'), running: of('RUNNING') };
}

/** The slowest built partitions by their current receipt's timings.total. */
async function slowestPartitions(conn: Conn, id: string, limit: number) {
  const { rows } = await conn.query<{ id: string; seq: number; kind: string; attempt: number; total_ms: number; rows_in: string; rows_out: string }>(
    `SELECT p.id, p.seq, p.kind, p.attempt, (r.timings->>'total')::float8 AS total_ms, r.rows_in::text, r.rows_out::text
       FROM genfill.partitions p
       JOIN genfill.current_receipts r ON r.release = p.release AND r.partition = p.id
      WHERE p.release = $1 AND p.status = 'BUILT' AND r.timings ? 'total'
      ORDER BY (r.timings->>'total')::float8 DESC, p.seq
      LIMIT $2`,
    [id, limit],
  );
  return rows.map((r) => ({ id: r.id, seq: r.seq, kind: r.kind, attempt: r.attempt, totalMs: r.total_ms, rowsIn: Number(r.rows_in), rowsOut: Number(r.rows_out) }));
}

/** One page of a release's partitions by seq, each with its current receipt. */
async function partitionPage(conn: Conn, id: string, l: PartitionListing) {
  const { rows } = await conn.query<PartitionRow>(
    `SELECT p.release, p.id, p.seq, p.kind, p.lower, p.upper, p.status, p.attempt, p.est_rows, p.reason, p.evidence, p.updated_at,
            (SELECT jsonb_build_object('id', r.id::text, 'rows_in', r.rows_in::text, 'rows_out', r.rows_out::text,
                                       'key_root', r.key_root::text, 'row_root', r.row_root::text,
                                       'watermark', r.watermark::text, 'timings', r.timings, 'kind', r.kind)
               FROM genfill.current_receipts r
              WHERE r.release = p.release AND r.partition = p.id) AS receipt
       FROM genfill.partitions p
      WHERE p.release = $1 AND ($2::text IS NULL OR p.status = $2)
      ORDER BY p.seq
      LIMIT $3 OFFSET $4`,
    [id, l.status, l.pageSize, (l.page - 1) * l.pageSize],
  );
  return rows.map((p) => ({
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
  }));
}

/**
 * The latest `limit` log entries, oldest first, and how many there are. A requeue logs every
 * partition it bumped; past `detailPartitions` its detail keeps the first ones and their count.
 */
async function historyOf(conn: Conn, id: string, limit: number, detailPartitions: number) {
  const { rows } = await conn.query<{ action: string; from_state: string | null; to_state: string | null; principal: string; at: Date; reason: string | null; detail: unknown }>(
    `SELECT action, from_state, to_state, principal, at, reason,
            CASE WHEN jsonb_typeof(detail->'partitions') = 'array' AND jsonb_array_length(detail->'partitions') > $3
                 THEN (detail - 'partitions' - 'previous') || jsonb_build_object(
                        'partitions', (SELECT jsonb_agg(e.x ORDER BY e.i) FROM jsonb_array_elements(detail->'partitions') WITH ORDINALITY AS e(x, i) WHERE e.i <= $3),
                        'partitionCount', jsonb_array_length(detail->'partitions'),
                        'truncated', true)
                 ELSE detail END AS detail
       FROM (SELECT * FROM genfill.release_log WHERE release = $1 ORDER BY id DESC LIMIT $2) l
      ORDER BY id`,
    [id, limit, detailPartitions],
  );
  const { rows: n } = await conn.query<{ n: number }>('SELECT count(*)::int AS n FROM genfill.release_log WHERE release = $1', [id]);
  return {
    entries: rows.map((l) => ({ action: l.action, from: l.from_state, to: l.to_state, principal: l.principal, at: iso(l.at), reason: l.reason, detail: l.detail })),
    total: n[0]!.n,
  };
}

/**
 * A release's status. `partitions` lists one page of its partitions (the summary is always
 * there); without it the answer carries no partition list and stays small at any size.
 */
export async function releaseStatus(db: Db, id: string, opts: { partitions?: PartitionListing } = {}) {
  return withTransaction(
    db,
    async (conn) => {
      const r = await getRelease(conn, id);
      const manifest = await findManifest(conn, id);
      const { counts, byKind } = manifest ? await partitionCountsByKind(conn, id) : { counts: {}, byKind: {} };
      const history = await historyOf(conn, id, STATUS_LIMITS.history, STATUS_LIMITS.detailPartitions);
      const listing = opts.partitions;
      const total = listing ? (listing.status ? (counts[listing.status] ?? 0) : Object.values(counts).reduce((a, b) => a + b, 0)) : 0;
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
        counts,
        // The live path of the candidate: its catch-up frontier and latest round, and whether it
        // can ever be cut over (a release planned before carry partitions existed cannot).
        live: await liveOf(conn, id, r.expected_active, manifest !== null && byKind.carry !== undefined),
        // Its cutovers and rollbacks (genfill.cutovers): each attempt, how it ended, the freeze.
        switches: await switchesOf(conn, id),
        dependencies: await dependencyPins(conn, id),
        throttle: await latestThrottleDecision(conn, id),
        preparedTransactions: await oldestPreparedTransaction(conn),
        summary: manifest
          ? {
              byKind,
              ...(await partitionRanges(conn, id, STATUS_LIMITS.ranges)),
              slowest: await slowestPartitions(conn, id, STATUS_LIMITS.slowest),
            }
          : null,
        ...(listing
          ? {
              partitions: manifest ? await partitionPage(conn, id, listing) : [],
              page: { number: listing.page, size: listing.pageSize, total, pages: Math.ceil(total / listing.pageSize), status: listing.status },
            }
          : {}),
        /** The latest entries (at most STATUS_LIMITS.history), oldest first; historyTotal counts them all. */
        history: history.entries,
        historyTotal: history.total,
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
       SELECT r.* FROM genfill.current_receipts r
        WHERE r.release = $1)
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
