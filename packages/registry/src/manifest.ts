import type { CoverageProof, GridPartition } from '@genfill/contracts';
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
            to_char(lower AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS lower,
            to_char(upper AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS upper
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
               FROM genfill.receipts r
              WHERE r.release = p.release AND r.partition = p.id
                AND NOT EXISTS (SELECT 1 FROM genfill.receipts s WHERE s.supersedes = r.id)) AS receipt
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
