// A carry partition (SPEC invariant 2) is one statement too: the active generation's rows of
// the chunk — live rows and tombstones, with their revisions — copied into the candidate, and
// the projector's frontier read in the same statement's snapshot as the watermark. The rows of
// the active generation reflect exactly the events visible in that frontier (the projector
// commits rows and frontier together), so catch-up from it misses nothing of the chunk.
import { isCarryMax, isCarryMin, quoteIdent, type Query } from '@genfill/contracts';
import { qualifiedGenerationTable, rootAgg, rowHashExpr } from '@genfill/registry';

export interface CarryStatementInput {
  dataset: string;
  generation: string;
  /** The active generation copied from (the release's expectedActive). */
  from: string;
  key: string[];
  time: string;
  timeType: string;
  columns: string[];
  conserved: string[];
  lower: Date;
  upper: Date;
  /** The chunk's bounds as the time column compares them (wall clocks for zone-less columns). */
  bounds: [Date | string, Date | string];
}

export function carryStatement(input: CarryStatementInput): Query {
  const q = quoteIdent;
  const time = q(input.time);
  const cols = input.columns.map(q);
  const cast = input.timeType === 'timestamp with time zone' ? 'timestamptz' : 'timestamp';
  // An unbounded end is not compared; its parameter is still typed (PostgreSQL wants every one).
  const conds = [`o.generation = $3`];
  conds.push(isCarryMin(input.lower) ? `$1::${cast} IS NOT NULL` : `o.${time} >= $1::${cast}`);
  conds.push(isCarryMax(input.upper) ? `$2::${cast} IS NOT NULL` : `o.${time} < $2::${cast}`);
  const sums = input.conserved.flatMap((c) => [
    `(SELECT coalesce(sum(${q(c)}), 0) FROM ins WHERE NOT _gf_deleted)::text AS ${q(`src_${c}`)}`,
    `(SELECT coalesce(sum(${q(c)}), 0) FROM ins WHERE NOT _gf_deleted)::text AS ${q(`out_${c}`)}`,
  ]);
  const text = `
WITH f AS MATERIALIZED (SELECT snapshot FROM genfill.frontiers WHERE dataset = $5 AND generation = $3),
ins AS (
  INSERT INTO ${qualifiedGenerationTable(input.dataset, input.generation)} (generation, ${cols.join(', ')}, _gf_rev, _gf_deleted)
  SELECT $4::text, ${cols.map((c) => `o.${c}`).join(', ')}, o._gf_rev, o._gf_deleted
    FROM ${qualifiedGenerationTable(input.dataset, input.from)} AS o
   WHERE ${conds.join(' AND ')}
  ON CONFLICT DO NOTHING
  RETURNING ${cols.join(', ')}, _gf_deleted
)
SELECT (SELECT snapshot FROM f)::text AS watermark,
       -- Live rows in and out (tombstones are copied too, with their revisions, but are not rows).
       (SELECT count(*) FROM ins WHERE NOT _gf_deleted) AS rows_in,
       (SELECT count(*) FROM ins WHERE NOT _gf_deleted) AS rows_out,
       (SELECT count(*) FROM ins) AS inserted,
       0 AS fanout_keys, NULL::text[] AS fanout_sample,
       (SELECT ${rootAgg(rowHashExpr(input.key, 'o'))} FROM ins AS o WHERE NOT o._gf_deleted)::text AS key_root,
       (SELECT ${rootAgg(rowHashExpr(input.columns, 'o'))} FROM ins AS o WHERE NOT o._gf_deleted)::text AS row_root${sums.map((x) => `,\n       ${x}`).join('')}`;
  return { text, values: [input.bounds[0], input.bounds[1], input.from, input.generation, input.dataset] };
}

/** A repair of a carry chunk first deletes the candidate's rows of it (tombstones too). */
export function carryDeleteStatement(input: Pick<CarryStatementInput, 'dataset' | 'generation' | 'time' | 'timeType' | 'lower' | 'upper' | 'bounds'>): Query {
  const time = quoteIdent(input.time);
  const cast = input.timeType === 'timestamp with time zone' ? 'timestamptz' : 'timestamp';
  const conds = [
    isCarryMin(input.lower) ? `$1::${cast} IS NOT NULL` : `${time} >= $1::${cast}`,
    isCarryMax(input.upper) ? `$2::${cast} IS NOT NULL` : `${time} < $2::${cast}`,
  ];
  return {
    text: `DELETE FROM ${qualifiedGenerationTable(input.dataset, input.generation)} WHERE ${conds.join(' AND ')}`,
    values: [input.bounds[0], input.bounds[1]],
  };
}
