// `genfill plan` of a ten-year hourly release (87,672 partitions) against one `INSERT … SELECT`
// of the same manifest rows, side by side in one run (issue 19, part 1: target ≤ 10× that
// insert).
//
//   npx tsx bench/plan.ts [--rounds 3] [--json] [--keep]
//
// Each round runs every arm once, interleaved (plan as a process, the floor insert, plan in
// process, the primary-key-only insert, plan's steps one by one, the grid's old and new code);
// medians and min–max are printed per arm. A plan arm plans a fresh release of its own dataset
// (submitted untimed beforehand) and is timed as an operator sees it:
// - process: `node apps/cli/bin/genfill.js plan <release>` (node start-up and tsx compiling the
//   sources included; `genfill --help` is the process floor, printed beside it);
// - in process: `main(['plan', <release>])` of @genfill/cli: manifest, estimates and BUILDING,
//   and the dispatch of the first window of jobs to Redis (GENFILL_DISPATCH_WINDOW, 10,000);
// - steps: planRelease (the manifest), startBuilding (row estimates per partition, → BUILDING)
//   and the dispatch (`genfill plan` once more: only the Redis half is left), timed apart.
// The floor is the same 87,672 rows of a DRAFT release of the round written by one INSERT …
// SELECT into the real genfill.partitions (its keys, checks, the manifest's foreign key and the
// exclusion constraint's GiST index), committed like plan's and deleted after it, and into a
// table with only the primary key. `grid old` times what plan did before the grid moved to SQL
// (computeGrid, coverageProof, the unnest insert, the read back and the proof re-derived in
// TypeScript) and `grid new` what it does now (plannedGrid, insertGrid, storedCoverage), both
// in a rolled-back transaction on the real table. Every arm is followed (untimed) by a VACUUM
// of the table and a CHECKPOINT, so no arm pays for writing out the one before it. `ratio` is the in-process plan over the real-table insert
// (medians); `ratioProcess` the same with the process; `perRound` each arm over the insert of
// its own round (median, min, max), which the machine's load moves less.
//
// The database genfill_bench_plan is created afresh (DATABASE_URL is not used: the bench drops
// what it made); the queues live under GENFILL_QUEUE_PREFIX {genfill-bench-plan}, deleted after
// every round and at the end.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { parse, stringify } from 'yaml';
import { main } from '@genfill/cli';
import { computeGrid, coverageProof, plannedGrid } from '@genfill/contracts';
import { planRelease, startBuilding } from '@genfill/planner';
import { createRedis } from '@genfill/queue';
import { createPool, insertGrid, insertPartitions, storedCoverage, storedGrid, type Conn } from '@genfill/registry';
import { benchDatabase, benchEnv, cliRunner, dropBenchDatabase, quantile } from './support.ts';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    keep: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
  },
});
const ROUNDS = Math.max(1, Number(args.rounds));
const log = (line: string) => (args.json ? process.stderr : process.stdout).write(`${line}\n`);
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const FROM = '2015-07-01T00:00:00Z';
const TO = '2025-07-01T00:00:00Z';
const N = 87_672;
const GRID = { from: FROM, to: TO, timezone: 'UTC', every: 'PT1H' };
const PREFIX = '{genfill-bench-plan}';

delete process.env.DATABASE_URL; // the bench's own database, dropped at the end
const url = await benchDatabase('genfill_bench_plan', { fresh: true });
const env = benchEnv(url, PREFIX);
const cli = cliRunner(env);
const db = createPool({ DATABASE_URL: url.toString() } as never, 'bench-plan', 2);
const redis = createRedis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
const dir = mkdtempSync(join(tmpdir(), 'genfill-bench-plan-'));
const median = (xs: number[]) => quantile(xs, 0.5);
const ms = (v: number) => `${Math.round(v).toLocaleString('en-US')} ms`;
const times: Record<string, number[]> = {};
const record = (arm: string, t: number) => (times[arm] ??= []).push(performance.now() - t);
const clearQueues = async () => {
  const keys = await redis.keys(`${PREFIX}*`);
  if (keys.length > 0) await redis.del(...keys);
};
/**
 * After an arm (untimed): its queue deleted, the dead row versions of its estimates or rollback
 * vacuumed, and a checkpoint, so the next arm does not pay for writing out this one's dirty pages.
 */
const settle = async () => {
  await clearQueues();
  await db.query('VACUUM genfill.partitions');
  await db.query('CHECKPOINT');
};

/** Submits (untimed) a ten-year hourly release of a dataset of its own: plan arms each need a fresh one. */
let serial = 0;
async function submitted(): Promise<string> {
  const n = serial++;
  const id = `hourly-10y-${n}@1`;
  const r = parse(readFileSync(join(ROOT, 'examples/order-tax-fix.yaml'), 'utf8'));
  Object.assign(r, { release: id, dataset: `orders_hourly_${n}`, range: { from: FROM, to: TO }, timezone: 'UTC', partition: { every: 'PT1H' } });
  Object.assign(r.target, { table: `public.orders_hourly_${n}`, generation: 'g1', expectedActive: null });
  const file = join(dir, `release-${n}.yaml`);
  writeFileSync(file, stringify(r));
  await cli('release', 'submit', file);
  return id;
}

/** `fn` on one connection in a transaction that is rolled back, the manifest row of DRAFT `release` inserted first (untimed): the grid arms. */
async function rolledBack(release: string, fn: (conn: Conn) => Promise<void>): Promise<void> {
  const conn = await db.connect();
  try {
    await conn.query('BEGIN');
    await conn.query(`INSERT INTO genfill.manifests (release, partition_count, boundaries_sha256, coverage_proof) VALUES ($1, $2, 'bench', '{}')`, [release, N]);
    await fn(conn as unknown as Conn);
  } finally {
    await conn.query('ROLLBACK');
    conn.release();
  }
  // The rolled-back rows' dead index entries would slow every later arm.
  await settle();
}

const FLOOR_INSERT = (table: string) =>
  `INSERT INTO ${table} (release, id, seq, kind, lower, upper)
   SELECT $1, 'b-' || to_char(($2::timestamptz + k * interval '1 hour') AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS"Z"'), k, 'build',
          $2::timestamptz + k * interval '1 hour', $2::timestamptz + (k + 1) * interval '1 hour'
     FROM generate_series(0, $3 - 1) AS k`;

try {
  await cli('migrate');
  await db.query(readFileSync(join(ROOT, 'examples/schema.sql'), 'utf8'));
  await db.query('GRANT CREATE ON SCHEMA public TO genfill_owner');
  await db.query(`INSERT INTO public.tax_rates (region, rate) VALUES ('north', 0.19), ('south', 0.07), ('east', 0.2) ON CONFLICT DO NOTHING`);
  mkdirSync(join(dir, 'transforms'), { recursive: true });
  writeFileSync(join(dir, 'transforms/order-tax-fix.sql'), readFileSync(join(ROOT, 'examples/transforms/order-tax-fix.sql'), 'utf8'));
  await db.query('CREATE TABLE public.bench_manifest_plain (LIKE genfill.partitions INCLUDING DEFAULTS, PRIMARY KEY (release, id))');
  log(`plan bench: ten-year hourly releases, ${N.toLocaleString('en-US')} partitions each; ${ROUNDS} rounds, ${cpus().length} CPUs`);

  for (let round = 0; round < ROUNDS; round++) {
    // The floor and grid arms write the rows of a DRAFT release of their own, named like the
    // plan arms' releases: the exclusion constraint's GiST index is (release, range), and an id
    // that sorts apart from every other release's (the first version of this bench used one)
    // makes its overlap checks cheaper than a real plan's.
    const ids = { process: await submitted(), floor: await submitted(), inProcess: await submitted(), steps: await submitted() };
    const floorRelease = ids.floor;

    let t = performance.now();
    const help = spawnSync(process.execPath, [join(ROOT, 'apps/cli/bin/genfill.js'), '--help'], { env });
    record('processFloor', t);
    if (help.status !== 0) throw new Error(`genfill --help exited ${help.status}: ${help.stderr.toString()}`);

    t = performance.now();
    const res = spawnSync(process.execPath, [join(ROOT, 'apps/cli/bin/genfill.js'), 'plan', ids.process], { env, maxBuffer: 1 << 26 });
    record('planProcess', t);
    if (res.status !== 0) throw new Error(`genfill plan ${ids.process} exited ${res.status}: ${res.stderr.toString()}`);
    await settle();

    // The floor commits, as plan does (its WAL flushed); its rows are deleted afterwards, untimed.
    await db.query(`INSERT INTO genfill.manifests (release, partition_count, boundaries_sha256, coverage_proof) VALUES ($1, $2, 'bench', '{}')`, [floorRelease, N]);
    t = performance.now();
    await db.query(FLOOR_INSERT('genfill.partitions'), [floorRelease, FROM, N]);
    record('insert', t);
    await db.query('DELETE FROM genfill.partitions WHERE release = $1', [floorRelease]);
    await db.query('DELETE FROM genfill.manifests WHERE release = $1', [floorRelease]);
    await settle();

    t = performance.now();
    const code = await main(['plan', ids.inProcess], { out: () => undefined, err: (s) => log(s), env, tty: false });
    record('planInProcess', t);
    if (code !== 0) throw new Error(`genfill plan ${ids.inProcess} exited ${code}`);
    await settle();

    await db.query('TRUNCATE public.bench_manifest_plain');
    t = performance.now();
    await db.query(FLOOR_INSERT('public.bench_manifest_plain'), [floorRelease, FROM, N]);
    record('insertPrimaryKeyOnly', t);
    await settle();

    t = performance.now();
    await planRelease(db, ids.steps);
    record('stepManifest', t);
    await settle();
    t = performance.now();
    await startBuilding(db, ids.steps);
    record('stepEstimates', t);
    await settle();
    t = performance.now();
    if ((await main(['plan', ids.steps], { out: () => undefined, err: (s) => log(s), env, tty: false })) !== 0) throw new Error(`genfill plan ${ids.steps} failed`);
    record('stepDispatch', t);
    await settle();

    await rolledBack(floorRelease, async (conn) => {
      const s = performance.now();
      const grid = computeGrid(GRID);
      const planned = coverageProof(GRID, grid);
      await insertPartitions(conn, floorRelease, grid);
      const stored = coverageProof(GRID, await storedGrid(conn, floorRelease));
      record('gridOld', s);
      if (stored.boundariesSha256 !== planned.boundariesSha256) throw new Error('old grid path: proof differs');
    });
    await rolledBack(floorRelease, async (conn) => {
      const s = performance.now();
      const { proof, steps } = plannedGrid(GRID);
      await insertGrid(conn, { release: floorRelease, from: proof.from, to: proof.to, timezone: proof.timezone, steps, count: proof.count });
      const stored = await storedCoverage(conn, floorRelease, proof);
      record('gridNew', s);
      if (stored.boundariesSha256 !== proof.boundariesSha256) throw new Error('new grid path: proof differs');
    });

    log(`  round ${round + 1}: ${Object.entries(times).map(([arm, xs]) => `${arm} ${ms(xs.at(-1)!)}`).join(', ')}`);
  }

  const m = Object.fromEntries(Object.entries(times).map(([arm, xs]) => [arm, Math.round(median(xs))]));
  const spread = Object.fromEntries(Object.entries(times).map(([arm, xs]) => [arm, [Math.round(Math.min(...xs)), Math.round(Math.max(...xs))]]));
  const line = (label: string, arm: string) => log(`  ${label.padEnd(46)} ${ms(m[arm]!).padStart(10)}  (${ms(spread[arm]![0]!)} – ${ms(spread[arm]![1]!)})`);
  log('\nmedians (min – max):');
  line('genfill plan, process', 'planProcess');
  line('  process floor (genfill --help)', 'processFloor');
  line('genfill plan, in process', 'planInProcess');
  line('  manifest (planRelease)', 'stepManifest');
  line('  row estimates and BUILDING (startBuilding)', 'stepEstimates');
  line('  dispatch (the Redis half)', 'stepDispatch');
  line('grid old: computeGrid … insert … re-derive', 'gridOld');
  line('grid new: plannedGrid, insertGrid, proof in SQL', 'gridNew');
  line('INSERT … SELECT into genfill.partitions', 'insert');
  line('INSERT … SELECT, primary key only', 'insertPrimaryKeyOnly');
  // Per round, each arm over that round's floor: the machine's load moves both alike.
  const paired = (arm: string) => {
    const xs = times[arm]!.map((v, i) => v / times.insert![i]!);
    return { median: Math.round(median(xs) * 100) / 100, min: Math.round(Math.min(...xs) * 100) / 100, max: Math.round(Math.max(...xs) * 100) / 100 };
  };
  const perRound = Object.fromEntries(['planInProcess', 'planProcess', 'stepManifest', 'stepEstimates', 'gridOld', 'gridNew'].map((arm) => [arm, paired(arm)]));
  log('\nper round, over that round\'s insert (median, min – max):');
  for (const [arm, r] of Object.entries(perRound)) log(`  ${arm.padEnd(16)} ${r.median.toFixed(2)}×  (${r.min.toFixed(2)}× – ${r.max.toFixed(2)}×)`);
  const ratio = m.planInProcess! / m.insert!;
  const ratioProcess = m.planProcess! / m.insert!;
  const ratioPrimaryKeyOnly = m.planInProcess! / m.insertPrimaryKeyOnly!;
  const ratioManifest = m.stepManifest! / m.insert!;
  // Before: the same plan with the old grid code in place of the new (its other steps unchanged).
  const beforeEstimate = m.planInProcess! - m.gridNew! + m.gridOld!;
  log(
    `\ngenfill plan ${ms(m.planInProcess!)} in process vs the insert ${ms(m.insert!)}: ${ratio.toFixed(2)}× (target ≤ 10×) — ${ratio <= 10 ? 'target met' : 'OVER target'}; ` +
      `as a process ${ratioProcess.toFixed(2)}×; the manifest alone ${ratioManifest.toFixed(2)}×`,
  );
  log(`against the primary-key-only insert ${ms(m.insertPrimaryKeyOnly!)}: ${ratioPrimaryKeyOnly.toFixed(2)}× in process`);
  log(`grid code old ${ms(m.gridOld!)} → new ${ms(m.gridNew!)}; plan in process with the old grid code ≈ ${ms(beforeEstimate)} (${(beforeEstimate / m.insert!).toFixed(2)}×)`);
  if (args.json) {
    process.stdout.write(
      `${JSON.stringify({
        bench: 'plan',
        partitions: N,
        rounds: ROUNDS,
        cpus: cpus().length,
        targets: { ratio: 10 },
        medianMs: m,
        spreadMs: spread,
        beforeEstimateMs: Math.round(beforeEstimate),
        perRound,
        ratioManifest: Math.round(ratioManifest * 1000) / 1000,
        ratioPrimaryKeyOnly: Math.round(ratioPrimaryKeyOnly * 1000) / 1000,
        ratioProcess: Math.round(ratioProcess * 1000) / 1000,
        ratio: Math.round(ratio * 1000) / 1000,
      })}\n`,
    );
  }
} finally {
  await clearQueues().catch(() => undefined);
  await redis.quit();
  await db.end();
  rmSync(dir, { recursive: true, force: true });
  if (!args.keep) await dropBenchDatabase(url);
}
