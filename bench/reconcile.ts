// Reconciliation of the demo candidate against one sequential scan of every relation it
// reads — the source, its dependency tables, the old and the new generation — measured side
// by side in one run (issue 6: target ≤ 2×, goal 1.5×), with the time of each check.
//
//   npx tsx bench/reconcile.ts [--rows 2000000] [--runs 3] [--connections 2] [--workers n] [--json]
//
// With --json the progress goes to stderr and one JSON document to stdout: the figures, and
// last `ratio`, the reconcile's time over one scan of every relation (medians).
//
// Without DATABASE_URL it uses a database genfill_bench_reconcile, created on first use and
// seeded by `genfill demo --rows <rows> --until build` (the demo's story up to a BUILT
// candidate). With DATABASE_URL it reconciles --release there (run the demo first).
//
// The candidate is built first if it is not (claimPartition + buildPartition for every
// partition, as a worker does). A RECONCILED release is reconciled again (a pass records a
// new reconciliation without a state change), so the bench can be repeated.
import { mkdtempSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
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

await migrate(db);
await ensureBuilt();
const s = await subject();
const relations = [
  quoteQualified(s.source),
  ...s.dependencies.map(quoteQualified),
  ...(s.expected_active ? [qualifiedGenerationTable(s.dataset, s.expected_active)] : []),
  qualifiedGenerationTable(s.dataset, s.generation),
];
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
const checks: Record<string, number[]> = {};
let last: ReconcileResult | undefined;
for (let i = 0; i < RUNS; i++) {
  const b = await scanAll(relations);
  for (const [r, ms] of Object.entries(b)) (scans[r] ??= []).push(ms);
  baselines.push(Object.values(b).reduce((x, y) => x + y, 0));
  floors.push(await hashFloor(relations.at(-1)!));
  const t = performance.now();
  last = await reconcile(db as Db, RELEASE, {
    findingsDir: dir,
    connections: Number(args.connections),
    ...(args.workers !== undefined ? { workersPerPass: Number(args.workers) } : {}),
  });
  totals.push(performance.now() - t);
  for (const [k, ms] of Object.entries(last.summary.timings)) (checks[k] ??= []).push(ms);
  log(`  run ${i + 1}: scans ${secs(baselines.at(-1)!)}, reconcile ${secs(totals.at(-1)!)} → ${last.state}, ${last.findings.count} findings`);
}

const base = median(baselines);
const rec = median(totals);
log('\nsequential scans (median)');
for (const [r, ms] of Object.entries(scans)) log(`  ${r.padEnd(48)} ${secs(median(ms))}`);
log(`  ${'total'.padEnd(48)} ${secs(base)}`);
const floor = median(floors);
log(`  ${'one row-hash pass over the candidate (floor)'.padEnd(48)} ${secs(floor)} = ${(floor / base).toFixed(2)}× the scans`);
log('\nreconcile checks (median; each pass timed on its own, two connections share the snapshot)');
for (const [k, ms] of Object.entries(checks)) log(`  ${k.padEnd(48)} ${secs(median(ms))}`);
const ratio = rec / base;
const r1 = (ms: number) => Math.round(ms * 10) / 10;
const medians = (m: Record<string, number[]>) => Object.fromEntries(Object.entries(m).map(([k, ms]) => [k, r1(median(ms))]));
log(`\nreconcile ${secs(rec)} vs scans ${secs(base)}: ${ratio.toFixed(2)}× (target ≤ 2×, goal 1.5×) — ${ratio <= 1.5 ? 'goal met' : ratio <= 2 ? 'target met' : 'OVER target'}`);
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
      targets: { ratio: 2, ratioGoal: 1.5 },
      state: last!.state,
      findings: last!.findings.count,
      // Medians of RUNS, ms.
      scanMs: medians(scans),
      scansTotalMs: r1(base),
      hashFloorMs: r1(floor),
      hashFloorOverScans: Math.round((floor / base) * 1000) / 1000,
      checkMs: medians(checks),
      reconcileMs: r1(rec),
      runsMs: totals.map((ms, i) => ({ scans: r1(baselines[i]!), reconcile: r1(ms), hashFloor: r1(floors[i]!) })),
      rows: last!.summary.rows,
      rowsRead: last!.summary.rowsRead,
      ratio: Math.round(ratio * 1000) / 1000,
    })}\n`,
  );
}
