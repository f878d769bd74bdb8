// What a reconciliation is about, read in its snapshot with the reconciler's own queries:
// the release, the dataset's columns, the manifest, the current receipts, the pins. Nothing
// here trusts a counter a worker wrote; receipts are loaded only to be checked.
import { NotFoundError, quoteQualified, RefusedError, type ReleaseState } from '@genfill/contracts';
import { parentExists, qualifiedGenerationTable, qualifiedParent, relationColumns, type Conn, type Db } from '@genfill/registry';
import { admitOnConnection, loadAdmittedTransform } from '@genfill/transform';
import { loadLive, notPending, type LiveView } from './live.ts';

const SYSTEM_COLUMNS = ['generation', '_gf_rev', '_gf_deleted'];

export interface Column {
  name: string;
  /** format_type() of the column: safe to splice into a cast. */
  type: string;
}

export interface PartitionRef {
  id: string;
  seq: number;
  kind: 'build' | 'carry';
  /** UTC ISO with microseconds, as the grid functions and the SQL parameters take them. */
  lower: string;
  upper: string;
  status: string;
}

export interface ReceiptRef {
  id: string;
  partition: string;
  kind: string;
  attempt: number;
  releaseDigest: string;
  transformDigest: string;
  watermark: string;
  rowsIn: string;
  rowsOut: string;
  keyRoot: string;
  rowRoot: string;
  conservedSums: Record<string, { source?: string | number | null; candidate?: string | number | null }>;
  dependencyHashes: Record<string, { rows?: string; hash?: string }>;
}

export interface Subject {
  release: string;
  state: ReleaseState;
  /** Compared again under the row lock before the verdict is stored. */
  stateChangedAt: string;
  digest: string;
  transformDigest: string;
  dataset: string;
  generation: string;
  expectedActive: string | null;
  from: string;
  to: string;
  timezone: string;
  every: string;
  sourceTable: string;
  key: string[];
  time: string;
  conserved: string[];
  expectedDiff: string[];
  /** The parent's data columns in attnum order: what a row hash covers. */
  columns: Column[];
  /** Types of the source table's columns, by name. */
  sourceTypes: Map<string, string>;
  /**
   * The relations the passes read, as `FROM <x> AS alias` takes them: the tables themselves,
   * or — when the release is on the live path (live.ts) — the rows of keys not pending, and
   * for the candidate without the tombstones catch-up wrote.
   */
  candidateTable: string;
  oldTable: string | null;
  sourceRel: string;
  /** The live path's view: the catch-up frontier verified at, pending keys, touched partitions. */
  live: LiveView | null;
  transformSql: string;
  manifest: { count: number; boundariesSha256: string; proofSha256: string | null } | null;
  /** Every stored partition, ordered by lower. */
  partitions: PartitionRef[];
  /** Current receipts (superseded by none), by partition; more than one is a finding. */
  receipts: Map<string, ReceiptRef[]>;
  pins: { relation: string; rowCount: string; contentHash: string }[];
  lastReceiptId: string;
}

const ISO = `'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'`;

interface ReleaseQueryRow {
  id: string;
  state: ReleaseState;
  state_changed_at: string;
  digest: string;
  transform_digest: string;
  dataset: string;
  generation: string;
  expected_active: string | null;
  range_from: string;
  range_to: string;
  timezone: string;
  every: string;
  spec: {
    source: { table: string; key: string[]; time: string };
    reconcile?: { conserved?: string[]; expectedDiff?: string[] };
  };
}

async function releaseRow(conn: Conn, id: string): Promise<ReleaseQueryRow> {
  const { rows } = await conn.query<ReleaseQueryRow>(
    `SELECT id, state, state_changed_at::text, digest, transform_digest, dataset, generation, expected_active,
            to_char(lower(range) AT TIME ZONE 'UTC', ${ISO}) AS range_from,
            to_char(upper(range) AT TIME ZONE 'UTC', ${ISO}) AS range_to,
            timezone, every, spec
       FROM genfill.releases WHERE id = $1`,
    [id],
  );
  if (!rows[0]) throw new NotFoundError(`release ${id} does not exist: submit it with \`genfill release submit <file>\``);
  return rows[0];
}

/** No parent yet is no columns (the caller refuses), not an error that aborts the snapshot. */
async function parentColumns(conn: Conn, dataset: string): Promise<Column[]> {
  if (!(await parentExists(conn, dataset))) return [];
  const columns = await relationColumns(conn, qualifiedParent(dataset), { except: SYSTEM_COLUMNS });
  return columns.map(({ name, type }) => ({ name, type }));
}

async function tableTypes(conn: Conn, table: string): Promise<Map<string, string>> {
  const columns = await relationColumns(conn, quoteQualified(table));
  return new Map(columns.map((c) => [c.name, c.type]));
}

/**
 * The release's transform for the dual compute, admitted again (issue 28: untrusted wherever a
 * service uses it); every query that carries it goes over the extended protocol (queryUserSql).
 */
async function transformSql(conn: Conn, release: string, digest: string): Promise<string> {
  return (await loadAdmittedTransform(conn, { digest, release })).sql;
}

/**
 * Admit the release's transform before the reconciliation's READ ONLY snapshot opens (the probe
 * cannot run inside it); loadSubject then finds the verdict for the same text cached. A release
 * that does not exist is left to loadSubject to refuse.
 */
export async function admitSubjectTransform(db: Db, id: string): Promise<void> {
  const { rows } = await db.query<{ transform_digest: string }>('SELECT transform_digest FROM genfill.releases WHERE id = $1', [id]);
  if (rows[0]) await admitOnConnection(db, { digest: rows[0].transform_digest, release: id });
}

async function manifestRow(conn: Conn, release: string): Promise<Subject['manifest']> {
  const { rows } = await conn.query<{ partition_count: number; boundaries_sha256: string; proof_sha256: string | null }>(
    `SELECT partition_count, boundaries_sha256, coverage_proof ->> 'boundariesSha256' AS proof_sha256
       FROM genfill.manifests WHERE release = $1`,
    [release],
  );
  const m = rows[0];
  return m ? { count: m.partition_count, boundariesSha256: m.boundaries_sha256, proofSha256: m.proof_sha256 } : null;
}

async function partitionRows(conn: Conn, release: string): Promise<PartitionRef[]> {
  const { rows } = await conn.query<PartitionRef>(
    `SELECT id, seq, kind, status,
            to_char(lower AT TIME ZONE 'UTC', ${ISO}) AS lower,
            to_char(upper AT TIME ZONE 'UTC', ${ISO}) AS upper
       FROM genfill.partitions WHERE release = $1 ORDER BY lower, upper, id`,
    [release],
  );
  return rows;
}

async function currentReceipts(conn: Conn, release: string): Promise<Map<string, ReceiptRef[]>> {
  const { rows } = await conn.query<ReceiptRef>(
    `SELECT r.id::text AS id, r.partition, r.kind, r.attempt, r.release_digest AS "releaseDigest",
            r.transform_digest AS "transformDigest", r.watermark::text AS watermark,
            r.rows_in::text AS "rowsIn", r.rows_out::text AS "rowsOut",
            r.key_root::text AS "keyRoot", r.row_root::text AS "rowRoot",
            r.conserved_sums AS "conservedSums", r.dependency_hashes AS "dependencyHashes"
       FROM genfill.current_receipts r
      WHERE r.release = $1
      ORDER BY r.partition, r.id`,
    [release],
  );
  const out = new Map<string, ReceiptRef[]>();
  for (const r of rows) out.set(r.partition, [...(out.get(r.partition) ?? []), r]);
  return out;
}

async function pins(conn: Conn, release: string): Promise<Subject['pins']> {
  const { rows } = await conn.query<{ relation: string; rowCount: string; contentHash: string }>(
    `SELECT relation, row_count::text AS "rowCount", content_hash::text AS "contentHash"
       FROM genfill.dependency_pins WHERE release = $1 ORDER BY relation`,
    [release],
  );
  return rows;
}

async function lastReceiptId(conn: Conn, release: string): Promise<string> {
  const { rows } = await conn.query<{ id: string }>(
    'SELECT coalesce(max(id), 0)::text AS id FROM genfill.receipts WHERE release = $1',
    [release],
  );
  return rows[0]!.id;
}

export const RECONCILABLE: readonly ReleaseState[] = ['BUILT', 'RECONCILED'];

/** Everything a reconciliation reads about the release, refused outside BUILT/RECONCILED. */
export async function loadSubject(conn: Conn, id: string): Promise<Subject> {
  const r = await releaseRow(conn, id);
  if (!RECONCILABLE.includes(r.state)) {
    throw new RefusedError(
      `release ${id} is ${r.state}: only a BUILT or RECONCILED release can be reconciled` +
        (r.state === 'BUILDING' ? ' (wait for every partition to be built: genfill status ' + id + ')' : ''),
    );
  }
  const columns = await parentColumns(conn, r.dataset);
  if (columns.length === 0) throw new RefusedError(`dataset ${r.dataset} has no generation table: plan the release first`);
  const names = new Set(columns.map((c) => c.name));
  const spec = r.spec;
  const sourceTypes = await tableTypes(conn, spec.source.table);
  const conserved = spec.reconcile?.conserved ?? [];
  for (const c of [...spec.source.key, spec.source.time]) {
    if (!names.has(c)) throw new RefusedError(`the generation table of ${r.dataset} has no column ${c} (key or time of ${id})`);
  }
  for (const c of conserved) {
    if (!names.has(c) || !sourceTypes.has(c)) {
      throw new RefusedError(`reconcile.conserved column ${c} of ${id} must be in both ${spec.source.table} and the generation table`);
    }
  }
  const candidateTable = qualifiedGenerationTable(r.dataset, r.generation);
  const oldTable = r.expected_active === null ? null : qualifiedGenerationTable(r.dataset, r.expected_active);
  const live = await loadLive(conn, {
    id: r.id,
    expectedActive: r.expected_active,
    sourceTable: spec.source.table,
    key: spec.source.key,
    time: spec.source.time,
    timezone: r.timezone,
    candidateTable,
    timeType: sourceTypes.get(spec.source.time) ?? 'timestamp with time zone',
  });
  const filtered = (table: string, alias: string, extra = '') =>
    live ? `(SELECT * FROM ${table} AS ${alias} WHERE ${extra}${notPending(live, spec.source.table, spec.source.key, alias)})` : table;
  return {
    release: r.id,
    state: r.state,
    stateChangedAt: r.state_changed_at,
    digest: r.digest,
    transformDigest: r.transform_digest,
    dataset: r.dataset,
    generation: r.generation,
    expectedActive: r.expected_active,
    from: r.range_from,
    to: r.range_to,
    timezone: r.timezone,
    every: r.every,
    sourceTable: spec.source.table,
    key: spec.source.key,
    time: spec.source.time,
    conserved,
    // A name that is not a column cannot differ; it is reported, not an error.
    expectedDiff: spec.reconcile?.expectedDiff ?? [],
    columns,
    sourceTypes,
    candidateTable: filtered(candidateTable, 'gf_c', 'NOT (gf_c."_gf_deleted" AND gf_c."_gf_rev" > 0) AND '),
    oldTable: oldTable === null ? null : filtered(oldTable, 'gf_o'),
    sourceRel: filtered(quoteQualified(spec.source.table), 'gf_s'),
    live,
    transformSql: await transformSql(conn, r.id, r.transform_digest),
    manifest: await manifestRow(conn, id),
    partitions: await partitionRows(conn, id),
    receipts: await currentReceipts(conn, id),
    pins: await pins(conn, id),
    lastReceiptId: await lastReceiptId(conn, id),
  };
}

export function buildPartitions(s: Subject): PartitionRef[] {
  return s.partitions.filter((p) => p.kind === 'build');
}

export function columnType(s: Subject, name: string): string {
  const c = s.columns.find((x) => x.name === name);
  if (!c) throw new Error(`no column ${name} in the generation table of ${s.dataset}`);
  return c.type;
}

export function sourceType(s: Subject, name: string): string {
  const t = s.sourceTypes.get(name);
  if (!t) throw new RefusedError(`${s.sourceTable} has no column ${name} (key or time of ${s.release})`);
  return t;
}
