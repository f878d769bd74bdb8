// What the projector needs to know about a dataset, read in the batch's own snapshot (the
// active generation and its transform map may change at a cutover; a batch that read the old
// ones is fenced in its tail, never applied to the wrong generation).
//
// Every entry's transform text is admitted again here (loadAdmittedTransform, issue 28), in the
// batch's own transaction, before any writer of a generation from the log — a projector batch,
// a catch-up round, a cutover's or rollback's apply and replay — turns it into SQL: they all
// take their map from this function. Its statements go over the extended protocol (applyStep).
import { quoteIdent, wallClockBounds } from '@genfill/contracts';
import { dataColumns, relationColumns, type Conn } from '@genfill/registry';
import type { ConsumeOrder } from '@genfill/capture';
import { loadAdmittedTransform } from '@genfill/transform';

/** One entry of a generation's transform_map, with its SQL and the time bounds as the column compares them. */
export interface MapEntry {
  from: string | null;
  to: string | null;
  transform: string;
  release: string | null;
  sql: string;
  /** SQL literal bounds for the time column (null: unbounded). */
  lower: string | null;
  upper: string | null;
}

export interface ProjectedDataset {
  name: string;
  /** The captured source as genfill.change_log.source_table spells it. */
  sourceTable: string;
  /** `trigger` capture (latest = event id) or an ingress mirror (latest = revision). */
  order: ConsumeOrder;
  key: string[];
  time: string;
  timeType: string;
  generation: string;
  epoch: number;
  ingress: 'OPEN' | 'SEALED';
  map: MapEntry[];
  /** The parent's data columns, in order: what every transform outputs. */
  columns: string[];
  /** The source's columns, in order: the rows the events' images populate. */
  sourceColumns: string[];
  /** Captured dependency tables (a change marks the dataset stale). */
  dependencies: string[];
  /** Declared dependencies that are not captured: staleness cannot be seen for these. */
  uncapturedDependencies: string[];
}

export class ProjectorNotReadyError extends Error {
  constructor(
    readonly dataset: string,
    readonly why: string,
  ) {
    super(`projector for ${dataset}: ${why}`);
  }
}

interface MapJson {
  from: string | null;
  to: string | null;
  transform: string;
  release: string | null;
}

function literal(v: string): string {
  return `'${v.replace(/'/g, "''")}'`;
}

function boundSql(type: string, value: string | null, timezone: string | null, side: 'lower' | 'upper'): string | null {
  if (value === null) return null;
  if (type === 'timestamp with time zone') return `${literal(value)}::timestamptz`;
  // A zone-less column compares wall clocks of the entry's release zone (as the build does).
  const wall = wallClockBounds(value, value, timezone ?? 'UTC')[side];
  return `${literal(wall)}::timestamp`;
}

/** Release states whose dependencies no longer matter (an ACTIVE release's are in the map). */
const CLOSED_STATES = ['CANCELLED', 'SUPERSEDED', 'RETIRED', 'ROLLED_BACK'];

/** Datasets a projector serves: an active generation with a recorded frontier. */
export async function projectableDatasets(conn: Pick<Conn, 'query'>, only?: string[]): Promise<string[]> {
  const { rows } = await conn.query<{ name: string }>(
    `SELECT d.name FROM genfill.datasets d
       JOIN genfill.frontiers f ON f.dataset = d.name AND f.generation = d.active_generation
      WHERE $1::text[] IS NULL OR d.name = ANY($1::text[])
      ORDER BY d.name`,
    [only && only.length > 0 ? only : null],
  );
  return rows.map((r) => r.name);
}

/**
 * The dataset as its active generation's writer sees it — or, with `generation`, as a writer of
 * that generation (catch-up of a candidate) does: its own transform map.
 */
export async function loadDataset(conn: Conn, name: string, opts: { generation?: string } = {}): Promise<ProjectedDataset> {
  const { rows } = await conn.query<{
    source_table: string | null;
    mode: 'trigger' | 'ingress' | null;
    key_columns: string[];
    time_column: string;
    active_generation: string | null;
    ingress_state: 'OPEN' | 'SEALED';
    ingress_epoch: string;
    transform_map: MapJson[] | null;
    declared_source: string;
  }>(
    `SELECT c.source_table, c.mode, d.key_columns, d.time_column, d.active_generation, d.ingress_state, d.ingress_epoch::text,
            g.transform_map, d.source_table AS declared_source
       FROM genfill.datasets d
       LEFT JOIN genfill.captures c ON c.relid = to_regclass(d.source_table)
       LEFT JOIN genfill.generations g ON g.dataset = d.name AND g.generation = coalesce($2, d.active_generation)
      WHERE d.name = $1`,
    [name, opts.generation ?? null],
  );
  const d = rows[0];
  if (!d) throw new ProjectorNotReadyError(name, 'the dataset does not exist');
  if (!d.active_generation) throw new ProjectorNotReadyError(name, 'it has no active generation');
  const generation = opts.generation ?? d.active_generation;
  if (!d.source_table || !d.mode) throw new ProjectorNotReadyError(name, `its source ${d.declared_source} is not captured: run \`genfill capture install ${d.declared_source}\``);
  const entries = d.transform_map ?? [];
  if (entries.length === 0) throw new ProjectorNotReadyError(name, `generation ${generation} has an empty transform map`);
  const { rows: zones } = await conn.query<{ release: string; timezone: string }>(
    `SELECT r.id AS release, r.timezone FROM genfill.releases r WHERE r.id = ANY($1::text[])`,
    [entries.map((e) => e.release).filter((r): r is string => r !== null)],
  );
  const sourceCols = await relationColumns(conn, d.source_table);
  const timeType = sourceCols.find((c) => c.name === d.time_column)?.type;
  if (!timeType) throw new ProjectorNotReadyError(name, `${d.source_table} has no column ${d.time_column}`);
  const map: MapEntry[] = [];
  for (const e of entries) {
    const { sql } = await loadAdmittedTransform(conn, { digest: e.transform, release: e.release, dataset: name });
    const timezone = zones.find((z) => z.release === e.release)?.timezone ?? null;
    map.push({ ...e, sql, lower: boundSql(timeType, e.from, timezone, 'lower'), upper: boundSql(timeType, e.to, timezone, 'upper') });
  }
  // Watched: what the adopt recorded, what the map's releases read, and what every open
  // release on the dataset declares — a candidate's own dependency changes its rows too, even
  // while the active map names no release (an adopted generation, a rollback to one).
  const { rows: deps } = await conn.query<{ relation: string; captured: boolean }>(
    `WITH declared AS (
       SELECT dd.relation FROM genfill.dataset_dependencies dd WHERE dd.dataset = $1
       UNION
       SELECT jsonb_array_elements_text(r.spec->'dependencies') FROM genfill.releases r
        WHERE r.id IN (SELECT e.release FROM jsonb_to_recordset($2::jsonb) AS e (release text))
           OR (r.dataset = $1 AND r.state NOT IN (${CLOSED_STATES.map(literal).join(', ')})))
     SELECT coalesce(c.source_table, x.relation) AS relation, c.source_table IS NOT NULL AND c.mode = 'trigger' AS captured
       FROM declared x LEFT JOIN genfill.captures c ON c.relid = to_regclass(x.relation)
      ORDER BY 1`,
    [name, JSON.stringify(entries)],
  );
  return {
    name,
    sourceTable: d.source_table,
    order: d.mode === 'ingress' ? 'revision' : 'event',
    key: d.key_columns,
    time: d.time_column,
    timeType,
    generation,
    epoch: Number(d.ingress_epoch),
    ingress: d.ingress_state,
    map,
    columns: (await dataColumns(conn, name)).map((c) => c.name),
    sourceColumns: sourceCols.map((c) => c.name),
    dependencies: deps.filter((x) => x.captured).map((x) => x.relation),
    uncapturedDependencies: deps.filter((x) => !x.captured).map((x) => x.relation),
  };
}

/** `time >= lower AND time < upper` for an entry, or TRUE when unbounded at both ends. */
export function entryFilter(entry: Pick<MapEntry, 'lower' | 'upper'>, time: string, alias: string): string {
  const t = `${alias}.${quoteIdent(time)}`;
  const parts = [entry.lower && `${t} >= ${entry.lower}`, entry.upper && `${t} < ${entry.upper}`].filter(Boolean);
  return parts.length > 0 ? parts.join(' AND ') : 'true';
}
