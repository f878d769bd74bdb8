// The manifest of a release: its build partitions (the grid, computed by the database), carry
// chunks, the coverage proof re-derived from the stored rows, and the dependency pins.
import { pgErrorCode, RefusedError, SQLSTATE, type CoverageProof, type GridPartition, type GridSteps } from '@genfill/contracts';
import type { Conn } from './db.ts';

export interface PartitionRow {
  release: string;
  id: string;
  seq: number;
  kind: 'build' | 'carry';
  lower: Date;
  upper: Date;
  status: 'PENDING' | 'RUNNING' | 'BUILT' | 'FAILED';
  attempt: number;
  est_rows: string | null;
  reason: string | null;
  evidence: unknown;
  updated_at: Date;
  /** From the partition's current receipt (the one no repair superseded), when built. */
  receipt: { id: string; rows_in: string; rows_out: string; key_root: string; row_root: string; watermark: string; timings: Record<string, number>; kind: string } | null;
}

export async function insertPartitions(conn: Conn, release: string, parts: GridPartition[]): Promise<void> {
  // One statement for the whole grid: unnest keeps it a single round trip for 10^5 rows.
  await conn.query(
    `INSERT INTO genfill.partitions (release, id, seq, kind, lower, upper)
     SELECT $1, id, seq, kind, lower, upper
       FROM unnest($2::text[], $3::int[], $4::text[], $5::timestamptz[], $6::timestamptz[])
            AS p(id, seq, kind, lower, upper)`,
    [release, parts.map((p) => p.id), parts.map((p) => p.seq), parts.map((p) => p.kind), parts.map((p) => p.lower), parts.map((p) => p.upper)],
  );
}

/**
 * The grid of SPEC "Release" → "Grid" (invariant 1) in SQL, so the manifest's rows never cross
 * the wire: lower(k) = from + k·every and upper(k) = least(lower(k + 1), to) for k < count,
 * with computeGrid's ids (b- and the lower in ISO basic format, UTC), seq = k and kind build.
 * Like Temporal's ZonedDateTime.add (the reference, packages/contracts/src/grid.ts): the months
 * and days of k·every go onto the wall clock of `from` in the zone (a timestamp: calendar
 * arithmetic, month ends clamped), that wall clock becomes an instant once, and the seconds of
 * k·every are then added as elapsed time. Each k is computed from `from` afresh; a
 * generate_series over timestamps would add cumulatively (31 Jan + P1M + P1M = 28 Mar).
 *
 * The wall clock → instant step is Temporal's ("compatible"), not PostgreSQL's: with z the wall
 * clock read as UTC and w0, w1 the zone's offsets at z ∓ 1 day, a wall clock in a repeated hour
 * takes the earlier instant (z − w0) where a timestamptz cast takes the later one; in a skipped
 * hour both take z − w0 (02:30 Berlin on the last Sunday of March is 03:30 CEST); otherwise the
 * single offset that maps back to z. The zone is the session TimeZone, set for this statement
 * only (AT TIME ZONE would read CET, EET, … as fixed abbreviations; SET reads the tzdata zones).
 * `count` is the reference grid's; the caller compares the stored grid's proof with it.
 */
export async function insertGrid(
  conn: Conn,
  g: { release: string; from: string; to: string; timezone: string; steps: GridSteps; count: number },
): Promise<void> {
  const { rows } = await conn.query<{ tz: string }>(`SELECT current_setting('TimeZone') AS tz`);
  try {
    await conn.query(`SELECT set_config('TimeZone', $1, true)`, [g.timezone]);
  } catch (err) {
    // Not contracts' table: here 22023 is PostgreSQL refusing TimeZone (its tzdata lacks the
    // zone), a precondition of the server rather than the caller's bad input.
    if (pgErrorCode(err) !== SQLSTATE.invalidParameterValue) throw err;
    throw new RefusedError(
      `PostgreSQL does not know the time zone ${g.timezone} of release ${g.release} (${(err as Error).message}): update the server's tzdata or choose another zone, then plan again`,
      { cause: err },
    );
  }
  await conn.query(
    `WITH wall AS (
       -- The months and days of k·every on the wall clock of from, read as UTC: z seconds.
       SELECT k, extract(epoch FROM $2::timestamptz::timestamp + make_interval(months => k * $5::int, days => k * $6::int))::bigint AS z
         FROM generate_series(0, $4::int) AS k
     ), offsets AS (
       SELECT k, z, extract(timezone FROM to_timestamp(z - 86400))::bigint AS w0, extract(timezone FROM to_timestamp(z + 86400))::bigint AS w1
         FROM wall
     ), bounds AS (
       -- k = 0 is from itself, and without months or days the wall clock is never consulted.
       SELECT k,
              CASE WHEN k = 0 OR ($5::int = 0 AND $6::int = 0) THEN $2::timestamptz
                   ELSE to_timestamp(z - CASE WHEN w0 <> w1 AND extract(timezone FROM to_timestamp(z - w0)) = extract(timezone FROM to_timestamp(z - w1))
                                              THEN extract(timezone FROM to_timestamp(z - w0))::bigint
                                              ELSE w0 END)
              END
              + make_interval(hours => (k * $7::bigint / 3600)::int, mins => (k * $7::bigint % 3600 / 60)::int, secs => k * $7::bigint % 60) AS lower
         FROM offsets
     ), grid AS (
       SELECT k, lower, least(lead(lower) OVER (ORDER BY k), $3::timestamptz) AS upper FROM bounds
     )
     INSERT INTO genfill.partitions (release, id, seq, kind, lower, upper)
     SELECT $1, 'b-' || to_char(lower AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS"Z"'), k, 'build', lower, upper
       FROM grid WHERE k < $4`,
    [g.release, g.from, g.to, g.count, g.steps.months, g.steps.days, g.steps.seconds],
  );
  await conn.query(`SELECT set_config('TimeZone', $1, true)`, [rows[0]!.tz]);
}

/** A stored instant as coverageProof formats it (whole seconds, UTC). */
const ISO_UTC = (column: string) => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')`;

/**
 * coverageProof's figures re-derived by the database from the stored build partitions (what is
 * stored, not what the planner meant to store), in the order coverageProof reads them: contiguous
 * in order of lower, exact ends, overlaps and gaps by a sweep over (lower, upper) with the reach
 * of the partitions before, and the sha256 of every lower and the last upper, one a line.
 */
export async function storedCoverage(
  conn: Conn,
  release: string,
  range: { from: string; to: string },
): Promise<Pick<CoverageProof, 'count' | 'contiguous' | 'exactEnds' | 'overlaps' | 'gaps' | 'boundariesSha256'>> {
  const { rows } = await conn.query<{ count: number; contiguous: boolean; exactEnds: boolean; overlaps: number; gaps: number; boundariesSha256: string }>(
    `WITH p AS (
       SELECT lower, upper, row_number() OVER w AS i, lead(lower) OVER w AS next_lower,
              max(upper) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
         FROM genfill.partitions WHERE release = $1 AND kind = 'build'
       WINDOW w AS (ORDER BY lower, upper))
     SELECT count(*)::int AS count,
            count(*) > 0 AND coalesce(bool_and(lower < upper AND (next_lower IS NULL OR next_lower = upper)), false) AS contiguous,
            coalesce(bool_or(i = 1 AND lower = $2::timestamptz), false) AND coalesce(bool_or(next_lower IS NULL AND upper = $3::timestamptz), false) AS "exactEnds",
            count(*) FILTER (WHERE lower < reach)::int AS overlaps,
            (count(*) FILTER (WHERE greatest(coalesce(reach, $2::timestamptz), $2::timestamptz) < least(lower, $3::timestamptz))
              + CASE WHEN greatest(coalesce(max(upper), $2::timestamptz), $2::timestamptz) < $3::timestamptz THEN 1 ELSE 0 END)::int AS gaps,
            encode(sha256(convert_to(coalesce(string_agg(${ISO_UTC('lower')}, E'\n' ORDER BY lower, upper)
                                              || E'\n' || max(${ISO_UTC('upper')}) FILTER (WHERE next_lower IS NULL), ''), 'UTF8')), 'hex') AS "boundariesSha256"
       FROM p`,
    [release, range.from, range.to],
  );
  return rows[0]!;
}

/** The first and last build partitions (by seq, which is k: the order of lower) and the number of carry chunks. */
export async function manifestEnds(
  conn: Conn,
  release: string,
): Promise<{ first: { id: string; lower: string; upper: string } | null; last: { id: string; lower: string; upper: string } | null; carry: number }> {
  const { rows } = await conn.query<{ first: { id: string; lower: string; upper: string } | null; last: { id: string; lower: string; upper: string } | null; carry: number }>(
    `SELECT (SELECT json_build_object('id', id, 'lower', ${ISO_UTC('lower')}, 'upper', ${ISO_UTC('upper')})
               FROM genfill.partitions WHERE release = $1 AND kind = 'build' ORDER BY seq LIMIT 1) AS first,
            (SELECT json_build_object('id', id, 'lower', ${ISO_UTC('lower')}, 'upper', ${ISO_UTC('upper')})
               FROM genfill.partitions WHERE release = $1 AND kind = 'build' ORDER BY seq DESC LIMIT 1) AS last,
            (SELECT count(*)::int FROM genfill.partitions WHERE release = $1 AND kind = 'carry') AS carry`,
    [release],
  );
  return rows[0]!;
}

export async function insertManifest(
  conn: Conn,
  m: { release: string; count: number; boundariesSha256: string; proof: CoverageProof },
): Promise<void> {
  await conn.query(
    `INSERT INTO genfill.manifests (release, partition_count, boundaries_sha256, coverage_proof) VALUES ($1, $2, $3, $4)`,
    [m.release, m.count, m.boundariesSha256, JSON.stringify(m.proof)],
  );
}

/** The stored partitions in order, as the grid type (for re-deriving the coverage proof). */
export async function storedGrid(conn: Conn, release: string): Promise<GridPartition[]> {
  const { rows } = await conn.query<{ seq: number; id: string; kind: 'build' | 'carry'; lower: string; upper: string }>(
    `SELECT seq, id, kind,
            ${ISO_UTC('lower')} AS lower, ${ISO_UTC('upper')} AS upper
       FROM genfill.partitions WHERE release = $1 ORDER BY lower`,
    [release],
  );
  return rows;
}

/** Closure as the database sees it: the union of the partitions' ranges. */
export async function rangeUnion(conn: Conn, release: string): Promise<string[]> {
  const { rows } = await conn.query<{ r: string }>(
    `SELECT unnest(range_agg(tstzrange(lower, upper, '[)')))::text AS r FROM genfill.partitions WHERE release = $1 AND kind = 'build'`,
    [release],
  );
  return rows.map((r) => r.r);
}

export interface ManifestSummary {
  partition_count: number;
  boundaries_sha256: string;
  coverage_proof: CoverageProof & { rangeUnion?: string[] };
  created_at: Date;
  created_by: string;
}

export async function findManifest(conn: Conn, release: string): Promise<ManifestSummary | null> {
  const { rows } = await conn.query<ManifestSummary>(
    'SELECT partition_count, boundaries_sha256, coverage_proof, created_at, created_by FROM genfill.manifests WHERE release = $1',
    [release],
  );
  return rows[0] ?? null;
}

export async function listPartitions(conn: Conn, release: string): Promise<PartitionRow[]> {
  const { rows } = await conn.query<PartitionRow>(
    `SELECT p.release, p.id, p.seq, p.kind, p.lower, p.upper, p.status, p.attempt, p.est_rows, p.reason, p.evidence, p.updated_at,
            (SELECT jsonb_build_object('id', r.id::text, 'rows_in', r.rows_in::text, 'rows_out', r.rows_out::text,
                                       'key_root', r.key_root::text, 'row_root', r.row_root::text,
                                       'watermark', r.watermark::text, 'timings', r.timings, 'kind', r.kind)
               FROM genfill.current_receipts r
              WHERE r.release = p.release AND r.partition = p.id) AS receipt
       FROM genfill.partitions p WHERE p.release = $1 ORDER BY p.seq`,
    [release],
  );
  return rows;
}

export async function partitionCounts(conn: Conn, release: string): Promise<Record<string, number>> {
  const { rows } = await conn.query<{ status: string; n: number }>(
    'SELECT status, count(*)::int AS n FROM genfill.partitions WHERE release = $1 GROUP BY status',
    [release],
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

export async function insertDependencyPin(
  conn: Conn,
  p: { release: string; relation: string; rowCount: string; contentHash: string },
): Promise<void> {
  await conn.query(
    'INSERT INTO genfill.dependency_pins (release, relation, row_count, content_hash) VALUES ($1, $2, $3, $4)',
    [p.release, p.relation, p.rowCount, p.contentHash],
  );
}

export async function dependencyPins(conn: Conn, release: string): Promise<{ relation: string; row_count: string; content_hash: string }[]> {
  const { rows } = await conn.query(
    'SELECT relation, row_count, content_hash FROM genfill.dependency_pins WHERE release = $1 ORDER BY relation',
    [release],
  );
  return rows;
}
