// Reconciliation of the demo candidate against two floors measured side by side in one run,
// with the time of each check (issue 19, part 3: "a reconcile cheaper than a rebuild"):
//   - one sequential scan of every relation it reads — the source, its dependency tables, the
//     old and the new generation: target ≤ 4×, goal 3×;
//   - one INSERT … SELECT of the same transform (examples/transforms/order-tax-fix.sql over the
//     release's range, as bench/build.ts does it) into a fresh generation table, dropped after:
//     target ≤ 0.5×.
// And what bounds a reconciliation from below whatever its plan: one pass of the row hash (key
// and row roots) over the candidate, the transform over the source alone, and the pairing of
// the old with the new generation (a merge full join counting rows).
//
//   npx tsx bench/reconcile.ts [--rows 2000000] [--runs 3] [--connections 2] [--workers n] [--json]
//
// The arms are interleaved within each run, in reverse order every other run. With --json the
// progress goes to stderr and one JSON document to stdout: the figures, and last `ratio`, the
// reconcile's time over one scan of every relation (medians).
//
// Without DATABASE_URL it uses a database genfill_bench_reconcile, created on first use and
// seeded by `genfill demo --rows <rows> --until build` (the demo's story up to a BUILT
// candidate). With DATABASE_URL it reconciles --release there (run the demo first).
//
// The candidate is built first if it is not (claimPartition + buildPartition for every
// partition, as a worker does). A RECONCILED release is reconciled again (a pass records a
// new reconciliation without a state change), so the bench can be repeated.
import { mkdtempSync, readFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { buildPartition, claimPartition } from '@genfill/builder';
import { quoteQualified } from '@genfill/contracts';
import { startBuilding } from '@genfill/planner';
import { reconcile, type ReconcileResult } from '@genfill/reconcile';
import { createPool, migrate, qualifiedGenerationTable, relationColumns, SYSTEM_COLUMNS, type Db } from '@genfill/registry';
import { benchDatabase, benchEnv, cliRunner } from './support.ts';

const { values: args } = parseArgs({
  options: {
    release: { type: 'string', default: 'order-tax-fix@3' },
    runs: { type: 'string', default: '3' },
    // Passed to reconcile(): connections sharing the snapshot, parallel workers per pass.
    connections: { type: 'string', default: '2' },
    workers: { type: 'string' },
    rows: { type: 'string', default: '2000000' },
    json: { type: 'boolean', default: false },
  },
});
const RELEASE = args.release!;
const log = (line: string) => (args.json ? process.stderr : process.stdout).write(`${line}\n`);
const RUNS = Math.max(1, Number(args.runs));
const DATABASE_URL = (await benchDatabase('genfill_bench_reconcile')).toString();
if (!process.env.DATABASE_URL) {
  // The demo's story up to a BUILT candidate; run again, it finds every step done.
  log(`preparing: genfill demo --rows ${args.rows} --until build`);
  const dir = mkdtempSync(join(tmpdir(), 'genfill-bench-reconcile-demo-'));
  await cliRunner(benchEnv(new URL(DATABASE_URL), '{genfill-bench-reconcile}'))('demo', '--rows', args.rows!, '--until', 'build', '--no-throttle', '--dir', dir);
}
const db = createPool({ DATABASE_URL } as never, 'bench-reconcile', 6);
const secs = (ms: number) => `${(ms / 1000).toFixed(2)}s`;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

interface Subject {
  state: string;
  dataset: string;
  generation: string;
  expected_active: string | null;
  source: string;
  dependencies: string[];
}

async function subject(): Promise<Subject> {
  const { rows } = await db.query<Subject>(
    `SELECT state, dataset, generation, expected_active, spec #>> '{source,table}' AS source,
            ARRAY(SELECT jsonb_array_elements_text(spec -> 'dependencies')) AS dependencies
       FROM genfill.releases WHERE id = $1`,
    [RELEASE],
  );
  if (!rows[0]) throw new Error(`release ${RELEASE} does not exist: run \`genfill demo\` against this database first`);
  return rows[0];
}

/** Build every partition that is not built yet, as a worker would. */
async function ensureBuilt(): Promise<void> {
  let s = await subject();
  if (s.state === 'SNAPSHOT_PINNED') await startBuilding(db, RELEASE);
  s = await subject();
  if (s.state === 'BUILDING') {
    const { rows } = await db.query<{ id: string }>(`SELECT id FROM genfill.partitions WHERE release = $1 AND status <> 'BUILT' ORDER BY seq`, [RELEASE]);
    const t = performance.now();
    for (const p of rows) {
      const c = await claimPartition(db, { release: RELEASE, partition: p.id, worker: 'bench', leaseMs: 600_000 });
      if (c.kind === 'claimed') await buildPartition(db, { release: RELEASE, partition: p.id, attempt: c.attempt });
    }
    log(`built ${rows.length} partitions in ${secs(performance.now() - t)}`);
    s = await subject();
  }
  if (s.state !== 'BUILT' && s.state !== 'RECONCILED') throw new Error(`release ${RELEASE} is ${s.state}: the bench needs it BUILT or RECONCILED`);
}

/** One aggregate per column that makes the scan read (and detoast) it. */
async function scanSql(relation: string): Promise<string> {
  const columns = await relationColumns(db, relation);
  const agg = columns.map(({ name, type }) => {
    const c = `"${name.replace(/"/g, '""')}"`;
    if (/^(smallint|integer|bigint|numeric|real|double)/.test(type)) return `sum(${c})`;
    if (/^(text|character)/.test(type)) return `sum(length(${c}))`;
    return `count(${c})`;
  });
  return `SELECT count(*), ${agg.join(', ')} FROM ${relation}`;
}

async function scanAll(relations: string[]): Promise<Record<string, number>> {
  const conn = await db.connect();
  try {
    // The reconciler's sessions run with jit off; the baseline gets the same settings.
    await conn.query('SET jit = off');
    const out: Record<string, number> = {};
    for (const r of relations) {
      const sql = await scanSql(r);
      const t = performance.now();
      await conn.query(sql);
      out[r] = performance.now() - t;
    }
    return out;
  } finally {
    conn.release();
  }
}

/**
 * The floor of any root recomputation: one pass of genfill.row_hash over the candidate's
 * rows (the shared definition), on one connection. Reconciliation needs two such passes
 * (stored rows and dual compute) besides the old-vs-new join.
 */
async function hashFloor(relation: string): Promise<number> {
  const columns = await relationColumns(db, relation, { except: SYSTEM_COLUMNS });
  const conn = await db.connect();
  try {
    await conn.query('SET jit = off');
    const cols = columns.map((c) => `genfill.canon(t."${c.name.replace(/"/g, '""')}")`).join(', ');
    const t = performance.now();
    await conn.query(`SELECT sum(genfill.row_hash(ARRAY[${cols}]::text[])) FROM ${relation} AS t`);
    return performance.now() - t;
  } finally {
    conn.release();
  }
}

/** Key and row hash of every candidate row in the range: the receipts' roots need both. */
async function keyRowHashes(relation: string, key: string[], range: { from: string; to: string }): Promise<number> {
  const columns = await relationColumns(db, relation, { except: SYSTEM_COLUMNS });
  const canon = (names: string[]) => names.map((c) => `genfill.canon(t."${c.replace(/"/g, '""')}")`).join(', ');
  return timedOn(
    `SELECT sum(genfill.row_hash(ARRAY[${canon(key)}]::text[])), sum(genfill.row_hash(ARRAY[${canon(columns.map((c) => c.name))}]::text[]))
       FROM ${relation} AS t WHERE t.created_at >= $1 AND t.created_at < $2 AND NOT t._gf_deleted`,
    [range.from, range.to],
  );
}

/** The transform over the source in the range, every output column read. */
async function transformOnly(transform: string, range: { from: string; to: string }): Promise<number> {
  return timedOn(
    `SELECT count(*), sum(order_id), count(created_at), sum(length(region)), sum(amount_cents), sum(tax_cents)
       FROM (WITH source AS (SELECT * FROM public.orders WHERE created_at >= $1 AND created_at < $2) SELECT * FROM (${transform}) q) t`,
    [range.from, range.to],
  );
}

/** Pairing the old with the new generation's live rows in the range by key, nothing compared. */
async function pairing(s: Subject, range: { from: string; to: string }): Promise<number> {
  const side = (g: string) =>
    `(SELECT order_id FROM ${qualifiedGenerationTable(s.dataset, g)} WHERE generation = '${g.replace(/'/g, "''")}' AND created_at >= $1 AND created_at < $2 AND NOT _gf_deleted ORDER BY generation, order_id)`;
  return timedOn(`SELECT count(*) FROM ${side(s.generation)} AS n FULL JOIN ${side(s.expected_active!)} AS o ON n.order_id = o.order_id`, [range.from, range.to]);
}

/**
 * One INSERT … SELECT of the transform over the range into a fresh generation table of the
 * dataset (created by genfill.add_generation, as bench/build.ts does), timed; the table is
 * detached and dropped after.
 */
async function insertSelect(s: Subject, transform: string, range: { from: string; to: string }, run: number): Promise<number> {
  const gen = `bench-rec-${process.pid}-${run}`;
  await db.query(`SELECT genfill.add_generation($1, $2)`, [s.dataset, gen]);
  const table = qualifiedGenerationTable(s.dataset, gen);
  try {
    return await timedOn(
      `INSERT INTO ${table} (generation, order_id, created_at, region, amount_cents, tax_cents)
       SELECT $3, t.* FROM (WITH source AS (SELECT * FROM public.orders WHERE created_at >= $1 AND created_at < $2) SELECT * FROM (${transform}) q) t`,
      [range.from, range.to, gen],
    );
  } finally {
    await db.query(`ALTER TABLE ${quoteQualified(`genfill_data.${s.dataset}`)} DETACH PARTITION ${table}`);
    await db.query(`DROP TABLE ${table}`);
  }
}

async function timedOn(sql: string, values: unknown[]): Promise<number> {
  const conn = await db.connect();
  try {
    await conn.query('SET jit = off');
    const t = performance.now();
    await conn.query(sql, values);
    return performance.now() - t;
  } finally {
    conn.release();
  }
}

await migrate(db);
await ensureBuilt();
const s = await subject();
const relations = [
  quoteQualified(s.source),
  ...s.dependencies.map(quoteQualified),
  ...(s.expected_active ? [qualifiedGenerationTable(s.dataset, s.expected_active)] : []),
  qualifiedGenerationTable(s.dataset, s.generation),
];
const { rows: rangeRows } = await db.query<{ from: string; to: string }>(
  `SELECT lower(range)::text AS "from", upper(range)::text AS "to" FROM genfill.releases WHERE id = $1`,
  [RELEASE],
);
const range = rangeRows[0]!;
const TRANSFORM = readFileSync(join(dirname(fileURLToPath(import.meta.url)), '..', 'examples', 'transforms', 'order-tax-fix.sql'), 'utf8').trim().replace(/;\s*$/, '');
const dir = mkdtempSync(join(tmpdir(), 'genfill-bench-reconcile-'));
log(
  `reconcile bench: ${RELEASE} (${s.dataset}/${s.generation} vs ${s.expected_active ?? 'none'}), ${RUNS} runs, ${cpus().length} CPUs, ` +
    `${args.connections} connections, parallel workers per pass: ${args.workers ?? 'server default'}`,
);
await scanAll(relations); // warm the cache for both sides alike

const floors: number[] = [];
const baselines: number[] = [];
const scans: Record<string, number[]> = {};
const totals: number[] = [];
const inserts: number[] = [];
const bounds: Record<'keyRowHashes' | 'transform' | 'pairing', number[]> = { keyRowHashes: [], transform: [], pairing: [] };
const checks: Record<string, number[]> = {};
let last: ReconcileResult | undefined;
for (let i = 0; i < RUNS; i++) {
  const arms: [string, () => Promise<void>][] = [
    [
      'scans',
      async () => {
        const b = await scanAll(relations);
        for (const [r, ms] of Object.entries(b)) (scans[r] ??= []).push(ms);
        baselines.push(Object.values(b).reduce((x, y) => x + y, 0));
      },
    ],
    ['insert', async () => void inserts.push(await insertSelect(s, TRANSFORM, range, i))],
    [
      'floors',
      async () => {
        floors.push(await hashFloor(relations.at(-1)!));
        bounds.keyRowHashes.push(await keyRowHashes(relations.at(-1)!, ['order_id'], range));
        bounds.transform.push(await transformOnly(TRANSFORM, range));
        if (s.expected_active) bounds.pairing.push(await pairing(s, range));
      },
    ],
    [
      'reconcile',
      async () => {
        const t = performance.now();
        last = await reconcile(db as Db, RELEASE, {
          findingsDir: dir,
          connections: Number(args.connections),
          ...(args.workers !== undefined ? { workersPerPass: Number(args.workers) } : {}),
        });
        totals.push(performance.now() - t);
        for (const [k, ms] of Object.entries(last.summary.timings)) (checks[k] ??= []).push(ms);
      },
    ],
  ];
  // Interleaved: a, b, c, d in one run, d, c, b, a in the next.
  for (const [, arm] of i % 2 === 0 ? arms : [...arms].reverse()) await arm();
  log(
    `  run ${i + 1}: scans ${secs(baselines.at(-1)!)}, INSERT … SELECT ${secs(inserts.at(-1)!)}, reconcile ${secs(totals.at(-1)!)} → ${last!.state}, ${last!.findings.count} findings`,
  );
}

const base = median(baselines);
const ins = median(inserts);
const rec = median(totals);
const spread = (xs: number[]) => `${secs(Math.min(...xs))}–${secs(Math.max(...xs))}`;
log('\nsequential scans (median)');
for (const [r, ms] of Object.entries(scans)) log(`  ${r.padEnd(48)} ${secs(median(ms))}`);
log(`  ${'total'.padEnd(48)} ${secs(base)} (runs ${spread(baselines)})`);
log(`  ${'INSERT … SELECT of the transform'.padEnd(48)} ${secs(ins)} (runs ${spread(inserts)})`);
const floor = median(floors);
log(`\nwhat bounds it (median, one connection, the server's parallel workers)`);
log(`  ${'one row-hash pass over the candidate'.padEnd(48)} ${secs(floor)} = ${(floor / base).toFixed(2)}× the scans`);
const bound = Object.fromEntries(Object.entries(bounds).filter(([, v]) => v.length > 0).map(([k, v]) => [k, median(v)]));
for (const [k, ms] of Object.entries(bound)) log(`  ${k.padEnd(48)} ${secs(ms)} = ${(ms / base).toFixed(2)}× the scans`);
log('\nreconcile checks (median; the merge slices and the source and carry passes share the connections)');
for (const [k, ms] of Object.entries(checks)) log(`  ${k.padEnd(48)} ${secs(median(ms))}`);
const ratio = rec / base;
const overInsert = rec / ins;
const r1 = (ms: number) => Math.round(ms * 10) / 10;
const r3 = (x: number) => Math.round(x * 1000) / 1000;
const medians = (m: Record<string, number[]>) => Object.fromEntries(Object.entries(m).map(([k, ms]) => [k, r1(median(ms))]));
log(
  `\nreconcile ${secs(rec)} (runs ${spread(totals)}) vs scans ${secs(base)}: ${ratio.toFixed(2)}× (target ≤ 4×, goal 3×) — ${ratio <= 3 ? 'goal met' : ratio <= 4 ? 'target met' : 'OVER target'}`,
);
log(`reconcile vs INSERT … SELECT ${secs(ins)}: ${overInsert.toFixed(2)}× (target ≤ 0.5×) — ${overInsert <= 0.5 ? 'target met' : 'OVER target'}`);
log(`rows: ${last!.summary.rows.stored} stored, ${last!.summary.rows.dual} dual, ${last!.summary.rows.old} old; aggregate passes read ${last!.summary.rowsRead.aggregate} rows`);
await db.end();
if (args.json) {
  process.stdout.write(
    `${JSON.stringify({
      release: RELEASE,
      runs: RUNS,
      cpus: cpus().length,
      connections: Number(args.connections),
      workersPerPass: args.workers !== undefined ? Number(args.workers) : null,
      targets: { ratio: 4, ratioGoal: 3, overInsertSelect: 0.5 },
      state: last!.state,
      findings: last!.findings.count,
      // Medians of RUNS, ms.
      scanMs: medians(scans),
      scansTotalMs: r1(base),
      insertSelectMs: r1(ins),
      hashFloorMs: r1(floor),
      hashFloorOverScans: r3(floor / base),
      boundsMs: Object.fromEntries(Object.entries(bound).map(([k, v]) => [k, r1(v)])),
      checkMs: medians(checks),
      reconcileMs: r1(rec),
      runsMs: totals.map((ms, i) => ({ scans: r1(baselines[i]!), insertSelect: r1(inserts[i]!), reconcile: r1(ms), hashFloor: r1(floors[i]!) })),
      rows: last!.summary.rows,
      rowsRead: last!.summary.rowsRead,
      overInsertSelect: r3(overInsert),
      ratio: r3(ratio),
    })}\n`,
  );
}
