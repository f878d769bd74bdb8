// `genfill diff <release>`: the rows a release changes, old (its expected active generation)
// against new (its candidate), key by key. Counts of keys changed, only in old and only in
// new, rows changed per column (as the reconciler counts them), and a sample of N keys with
// both rows side by side. A tombstone (_gf_deleted) is no row.
//
// Read-only, in one REPEATABLE READ READ ONLY transaction, so the counts and the sample
// describe one snapshot. The counts are one pass: one full join of the two partitions on the
// key, every count an aggregate FILTER over it. The sample is a second, bounded statement in
// the same snapshot: the same join, only the keys that differ, the first N in key order (a
// top-N sort keeps N rows in memory, never the join). Both generations are read through the
// parent with `generation = $g`, which plan-time pruning turns into one partition each, and no
// lease is taken: a retirement's DETACH … CONCURRENTLY and DROP wait for this transaction.
import { GenerationGoneError, InvalidInputError, NotFoundError, quoteIdent as q, RefusedError } from '@genfill/contracts';
import { type Conn, dataColumns, type Db, findDataset, generationGoneReason, qualifiedParent, withTransaction } from '@genfill/registry';
import { col, type Column, distinct, outputValue, Params, type Row } from './sql.ts';

export const DIFF_SAMPLE = { default: 20, max: 10_000 } as const;

export interface DiffSampleEntry {
  /** The key, each value in PostgreSQL's text form. */
  key: Record<string, string>;
  /** The old generation's row, null when the key is only in the new one. */
  old: Row | null;
  new: Row | null;
  /** The non-key columns whose values differ (empty when the key is on one side only). */
  changed: string[];
}

export interface DiffResult {
  release: string;
  dataset: string;
  old: string;
  new: string;
  counts: { changed: number; onlyInOld: number; onlyInNew: number; unchanged: number };
  /** Rows whose column differs, per non-key column (keys on both sides only). */
  columns: Record<string, number>;
  sample: DiffSampleEntry[];
}

export function parseSample(sample: number | string | null | undefined): number {
  if (sample === undefined || sample === null || sample === '') return DIFF_SAMPLE.default;
  const n = typeof sample === 'number' ? sample : /^\d+$/.test(sample.trim()) ? Number(sample.trim()) : NaN;
  if (!Number.isInteger(n) || n < 0 || n > DIFF_SAMPLE.max) {
    throw new InvalidInputError([{ path: '--sample', message: `must be a whole number from 0 to ${DIFF_SAMPLE.max}, not ${JSON.stringify(sample)}` }]);
  }
  return n;
}

interface Sides {
  dataset: string;
  old: string;
  new: string;
  key: Column[];
  /** Non-key data columns. */
  other: Column[];
  columns: Column[];
}

async function sidesOf(conn: Conn, release: string): Promise<Sides> {
  const { rows } = await conn.query<{ dataset: string; generation: string; expected_active: string | null; known: boolean; old_known: boolean }>(
    `SELECT r.dataset, r.generation, r.expected_active,
            EXISTS (SELECT 1 FROM genfill.generations g WHERE g.dataset = r.dataset AND g.generation = r.generation) AS known,
            EXISTS (SELECT 1 FROM genfill.generations g WHERE g.dataset = r.dataset AND g.generation = r.expected_active) AS old_known
       FROM genfill.releases r WHERE r.id = $1`,
    [release],
  );
  const r = rows[0];
  if (!r) throw new NotFoundError(`release ${release} does not exist: \`genfill status\` lists the releases`);
  if (r.expected_active === null) {
    throw new RefusedError(`release ${release} builds the first generation of ${r.dataset} (no expected active generation): there are no old rows to compare with`);
  }
  if (!r.old_known) throw new RefusedError(`release ${release} expects generation ${r.expected_active} of ${r.dataset}, which does not exist: there are no old rows to compare with`);
  if (!r.known) throw new RefusedError(`release ${release} is not planned yet: its generation ${r.generation} does not exist (genfill plan ${release})`);
  for (const g of [r.expected_active, r.generation]) {
    const reason = await generationGoneReason(conn, r.dataset, g);
    if (reason) throw new GenerationGoneError(r.dataset, g, null, reason);
  }
  const ds = await findDataset(conn, r.dataset);
  const columns = await dataColumns(conn, r.dataset);
  const keyNames = ds!.key_columns;
  return {
    dataset: r.dataset,
    old: r.expected_active,
    new: r.generation,
    key: keyNames.map((k) => columns.find((c) => c.name === k)!),
    other: columns.filter((c) => !keyNames.includes(c.name)),
    columns,
  };
}

/** `o FULL JOIN n ON key`: each side one generation's live rows, the data columns only. */
function joined(s: Sides, p: Params): string {
  const side = (alias: string, generation: string) =>
    `(SELECT ${s.columns.map((c) => col(alias, c.name)).join(', ')}
          FROM ${qualifiedParent(s.dataset)} AS ${alias}
         WHERE ${alias}."generation" = ${p.add(generation)} AND NOT ${alias}."_gf_deleted") AS ${alias}`;
  return `${side('o', s.old)}
  FULL JOIN ${side('n', s.new)} ON ${s.key.map((k) => `${col('o', k.name)} = ${col('n', k.name)}`).join(' AND ')}`;
}

const k0 = (s: Sides, alias: string) => col(alias, s.key[0]!.name);
const both = (s: Sides) => `${k0(s, 'o')} IS NOT NULL AND ${k0(s, 'n')} IS NOT NULL`;
const differs = (c: Column) => distinct(col('o', c.name), col('n', c.name), c.type);
const anyDiffers = (s: Sides) => (s.other.length ? s.other.map(differs).join(' OR ') : 'false');

function diffCountsSql(s: Sides): { text: string; values: unknown[] } {
  const p = new Params();
  const text = `SELECT count(*) FILTER (WHERE ${k0(s, 'n')} IS NULL)::bigint AS only_old,
       count(*) FILTER (WHERE ${k0(s, 'o')} IS NULL)::bigint AS only_new,
       count(*) FILTER (WHERE ${both(s)} AND (${anyDiffers(s)}))::bigint AS changed,
       count(*) FILTER (WHERE ${both(s)})::bigint AS both${s.other
         .map((c, i) => `,\n       count(*) FILTER (WHERE ${both(s)} AND ${differs(c)})::bigint AS "c_${i}"`)
         .join('')}
  FROM ${joined(s, p)}`;
  return { text, values: p.values };
}

/**
 * The first `n` differing keys in key order with both rows. The inner query only joins,
 * filters and keeps the top n (a heap of n rows); the rows' JSON is built for those n alone.
 */
function diffSampleSql(s: Sides, n: number): { text: string; values: unknown[] } {
  const p = new Params();
  // The picked rows' columns, renamed o_<i> / n_<i> so both sides fit one row.
  const as = (side: 'o' | 'n', i: number) => `${side}_${i}`;
  const picked = s.columns.flatMap((c, i) => [`${col('o', c.name)} AS ${as('o', i)}`, `${col('n', c.name)} AS ${as('n', i)}`]);
  const at = (side: 'o' | 'n', name: string) => col('d', as(side, s.columns.findIndex((c) => c.name === name)));
  const present = (side: 'o' | 'n') => `${at(side, s.key[0]!.name)} IS NOT NULL`;
  const project = (side: 'o' | 'n', cols: readonly Column[], text: boolean) =>
    `(SELECT ${cols.map((c) => `${text ? `${at(side, c.name)}::text` : outputValue({ ...c, ref: at(side, c.name) })} AS ${q(c.name)}`).join(', ')})`;
  const changed = s.other.length
    ? `array_remove(ARRAY[${s.other
        .map((c) => `CASE WHEN ${present('o')} AND ${present('n')} AND ${distinct(at('o', c.name), at('n', c.name), c.type)} THEN ${p.add(c.name)}::text END`)
        .join(', ')}], NULL)`
    : `'{}'::text[]`;
  const inner = `SELECT ${picked.join(', ')}
    FROM ${joined(s, p)}
   WHERE ${k0(s, 'o')} IS NULL OR ${k0(s, 'n')} IS NULL OR (${anyDiffers(s)})
   ORDER BY ${s.key.map((k) => `coalesce(${col('o', k.name)}, ${col('n', k.name)})`).join(', ')}
   LIMIT ${p.add(n)}`;
  const text = `SELECT CASE WHEN ${present('o')} THEN row_to_json(ko) ELSE row_to_json(kn) END AS key,
       CASE WHEN ${present('o')} THEN row_to_json(ro) END AS old,
       CASE WHEN ${present('n')} THEN row_to_json(rn) END AS new,
       ${changed} AS changed
  FROM (${inner}) AS d
 CROSS JOIN LATERAL ${project('o', s.key, true)} AS ko
 CROSS JOIN LATERAL ${project('n', s.key, true)} AS kn
 CROSS JOIN LATERAL ${project('o', s.columns, false)} AS ro
 CROSS JOIN LATERAL ${project('n', s.columns, false)} AS rn
 ORDER BY ${s.key.map((k) => `coalesce(${at('o', k.name)}, ${at('n', k.name)})`).join(', ')}`;
  return { text, values: p.values };
}

/** Old vs new of a release: counts, per-column changes and a sample, in one snapshot. */
export async function diffRelease(db: Db, release: string, o: { sample?: number | string | null } = {}): Promise<DiffResult> {
  const n = parseSample(o.sample);
  return withTransaction(
    db,
    async (conn) => {
      await conn.query('SET TRANSACTION READ ONLY');
      const s = await sidesOf(conn, release);
      const counts = diffCountsSql(s);
      const c = (await conn.query<Record<string, string>>(counts.text, counts.values)).rows[0]!;
      const sampleSql = diffSampleSql(s, n);
      const sample = n === 0 ? [] : (await conn.query<DiffSampleEntry>(sampleSql.text, sampleSql.values)).rows;
      const changed = Number(c.changed);
      return {
        release,
        dataset: s.dataset,
        old: s.old,
        new: s.new,
        counts: { changed, onlyInOld: Number(c.only_old), onlyInNew: Number(c.only_new), unchanged: Number(c.both) - changed },
        columns: Object.fromEntries(s.other.map((col, i) => [col.name, Number(c[`c_${i}`])])),
        sample,
      };
    },
    'REPEATABLE READ',
  );
}
