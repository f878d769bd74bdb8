// The partition heatmap of a release on the status page: one SVG cell per partition, coloured
// by status, a failed one linking to its evidence and a running one showing its attempt. A
// manifest may hold up to 200,000 partitions (contracts' MAX_PARTITIONS); one cell each would
// make a page of megabytes that no one can read. Above MAX_CELLS the cells become calendar
// buckets in the release's own timezone — hours, days, weeks, months or years, the finest
// that stays within MAX_CELLS — counted by the database (GROUP BY date_trunc), so neither the
// page nor the API's memory grows with the manifest. A bucket is as bad as its worst
// partition: any failure makes it red and links to the first failed partition in it.
import type { Conn, Db } from '@genfill/registry';
import { esc, num, seg } from './html.ts';

/** At most this many cells per heatmap (test/status-page.test.ts checks a 87,672-partition manifest). */
export const MAX_CELLS = 1_000;
/** Cells per SVG row before a row wraps. */
const MAX_COLS = 96;

export type Bucket = 'hour' | 'day' | 'week' | 'month' | 'year';
type RowPeriod = 'day' | 'month' | 'year' | 'decade';

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;
/** The shortest each bucket can be (DST days have 23 hours), so the estimated count is never low. */
const SHORTEST_MS: Record<Bucket, number> = { hour: HOUR_MS, day: 23 * HOUR_MS, week: 7 * DAY_MS - HOUR_MS, month: 28 * DAY_MS - HOUR_MS, year: 365 * DAY_MS };
const BUCKETS = Object.keys(SHORTEST_MS) as Bucket[];
const ROW_OF: Record<Bucket, RowPeriod> = { hour: 'day', day: 'month', week: 'year', month: 'year', year: 'decade' };
const ROW_FORMAT: Record<RowPeriod, string> = { day: 'YYYY-MM-DD', month: 'YYYY-MM', year: 'YYYY', decade: 'YYYY"s"' };
const CELL_FORMAT: Record<Bucket, string> = { hour: 'YYYY-MM-DD HH24:00', day: 'YYYY-MM-DD', week: '"week of" YYYY-MM-DD', month: 'YYYY-MM', year: 'YYYY' };

export interface HeatmapRelease {
  id: string;
  timezone: string;
  from: Date;
  to: Date;
  /** Partitions in the manifest. */
  total: number;
}

export interface Cell {
  label: string;
  row: string;
  /** Partitions in the cell (1 when cells are partitions). */
  n: number;
  built: number;
  running: number;
  failed: number;
  /** The partition, when the cell is one. */
  partition: string | null;
  /** The highest attempt among its running partitions. */
  attempt: number | null;
  /** The first failed partition (by seq), whose evidence the cell links to. */
  failedPartition: string | null;
  /** A failed partition's reason, when the cell is one partition. */
  reason: string | null;
}

export interface Heatmap {
  /** 'partition': one cell per partition; otherwise the calendar bucket of a cell. */
  level: 'partition' | Bucket;
  total: number;
  cells: Cell[];
}

/** One cell per partition up to MAX_CELLS; above, the finest bucket whose count stays within it. */
export function chooseLevel(total: number, spanMs: number): Heatmap['level'] {
  if (total <= MAX_CELLS) return 'partition';
  return BUCKETS.find((b) => Math.ceil(spanMs / SHORTEST_MS[b]) + 1 <= MAX_CELLS) ?? 'year';
}

/** Rows of partition cells: a day of sub-daily partitions, a month of days, a year of weeks or months. */
function rowForPartitions(total: number, spanMs: number): RowPeriod {
  const each = spanMs / Math.max(total, 1);
  return each < DAY_MS ? 'day' : each < 7 * DAY_MS ? 'month' : each < 365 * DAY_MS ? 'year' : 'decade';
}

async function partitionCells(conn: Pick<Conn | Db, 'query'>, r: HeatmapRelease, row: RowPeriod): Promise<Cell[]> {
  const { rows } = await conn.query<{ id: string; status: string; attempt: number; reason: string | null; label: string; row: string }>(
    `SELECT id, status, attempt, reason, to_char(lower AT TIME ZONE $2, 'YYYY-MM-DD HH24:MI') AS label,
            to_char(date_trunc($3, lower, $2) AT TIME ZONE $2, $4) AS row
       FROM genfill.partitions WHERE release = $1 ORDER BY seq`,
    [r.id, r.timezone, row, ROW_FORMAT[row]],
  );
  return rows.map((p) => ({
    label: `${p.id} (from ${p.label})`,
    row: p.row,
    n: 1,
    built: p.status === 'BUILT' ? 1 : 0,
    running: p.status === 'RUNNING' ? 1 : 0,
    failed: p.status === 'FAILED' ? 1 : 0,
    partition: p.id,
    attempt: p.status === 'RUNNING' ? p.attempt : null,
    failedPartition: p.status === 'FAILED' ? p.id : null,
    reason: p.status === 'FAILED' ? p.reason : null,
  }));
}

async function bucketCells(conn: Pick<Conn | Db, 'query'>, r: HeatmapRelease, bucket: Bucket): Promise<Cell[]> {
  const row = ROW_OF[bucket];
  const { rows } = await conn.query<{ label: string; row: string; n: number; built: number; running: number; failed: number; attempt: number | null; failed_id: string | null }>(
    `SELECT to_char(b.bucket AT TIME ZONE $2, $5) AS label,
            to_char(date_trunc($4, b.bucket, $2) AT TIME ZONE $2, $6) AS row,
            b.n, b.built, b.running, b.failed, b.attempt, b.failed_id
       FROM (SELECT date_trunc($3, lower, $2) AS bucket, min(seq) AS first_seq, count(*)::int AS n,
                    count(*) FILTER (WHERE status = 'BUILT')::int AS built,
                    count(*) FILTER (WHERE status = 'RUNNING')::int AS running,
                    count(*) FILTER (WHERE status = 'FAILED')::int AS failed,
                    max(attempt) FILTER (WHERE status = 'RUNNING') AS attempt,
                    (array_agg(id ORDER BY seq) FILTER (WHERE status = 'FAILED'))[1] AS failed_id
               FROM genfill.partitions WHERE release = $1
              GROUP BY 1) b
      ORDER BY b.first_seq`,
    [r.id, r.timezone, bucket, row, CELL_FORMAT[bucket], ROW_FORMAT[row]],
  );
  return rows.map((b) => ({ ...b, partition: null, failedPartition: b.failed_id, reason: null }));
}

export async function loadHeatmap(conn: Pick<Conn | Db, 'query'>, r: HeatmapRelease): Promise<Heatmap> {
  const span = r.to.getTime() - r.from.getTime();
  const level = chooseLevel(r.total, span);
  const cells = level === 'partition' ? await partitionCells(conn, r, rowForPartitions(r.total, span)) : await bucketCells(conn, r, level);
  return { level, total: r.total, cells };
}

type CellClass = 'f' | 'r' | 'b' | 'm' | 'p';
const CLASS_NAME: Record<CellClass, string> = { f: 'failed', r: 'running', b: 'built', m: 'partly built', p: 'pending' };

function classOf(c: Cell): CellClass {
  if (c.failed > 0) return 'f';
  if (c.running > 0) return 'r';
  if (c.built === c.n) return 'b';
  return c.built > 0 ? 'm' : 'p';
}

function titleOf(c: Cell, level: Heatmap['level']): string {
  if (level === 'partition') {
    const status = CLASS_NAME[classOf(c)];
    return `${c.label}: ${status}${c.attempt !== null ? `, attempt ${c.attempt}` : ''}${c.reason ? ` (${c.reason})` : ''}`;
  }
  const pending = c.n - c.built - c.running - c.failed;
  return (
    `${c.label}: ${num(c.n)} partitions, ${num(c.built)} built, ${num(c.running)} running` +
    `${c.attempt !== null ? ` (attempt up to ${c.attempt})` : ''}, ${num(c.failed)} failed, ${num(pending)} pending` +
    (c.failedPartition ? `; first failed ${c.failedPartition}` : '')
  );
}

const COLOURS: Record<CellClass, string> = { f: '#cf222e', r: '#0969da', b: '#2da44e', m: '#a6e3b0', p: '#d0d7de' };
/** The cell colours, for the page's style sheet (SVG fills and the legend's swatches). */
export const HEATMAP_STYLE = Object.entries(COLOURS)
  .map(([k, c]) => `svg.heatmap .${k}{fill:${c}}.legend .${k}{background:${c}}`)
  .join('') + 'svg.heatmap .a{fill:#fff;font-size:9px}';

export function evidencePath(release: string, partition: string): string {
  return `/status/releases/${seg(release)}/partitions/${seg(partition)}`;
}

const LEVEL_TEXT: Record<Heatmap['level'], string> = { partition: 'one cell per partition', hour: 'hourly cells', day: 'daily cells', week: 'weekly cells', month: 'monthly cells', year: 'yearly cells' };

/** The SVG with its legend. Rows hold a calendar period (row labels left); long rows wrap. */
export function renderHeatmap(h: Heatmap, release: string, timezone: string): string {
  if (h.cells.length === 0) return '<p class="muted">No manifest yet: the heatmap appears once the release is planned.</p>';
  const lines: { row: string; label: string; cells: Cell[] }[] = [];
  for (const c of h.cells) {
    const last = lines.at(-1);
    const sameRow = last !== undefined && last.row === c.row;
    if (sameRow && last.cells.length < MAX_COLS) last.cells.push(c);
    // A wrapped row carries no label of its own.
    else lines.push({ row: c.row, label: sameRow ? '' : c.row, cells: [c] });
  }
  const cols = Math.max(...lines.map((l) => l.cells.length));
  const pitch = Math.max(6, Math.min(16, Math.floor(900 / cols)));
  const size = pitch - (pitch >= 10 ? 2 : 1);
  const labelWidth = 84;
  const width = labelWidth + cols * pitch;
  const height = lines.length * pitch;
  const out: string[] = [];
  lines.forEach((line, y) => {
    const top = y * pitch;
    if (line.label) out.push(`<text x="0" y="${top + size - 1}">${esc(line.label)}</text>`);
    line.cells.forEach((c, x) => {
      const cls = classOf(c);
      const left = labelWidth + x * pitch;
      const rect = `<rect x="${left}" y="${top}" width="${size}" height="${size}" class="${cls}"><title>${esc(titleOf(c, h.level))}</title></rect>`;
      const attempt = cls === 'r' && h.level === 'partition' && size >= 10 && c.attempt !== null && c.attempt < 10
        ? `<text class="a" x="${left + size / 2 - 2.5}" y="${top + size - 2}">${c.attempt}</text>`
        : '';
      out.push(c.failedPartition ? `<a href="${esc(evidencePath(release, c.failedPartition))}">${rect}</a>` : rect + attempt);
    });
  });
  const legend = (['b', 'm', 'r', 'f', 'p'] as CellClass[]).map((k) => `<span class="${k}"></span>${CLASS_NAME[k]}`).join('');
  return (
    `<p class="muted">${num(h.total)} partitions, ${LEVEL_TEXT[h.level]}${h.level === 'partition' ? '' : ` (${num(h.cells.length)})`} in ${esc(timezone)}; ` +
    'a failed cell links to its evidence.</p>' +
    `<svg class="heatmap" data-level="${h.level}" data-cells="${h.cells.length}" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="partition heatmap of ${esc(release)}">` +
    `${out.join('')}</svg><p class="legend">${legend}</p>`
  );
}
