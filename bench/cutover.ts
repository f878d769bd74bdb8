// bench/cutover: how long readers wait at a cutover (issue 17). The demo's dataset is seeded and
// adopted with capture; the demo's order writer runs at --rate transactions/s and the projector
// polls every 50 ms, both in this process, for the whole run. Then --cutovers times: a small
// release of the fixed tax transform (--days daily partitions, a different day each time, the
// rest of the dataset carried from the generation active then) is submitted, planned, built in
// process (claimPartition + buildPartition, as a worker would), caught up, reconciled,
// approved by a second login, and cut over with the default --max-freeze; the next release
// expects the generation that one made active.
//
//   cas     the switch transaction, BEGIN to COMMIT (cutoverRelease's casMs). Target < 50 ms.
//   freeze  the seal's commit to the switch's commit (freezeMs): readers of the old generation
//           see no new writes. Target < 2 s, goal < 500 ms.
//   floor   a bare pointer flip on the same pool — REPEATABLE READ, `UPDATE genfill.datasets SET
//           active_generation = active_generation`, COMMIT — timed the same way as casMs (pool
//           checkout included), --floor samples right before and right after each cutover
//           (like the switch, it fences a projector batch in flight, which simply retries).
//           cas/floor is what the switch's checks and the tail it applies cost over the flip.
//   steps   median ms of each recorded step; caught-up, verified and switched fall inside the
//           freeze (sealed is the seal itself, before the freeze starts), so the dominant one of
//           those is what to shorten.
//   growth  every disjoint release splits the transform map around its range (up to 2 entries
//           more each), and the tail checks and the switch evaluate the map: the medians of the first
//           and the last quarter of the run, with their map sizes, side by side.
//   check   once the writer stops and the projector passes it: the view against the last
//           generation's transform map applied to the source (fixed tax inside every released
//           range, legacy outside), row for row; a difference fails the run (exit 1).
//
//   npx tsx bench/cutover.ts [--rows 200000] [--cutovers 20] [--rate 20] [--days 1] [--floor 5] [--json] [--keep]
//
// Uses DATABASE_URL (default: a database genfill_bench_cutover, dropped and created again at the
// start and dropped at the end unless --keep; a DATABASE_URL of the caller's is never dropped).
// Creates the login genfill_bench_approver (a member of genfill_approver) when missing. With
// --json the progress goes to stderr and one JSON document to stdout.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { createLogger } from '@genfill/observability';
import { projectDataset } from '@genfill/projector';
import { withTransaction } from '@genfill/registry';
import { startOrderWriter, type OrderWriter, type WriterStats } from '../apps/cli/src/demo/writer.ts';
import { DEMO_ADOPT_TRANSFORM, demoCounts } from '../apps/cli/src/demo/seed.ts';
import { activeGeneration, benchDatabase, benchEnv, cliRunner, demoRangeOf, demoReleases, dist, projectorPassedNow, quantile } from './support.ts';
import { cutoverRelease, type CutoverResult } from '@genfill/switch';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string', default: '200000' },
    cutovers: { type: 'string', default: '20' },
    rate: { type: 'string', default: '20' },
    days: { type: 'string', default: '1' },
    floor: { type: 'string', default: '5' },
    json: { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
  },
});
const ROWS = Number(args.rows);
const CUTOVERS = Number(args.cutovers);
const RATE = Number(args.rate);
const DAYS = Number(args.days);
const FLOOR = Number(args.floor);
for (const [name, v] of Object.entries({ rows: ROWS, cutovers: CUTOVERS, rate: RATE, days: DAYS, floor: FLOOR })) {
  if (!Number.isInteger(v) || v < 1) throw new RangeError(`--${name} must be a positive whole number, not ${String(args[name as keyof typeof args])}`);
}

if (DAYS > 90) throw new RangeError(`--days must leave room for different ranges inside the demo's year: at most 90, not ${DAYS}`);

const DS = 'orders_enriched';
const APPROVER = 'genfill_bench_approver';
const started = performance.now();
const owned = !process.env.DATABASE_URL;
const url = await benchDatabase('genfill_bench_cutover', { fresh: true });
const env = benchEnv(url, '{genfill-bench-cutover}');
const cli = cliRunner(env);
const log = (line: string) => (args.json ? process.stderr : process.stdout).write(`${line}\n`);
const n = (v: number) => Math.round(v).toLocaleString('en-US');
const r2 = (v: number) => Math.round(v * 100) / 100;
const ms = (v: number) => `${v.toFixed(1)} ms`;
const lap = (t: number) => Math.round(performance.now() - t);

const dir = mkdtempSync(join(tmpdir(), 'genfill-bench-cutover-'));
// Pools connect on first use: everything that talks to the database runs inside the try below,
// so a failure anywhere still stops the writer and the projector and drops the database.
const db = new pg.Pool({ connectionString: url.toString(), max: 8 });
db.on('error', () => undefined);
const approverUrl = new URL(url);
approverUrl.username = APPROVER;
approverUrl.password = '';
const approver = new pg.Pool({ connectionString: approverUrl.toString(), max: 1 });
approver.on('error', () => undefined);
const quiet = createLogger('bench', 'silent');

// Small releases of the shipped fixed tax, taken to APPROVED in process (bench/support.ts).
const releases = demoReleases({ db, approver, dir });

/** Entries of the transform map of `generation`: each disjoint release splits the map around its range. */
async function mapEntries(generation: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>('SELECT jsonb_array_length(transform_map) AS n FROM genfill.generations WHERE dataset = $1 AND generation = $2', [DS, generation]);
  return rows[0]?.n ?? 0;
}

/** The bare flip, timed like casMs: from before the pool checkout to after COMMIT. */
async function floorFlip(): Promise<number> {
  const t = performance.now();
  await withTransaction(
    db,
    async (conn) => {
      const r = await conn.query('UPDATE genfill.datasets SET active_generation = active_generation WHERE name = $1', [DS]);
      if (r.rowCount !== 1) throw new Error(`the floor's flip updated ${r.rowCount} rows of genfill.datasets, not 1`);
    },
    'REPEATABLE READ',
  );
  return performance.now() - t;
}

/**
 * Once the writer has stopped and the projector passed a snapshot taken after it: the rows of the
 * view against the last generation's transform map applied to the source — the fixed tax inside
 * every released range, the legacy one outside them (both directions, EXCEPT ALL).
 */
async function viewAgainstMap(ranges: { from: string; to: string }[]): Promise<number> {
  await projectorPassedNow(db, DS);
  const released = 'EXISTS (SELECT 1 FROM unnest($1::timestamptz[], $2::timestamptz[]) AS r(f, t) WHERE o.created_at >= r.f AND o.created_at < r.t)';
  const fixed = releases.fixedSql.replace('FROM source AS s', `FROM (SELECT * FROM public.orders AS o WHERE ${released}) AS s`);
  const legacy = DEMO_ADOPT_TRANSFORM.replace('FROM source AS s', `FROM (SELECT * FROM public.orders AS o WHERE NOT ${released}) AS s`);
  if (fixed.includes('FROM source AS s') || legacy.includes('FROM source AS s') || !fixed.includes(released) || !legacy.includes(released)) {
    throw new Error('the transforms no longer read `FROM source AS s`: the bench cannot restrict them to the released ranges');
  }
  const map = `SELECT order_id, created_at, region, amount_cents, tax_cents FROM ((${fixed}) UNION ALL (${legacy})) AS m`;
  const view = `SELECT order_id, created_at, region, amount_cents, tax_cents FROM public.orders_enriched`;
  const { rows } = await db.query<{ n: number }>(
    `SELECT (SELECT count(*) FROM (${map} EXCEPT ALL ${view}) a)::int + (SELECT count(*) FROM (${view} EXCEPT ALL ${map}) b)::int AS n`,
    [ranges.map((r) => r.from), ranges.map((r) => r.to)],
  );
  return rows[0]!.n;
}

interface Run {
  release: string;
  range: { from: string; to: string };
  freezeMs: number;
  casMs: number;
  floorMs: number[];
  appliedAtSwitch: number;
  finalRoundEvents: number;
  tailKeys: { pre: number; post: number };
  steps: Record<string, number>;
  /** Transform map entries of the generation switched to (the switch applies the tail through it). */
  mapEntries: number;
  prepareMs: Record<string, number>;
  cutoverMs: number;
}

const controller = new AbortController();
let projectorError: unknown = null;
let projector: Promise<unknown> = Promise.resolve();
let setupMs = 0;
let t0 = performance.now();
let writer: OrderWriter | null = null;
let writerStats: WriterStats | null = null;
let differences: number | null = null;
const runs: Run[] = [];
let failure: unknown = null;
try {
  log(`setup: genfill demo --until adopt --rows ${n(ROWS)} (seed, adopt with capture) into ${url.pathname.slice(1)}`);
  await cli('demo', '--until', 'adopt', '--rows', String(ROWS), '--no-throttle', '--dir', join(dir, 'demo'));
  setupMs = lap(t0);
  await db.query(`DO $$ BEGIN CREATE ROLE ${APPROVER} LOGIN IN ROLE genfill_approver; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
  projector = projectDataset(DS, { db, log: quiet, id: 'bench-cutover', pollMs: 50, signal: controller.signal }).catch((err: unknown) => {
    projectorError = err;
  });
  writer = await startOrderWriter(db, { ratePerSecond: RATE, inRange: true, seededOrders: demoCounts(ROWS).total });
  log(`cutovers: ${CUTOVERS} releases of ${DAYS} day(s) each (the rest carried), under the demo's writer at ${RATE} transactions/s and the projector (poll 50 ms)`);
  for (let i = 1; i <= CUTOVERS; i++) {
    const id = `bench-cut-${i}@1`;
    const expected = await activeGeneration(db, DS);
    const generation = `tax-fix-g${i + 2}`;
    const range = demoRangeOf(i - 1, DAYS);
    const prepareMs = await releases.approved(id, generation, expected, range);
    const floorMs: number[] = [];
    for (let k = 0; k < FLOOR; k++) floorMs.push(r2(await floorFlip()));
    t0 = performance.now();
    let res: CutoverResult;
    try {
      res = await cutoverRelease(db, id);
    } catch (err) {
      throw new Error(`cutover ${i} (${id}, ${expected} → ${generation}) failed: ${(err as Error).message}`, { cause: err });
    }
    const cutoverMs = lap(t0);
    for (let k = 0; k < FLOOR; k++) floorMs.push(r2(await floorFlip()));
    if (!res.ok || res.freezeMs === undefined || res.casMs === undefined) throw new Error(`cutover ${i} (${id}) returned without a switch: ${JSON.stringify(res)}`);
    const now = await activeGeneration(db, DS);
    if (now !== generation) throw new Error(`cutover ${i} (${id}) left ${now} active, not ${generation}`);
    const steps = Object.fromEntries(res.steps.map((s) => [s.step, s.ms]));
    const run: Run = {
      release: id,
      range,
      freezeMs: res.freezeMs,
      casMs: res.casMs,
      floorMs,
      appliedAtSwitch: res.appliedAtSwitch?.events ?? 0,
      finalRoundEvents: res.rounds?.final?.events ?? 0,
      tailKeys: { pre: res.tail?.pre?.keys ?? 0, post: res.tail?.post?.keys ?? 0 },
      steps,
      mapEntries: await mapEntries(generation),
      prepareMs,
      cutoverMs,
    };
    runs.push(run);
    const fl = quantile(floorMs, 0.5);
    log(
      `  ${String(i).padStart(2)} ${expected} → ${generation} [${range.from.slice(0, 10)}, +${DAYS}d): map ${run.mapEntries} entries, freeze ${ms(run.freezeMs)}, cas ${ms(run.casMs)} (floor ${ms(fl)}, ×${(run.casMs / fl).toFixed(1)}), ` +
        `${run.appliedAtSwitch} events at the switch, ${run.finalRoundEvents} in the final round, tail keys ${run.tailKeys.pre}+${run.tailKeys.post}; ` +
        `steps ${res.steps.map((s) => `${s.step} ${s.ms}`).join(', ')}; prepared in ${(Object.entries(prepareMs).filter(([k]) => k !== 'partitions').reduce((a, [, v]) => a + v, 0) / 1000).toFixed(1)} s (${prepareMs.partitions} partitions)`,
    );
  }
  writerStats = await writer.stop();
  writer = null;
  differences = await viewAgainstMap(runs.map((r) => r.range));
} catch (err) {
  failure = err;
} finally {
  if (writer) writerStats = await writer.stop();
  const w = writerStats;
  controller.abort();
  await projector;
  await approver.end();
  await db.end();
  if (w) log(`writer: ${n(w.transactions)} transactions (${w.inserts} inserts, ${w.updates} updates, ${w.moves} moved, ${w.deletes} deleted, ${w.errors} errors)`);
  rmSync(dir, { recursive: true, force: true });
  if (owned && !args.keep) {
    const admin = new pg.Client({ connectionString: Object.assign(new URL(url), { pathname: '/postgres' }).toString() });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS "${url.pathname.slice(1)}" WITH (FORCE)`);
    await admin.end();
  } else if (owned) {
    log(`kept database ${url.pathname.slice(1)} (--keep)`);
  }
}
if (failure) throw failure;
if (projectorError) throw new Error(`the projector failed during the run: ${(projectorError as Error).message}`, { cause: projectorError });

const freeze = dist(runs.map((r) => r.freezeMs));
const cas = dist(runs.map((r) => r.casMs));
const floor = dist(runs.flatMap((r) => r.floorMs));
// Per cutover: its CAS over the median of the flips around it (the same minute's load).
const ratio = dist(runs.map((r) => r.casMs / quantile(r.floorMs, 0.5)));
const applied = dist(runs.map((r) => r.appliedAtSwitch));
const stepNames = [...new Set(runs.flatMap((r) => Object.keys(r.steps)))];
const stepMedians = Object.fromEntries(stepNames.map((s) => [s, quantile(runs.map((r) => r.steps[s] ?? 0), 0.5)]));
const IN_FREEZE = ['caught-up', 'verified', 'switched'];
const ranked = IN_FREEZE.filter((s) => s in stepMedians).sort((a, b) => stepMedians[b]! - stepMedians[a]!);
const dominant = ranked[0] ?? null;
// Within 10% of each other the steps are a tie on this machine's noise: say so rather than pick one.
const tied = ranked.filter((s) => dominant !== null && stepMedians[s]! >= 0.9 * stepMedians[dominant]!);
const casInSwitch = quantile(runs.map((r) => r.casMs), 0.5);
const prepare = Object.fromEntries(['plan', 'build', 'catchup', 'reconcile', 'approve'].map((k) => [k, quantile(runs.map((r) => r.prepareMs[k] ?? 0), 0.5)]));
// The map grows with every disjoint release, and the verifications and the switch evaluate it:
// the first and the last quarter of the run side by side show what that costs.
const quarter = Math.max(1, Math.floor(runs.length / 4));
const ends = [runs.slice(0, quarter), runs.slice(-quarter)].map((rs) => ({
  mapEntries: quantile(rs.map((r) => r.mapEntries), 0.5),
  freezeMs: quantile(rs.map((r) => r.freezeMs), 0.5),
  casMs: quantile(rs.map((r) => r.casMs), 0.5),
}));
const totalSeconds = Math.round((performance.now() - started) / 100) / 10;
const verdict = (d: { p95: number; max: number }, target: number) => `p95 ${d.p95 < target ? 'met' : 'MISSED'}, max ${d.max < target ? 'met' : 'MISSED'}`;

log(`freeze: p50 ${ms(freeze.p50)}, p95 ${ms(freeze.p95)}, max ${ms(freeze.max)} over ${freeze.n} cutovers (target < 2,000 ms: ${verdict(freeze, 2000)}; goal < 500 ms: ${verdict(freeze, 500)})`);
log(`cas:    p50 ${ms(cas.p50)}, p95 ${ms(cas.p95)}, max ${ms(cas.max)} (target < 50 ms: ${verdict(cas, 50)})`);
log(`floor:  p50 ${ms(floor.p50)}, p95 ${ms(floor.p95)}, max ${ms(floor.max)} (${floor.n} bare flips, ${FLOOR} before and ${FLOOR} after each cutover); cas/floor p50 ${ratio.p50.toFixed(1)}× (${ratio.min.toFixed(1)}–${ratio.max.toFixed(1)})`);
log(`steps (median ms): ${stepNames.map((s) => `${s} ${stepMedians[s]}${IN_FREEZE.includes(s) ? '*' : ''}`).join(', ')} (* inside the freeze; switched holds the CAS, median ${casInSwitch} ms); dominant in the freeze: ${tied.length > 1 ? `${tied.join(' ≈ ')} (within 10%)` : dominant}`);
log(`growth: first ${quarter} cutovers (map ${ends[0]!.mapEntries} entries) freeze ${ms(ends[0]!.freezeMs)}, cas ${ms(ends[0]!.casMs)}; last ${quarter} (map ${ends[1]!.mapEntries} entries) freeze ${ms(ends[1]!.freezeMs)}, cas ${ms(ends[1]!.casMs)} (medians)`);
log(`at the switch: events applied p50 ${applied.p50}, max ${applied.max}; tail keys verified p50 ${quantile(runs.map((r) => r.tailKeys.pre), 0.5)} before the seal, ${quantile(runs.map((r) => r.tailKeys.post), 0.5)} after it`);
log(`view after the writer stopped and the projector drained: ${differences === 0 ? 'equal to' : `${differences} rows DIFFER from`} the last generation's transform map of the source`);
log(`prepare (median ms per release): ${Object.entries(prepare).map(([k, v]) => `${k} ${n(v)}`).join(', ')}; total ${totalSeconds} s (setup ${(setupMs / 1000).toFixed(1)} s)`);

if (args.json) {
  process.stdout.write(
    `${JSON.stringify({
      rows: ROWS,
      cutovers: CUTOVERS,
      ratePerSecond: RATE,
      days: DAYS,
      targets: { casMs: 50, freezeMs: 2000, freezeGoalMs: 500 },
      freezeMs: freeze,
      casMs: cas,
      floorMs: floor,
      ratioSpread: ratio,
      stepMedianMs: stepMedians,
      dominantFreezeStep: dominant,
      dominantFreezeStepsTied: tied,
      appliedAtSwitch: applied,
      growth: { first: ends[0], last: ends[1], cutovers: quarter },
      viewDifferences: differences,
      writer: writerStats,
      prepareMedianMs: prepare,
      setupSeconds: setupMs / 1000,
      totalSeconds,
      runs,
      ratio: ratio.p50,
    })}\n`,
  );
}
if (differences !== 0) process.exitCode = 1;
