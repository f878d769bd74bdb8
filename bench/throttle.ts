// bench/throttle: is the throttle on the frontier? The foreground is bench/foreground.ts, an
// application running pgbench's TPC-B transaction at a fixed rate over pg and exporting its
// latency as a prom-client histogram; a real Prometheus (the Debian package `prometheus`, the
// server binary started here with a temporary config and storage, scraping every second)
// scrapes it, and the throttled workers read GENFILL_FOREGROUND_QUERY =
//   histogram_quantile(0.95, sum by (le) (rate(foreground_transaction_duration_seconds_bucket[<window>]))) * 1000
// from it — the foreground's own SLI, not a canary. Arms, each --seconds long:
//   (a) no build: the baseline;
//   (f) frontier: a build held at a fixed rows/s cap (--frontier r1,r2,…; the foreground budget
//       out of the way), to show what each build rate costs the foreground whatever decides it;
//   (c) a throttled build whose foregroundP95Ms is 1.25 × the baseline p95 (the median of the
//       (a) arms measured so far).
// The machine is shared and one arm's p95 moves by 40% between identical runs, so the arms are
// interleaved — every round runs a, c, a, f1, a, f2, … — for --rounds rounds, and every figure
// is the median over the rounds with its spread (min–max) beside it. Each arm's p95 is the
// exact nearest-rank p95 of the foreground's own per-transaction latencies in that arm (from
// the load generator's samples, not from Prometheus' bucketed estimate).
// Targets, on the medians: (c)'s p95 ≤ 1.3 × (a)'s, and (c)'s build rate ≥ 0.8 × the frontier's
// rate at (c)'s own p95 — the frontier read at (c)'s median p95: the rate a build paced
// perfectly would reach at the foreground cost (c) actually paid; the rate at the 1.25 × budget
// is printed beside it. The frontier is a line through (a)'s median p95 at 0 rows/s, its slope
// fitted by least squares to the (f) arms' medians (p95 against rows/s built).
//
//   npx tsx bench/throttle.ts [--rows 4000000] [--seconds 60] [--rounds 3] [--rate 100] [--clients 4]
//                             [--workers 2] [--concurrency 2] [--frontier 3000,6000,12000] [--window 5s] [--json]
//
// With --json the progress goes to stderr and one JSON document to stdout: every arm's runs
// and medians, the frontier, and last `ratio`, (c)'s median foreground p95 over (a)'s.
//
// Uses DATABASE_URL (default: a database genfill_bench_throttle, created and seeded on first use),
// REDIS_URL and PROMETHEUS_BIN (default /usr/bin/prometheus); queue prefix
// {genfill-bench-throttle}. Every process it starts (workers, load generator, Prometheus) is
// the program itself, never a shell, and is killed at the end with its temporary directory.
// Not part of npm test.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parse, stringify } from 'yaml';
import { benchDatabase, benchEnv, cliRunner, exited, quantile } from './support.ts';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string', default: '4000000' },
    seconds: { type: 'string', default: '60' },
    rounds: { type: 'string', default: '3' },
    rate: { type: 'string', default: '100' },
    clients: { type: 'string', default: '4' },
    workers: { type: 'string', default: '2' },
    concurrency: { type: 'string', default: '2' },
    frontier: { type: 'string', default: '3000,6000,12000' },
    // The range of the SLI's rate(): at least two scrapes (1 s apart) and no longer than the
    // controller's step window (5 throttle intervals), or a step is judged before it shows.
    window: { type: 'string', default: '5s' },
    json: { type: 'boolean', default: false },
  },
});
const ROWS = Number(args.rows);
const SECONDS = Number(args.seconds);
const ROUNDS = Number(args.rounds);
const RATE = Number(args.rate);
const CLIENTS = Number(args.clients);
const WORKERS = Number(args.workers);
const CONCURRENCY = Number(args.concurrency);
const FRONTIER = args.frontier!.split(',').filter(Boolean).map(Number);
const BUDGET_FACTOR = 1.25;
const TARGETS = { p95Ratio: 1.3, frontierRatio: 0.8 };
const METRIC = 'foreground_transaction_duration_seconds';
const QUERY = `histogram_quantile(0.95, sum by (le) (rate(${METRIC}_bucket[${args.window}]))) * 1000`;
const PROMETHEUS_BIN = process.env.PROMETHEUS_BIN ?? '/usr/bin/prometheus';
const url = await benchDatabase('genfill_bench_throttle');
const DB_NAME = decodeURIComponent(url.pathname.slice(1));
const env = benchEnv(url, '{genfill-bench-throttle}');
const cli = cliRunner(env);
const BIN = fileURLToPath(new URL('../apps/cli/bin/genfill.js', import.meta.url));
const FOREGROUND = fileURLToPath(new URL('./foreground.ts', import.meta.url));
const EXAMPLES = fileURLToPath(new URL('../examples/', import.meta.url));
const PG_BIN = execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim();

const log = (line: string) => (args.json ? process.stderr : process.stdout).write(`${line}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const children = new Set<ChildProcess>();
const temps: string[] = [];
function tempDir(prefix: string): string {
  const d = mkdtempSync(join(tmpdir(), prefix));
  temps.push(d);
  return d;
}
function track(c: ChildProcess): ChildProcess {
  children.add(c);
  c.once('exit', () => children.delete(c));
  return c;
}
async function stop(c: ChildProcess): Promise<void> {
  if (c.exitCode === null && c.signalCode === null) c.kill('SIGTERM');
  await exited(c);
}
async function cleanup(): Promise<void> {
  await Promise.all([...children].map(stop));
  for (const d of temps) rmSync(d, { recursive: true, force: true });
}
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => void cleanup().finally(() => process.exit(130)));

async function prepare(): Promise<pg.Pool> {
  await cli('migrate');
  const db = new pg.Pool({ connectionString: env.DATABASE_URL, max: 2 });
  const seeded = await db.query(`SELECT to_regclass('public.pgbench_accounts') IS NOT NULL AS pgb, to_regclass('public.orders') IS NOT NULL AS orders`);
  if (!seeded.rows[0].pgb) {
    log('preparing: pgbench -i -s 10');
    execFileSync(join(PG_BIN, 'pgbench'), ['-i', '-q', '-s', '10', '-h', url.hostname, '-p', url.port || '5432', '-U', 'postgres', DB_NAME], { stdio: 'ignore' });
  }
  const have = seeded.rows[0].orders ? Number((await db.query(`SELECT count(*) AS n FROM public.orders`)).rows[0].n) : 0;
  if (have !== ROWS) {
    log(`preparing: ${ROWS.toLocaleString('en-US')} orders over one year`);
    await db.query(readFileSync(join(EXAMPLES, 'schema.sql'), 'utf8'));
    await db.query('GRANT CREATE ON SCHEMA public TO genfill_owner').catch(() => undefined);
    await db.query(`INSERT INTO public.tax_rates (region, rate) VALUES ('north', 0.19), ('south', 0.07), ('east', 0.2) ON CONFLICT DO NOTHING`);
    await db.query('TRUNCATE public.orders');
    await db.query(
      `INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents)
       SELECT i, i % 1009, (ARRAY['north', 'south', 'east', 'west'])[1 + i % 4],
              timestamptz '2025-07-01' + (i - 1) * (interval '365 days' / $1::int), 100 + (i::bigint * 7919) % 50000
         FROM generate_series(1, $1::int) AS i`,
      [ROWS],
    );
    await db.query('VACUUM ANALYZE public.orders');
  }
  // Datasets of earlier runs' arms (bench_<arm>_<tag>): nothing reads them again.
  const left = await db.query<{ name: string }>(`SELECT relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'genfill_data' AND c.relkind = 'p' AND c.relname ~ '^bench_[a-z]+_[a-z0-9]+$'`);
  for (const r of left.rows) await dropDataset(db, r.name);
  if (left.rows.length > 0) await db.query('VACUUM ANALYZE pgbench_accounts, pgbench_history');
  return db;
}

/**
 * Drop an arm's dataset (the user's view and the generation tables): millions of rows left
 * behind by every arm made later runs slower and noisier (autovacuum, a 5 GB database).
 */
async function dropDataset(db: pg.Pool, dataset: string): Promise<void> {
  await db.query(`DROP VIEW IF EXISTS public."${dataset}"`);
  await db.query(`DROP TABLE IF EXISTS genfill_data."${dataset}" CASCADE`);
}

/** A TCP port nothing listens on now (the kernel's choice), for Prometheus. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** The load generator, running for the whole bench: its port once it listens. */
async function startForeground(): Promise<{ base: string; mark: () => Promise<{ samples: number[]; errors: number; dropped: number }> }> {
  const child = track(
    spawn(process.execPath, ['--import', 'tsx', FOREGROUND, '--url', env.DATABASE_URL!, '--rate', String(RATE), '--clients', String(CLIENTS)], {
      env,
      stdio: ['ignore', 'pipe', 'inherit'],
    }),
  );
  const first = await new Promise<string>((resolve, reject) => {
    const rl = createInterface({ input: child.stdout! });
    rl.once('line', (l) => resolve(l));
    child.once('exit', (code) => reject(new Error(`bench/foreground exited ${code} before it listened`)));
  });
  const base = `http://127.0.0.1:${(JSON.parse(first) as { port: number }).port}`;
  return {
    base,
    mark: async () => (await (await fetch(`${base}/mark`, { method: 'POST' })).json()) as { samples: number[]; errors: number; dropped: number },
  };
}

/** Prometheus scraping the load generator every second; its base URL once it answers the SLI query. */
async function startPrometheus(target: string): Promise<string> {
  if (!existsSync(PROMETHEUS_BIN)) {
    throw new Error(`${PROMETHEUS_BIN} is missing: install the Debian package (apt-get install -y --no-install-recommends prometheus) or set PROMETHEUS_BIN`);
  }
  const dir = tempDir('genfill-bench-prometheus-');
  const port = await freePort();
  writeFileSync(
    join(dir, 'prometheus.yml'),
    stringify({
      global: { scrape_interval: '1s', scrape_timeout: '900ms', evaluation_interval: '1s' },
      scrape_configs: [{ job_name: 'foreground', static_configs: [{ targets: [target.replace('http://', '')] }] }],
    }),
  );
  const child = track(
    spawn(
      PROMETHEUS_BIN,
      [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    ),
  );
  let err = '';
  child.stderr!.on('data', (b: Buffer) => (err = (err + b.toString()).slice(-4000)));
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`prometheus exited ${child.exitCode}: ${err}`);
    const ok = await fetch(`${base}/api/v1/query?query=${encodeURIComponent(QUERY)}`)
      .then(async (r) => ((await r.json()) as { data?: { result?: { value: [number, string] }[] } }).data?.result?.some((x) => Number.isFinite(Number(x.value[1]))))
      .catch(() => false);
    if (ok) return base;
    if (i > 600) throw new Error(`prometheus answered no SLI within 60 s: ${err}`);
    await sleep(100);
  }
}

type Build = { throttle: boolean; foregroundP95Ms: number; maxRowsPerSecond: number; workers: number };

async function arm(db: pg.Pool, fg: Awaited<ReturnType<typeof startForeground>>, prometheus: string, name: string, build: Build | null) {
  // Every arm starts from a clean checkpoint, so one arm's dirty pages are not the next one's cost.
  await db.query('CHECKPOINT');
  const tag = Date.now().toString(36);
  let rel: Record<string, any> | null = null;
  let workers: ChildProcess[] = [];
  if (build) {
    const dir = tempDir('genfill-bench-');
    writeFileSync(join(dir, 'order-tax-fix.sql'), readFileSync(join(EXAMPLES, 'transforms/order-tax-fix.sql'), 'utf8'));
    const base = parse(readFileSync(join(EXAMPLES, 'order-tax-fix.yaml'), 'utf8'));
    rel = {
      ...base,
      release: `bench-${name}-${tag}`,
      dataset: `bench_${name}_${tag}`,
      transform: { sql: 'order-tax-fix.sql' },
      // One job per day (~11,000 rows, a statement of ~0.1 s): batched jobs of 50,000 rows are
      // bursts of half a second each, which no admission rate smooths for the foreground.
      partition: { every: 'P1D' },
      target: { ...base.target, table: `public.bench_${name}_${tag}`, generation: 'g1', expectedActive: null },
      budget: { workers: build.workers, maxRowsPerSecond: build.maxRowsPerSecond, replicaLagSeconds: 30, foregroundP95Ms: Math.max(0.1, Number(build.foregroundP95Ms.toFixed(2))) },
    };
    writeFileSync(join(dir, 'release.yaml'), stringify(rel));
    await cli('release', 'submit', join(dir, 'release.yaml'));
    await cli('plan', rel!.release);
    const wenv = { ...env, GENFILL_PROMETHEUS_URL: prometheus, GENFILL_FOREGROUND_QUERY: QUERY };
    workers = Array.from({ length: WORKERS }, () =>
      track(spawn(process.execPath, [BIN, 'worker', '--release', rel!.release, '--concurrency', String(CONCURRENCY), ...(build.throttle ? [] : ['--no-throttle'])], { env: wenv, stdio: 'ignore' })),
    );
  }
  // A build arm is measured from the release's first receipt on: the workers' start (a node
  // process each, seconds on a busy machine) and the first partition's wait for its rows'
  // worth of tokens (5 s at 2,000 rows/s per worker) are no part of the steady state the
  // frontier compares, and the foreground is idle meanwhile.
  for (let waited = 0; rel; waited += 100) {
    const { rows } = await db.query(`SELECT 1 FROM genfill.receipts WHERE release = $1 LIMIT 1`, [rel.release]);
    if (rows.length > 0) break;
    if (waited > 60_000) throw new Error(`no receipt of ${rel.release} within 60 s: did the workers start?`);
    await sleep(100);
  }
  await fg.mark();
  const t0 = new Date();
  await sleep(SECONDS * 1000);
  const { samples, errors, dropped } = await fg.mark();
  const t1 = new Date();
  let rows = 0;
  let decisions: { n: number; avgRowsPerSecond: number; sliMedianMs: number | null; actions: Record<string, number> } | null = null;
  if (rel) {
    await Promise.all(workers.map(stop));
    rows = Number((await db.query(`SELECT coalesce(sum(rows_out), 0)::bigint AS n FROM genfill.receipts WHERE release = $1 AND created_at > $2 AND created_at <= $3`, [rel.release, t0, t1])).rows[0].n);
    // What the controller saw and did: the SLI it read (median) and its actions.
    const d = await db.query(
      `SELECT count(*)::int AS n, round(avg(rows_per_second)) AS rate,
              round(percentile_cont(0.5) WITHIN GROUP (ORDER BY (signals->'foreground_sli'->>'value')::float8)::numeric, 2) AS sli
         FROM genfill.throttle_decisions WHERE release = $1 AND at BETWEEN $2 AND $3`,
      [rel.release, t0, t1],
    );
    const acts = await db.query(`SELECT action, count(*)::int AS n FROM genfill.throttle_decisions WHERE release = $1 AND at BETWEEN $2 AND $3 GROUP BY action ORDER BY action`, [rel.release, t0, t1]);
    decisions = { n: d.rows[0].n, avgRowsPerSecond: Number(d.rows[0].rate), sliMedianMs: d.rows[0].sli === null ? null : Number(d.rows[0].sli), actions: Object.fromEntries(acts.rows.map((r) => [r.action, r.n])) };
    await db.query(`UPDATE genfill.releases SET state = 'CANCELLED' WHERE id = $1 AND state IN ('BUILDING', 'BUILT')`, [rel.release]);
    await dropDataset(db, rel.dataset);
  }
  const seconds = (t1.getTime() - t0.getTime()) / 1000;
  return { name, tx: samples.length, errors, dropped, p50: quantile(samples, 0.5), p95: quantile(samples, 0.95), p99: quantile(samples, 0.99), rowsPerSecond: rows / seconds, decisions };
}
type Run = Awaited<ReturnType<typeof arm>>;

const median = (xs: number[]) => quantile(xs, 0.5);
const r2 = (v: number) => Math.round(v * 100) / 100;
const r3 = (v: number) => Math.round(v * 1000) / 1000;
/** Median and spread of one figure over an arm's runs. */
const summary = (runs: Run[], pick: (r: Run) => number) => {
  const xs = runs.map(pick);
  return { median: r2(median(xs)), min: r2(Math.min(...xs)), max: r2(Math.max(...xs)) };
};

/**
 * The frontier as a line: p95 = (a)'s median + slope × rows/s, the slope fitted by least squares
 * to the (f) arms' medians. Interpolating between the points themselves was tried first: on
 * the shared machine their medians were not even monotone (held at 3,000 rows/s: 3.90 ms; at
 * 6,000: 3.18 ms), and the frontier rate it read off swung with whichever segment (c) fell on.
 * The measured frontier was near-linear when the machine was quiet (docs/throttle.md).
 */
function frontierLine(base: number, points: { p95: number; rows: number }[]): { slopeMsPerKRows: number; rateAt: (p: number) => number } {
  const num = points.reduce((acc, x) => acc + x.rows * (x.p95 - base), 0);
  const den = points.reduce((acc, x) => acc + x.rows * x.rows, 0);
  const slope = den > 0 ? num / den : NaN;
  return { slopeMsPerKRows: slope * 1000, rateAt: (p) => (slope > 0 ? Math.max(0, (p - base) / slope) : NaN) };
}

const db = await prepare();
let fg: Awaited<ReturnType<typeof startForeground>> | null = null;
try {
  fg = await startForeground();
  const prometheus = await startPrometheus(fg.base);
  // Warm the caches (and let autovacuum of a fresh seed settle) before anything is measured.
  await db.query('CHECKPOINT');
  await sleep(20_000);
  log(`foreground: TPC-B scale 10 at ${RATE} tps over ${CLIENTS} connections (bench/foreground.ts), scraped every 1 s by ${PROMETHEUS_BIN}`);
  log(`controller SLI: ${QUERY}`);
  log(`build: ${WORKERS} workers × concurrency ${CONCURRENCY}; arms of ${SECONDS}s; ${ROUNDS} rounds of a, c, then a and one frontier arm per cap (${FRONTIER.join(', ')} rows/s)`);
  const runs: Record<string, Run[]> = { a: [], c: [], ...Object.fromEntries(FRONTIER.map((r) => [`f${r}`, []])) };
  const budgets: number[] = [];
  const say = (label: string, r: Run) =>
    log(`  ${label.padEnd(22)} p95 ${r.p95.toFixed(2).padStart(6)} ms  p99 ${r.p99.toFixed(2).padStart(6)} ms  ${Math.round(r.rowsPerSecond).toLocaleString('en-US').padStart(7)} rows/s${r.decisions ? `  (SLI median ${r.decisions.sliMedianMs} ms, ${JSON.stringify(r.decisions.actions)})` : ''}`);
  const baseline = async () => {
    const a = await arm(db, fg!, prometheus, 'a', null);
    runs.a!.push(a);
    say('(a) no build', a);
  };
  for (let round = 1; round <= ROUNDS; round++) {
    log(`round ${round}/${ROUNDS}`);
    await baseline();
    const budget = BUDGET_FACTOR * median(runs.a!.map((r) => r.p95));
    budgets.push(budget);
    const c = await arm(db, fg, prometheus, 'c', { throttle: true, foregroundP95Ms: budget, maxRowsPerSecond: 200_000, workers: WORKERS * CONCURRENCY });
    runs.c!.push(c);
    say(`(c) budget ${budget.toFixed(2)} ms`, c);
    for (const cap of FRONTIER) {
      await baseline();
      const f = await arm(db, fg, prometheus, 'f', { throttle: true, foregroundP95Ms: 1000, maxRowsPerSecond: cap, workers: WORKERS });
      runs[`f${cap}`]!.push(f);
      say(`(f) held at ${cap.toLocaleString('en-US')}`, f);
    }
  }

  const A = median(runs.a!.map((r) => r.p95));
  const C = { p95: median(runs.c!.map((r) => r.p95)), rows: median(runs.c!.map((r) => r.rowsPerSecond)) };
  const points = FRONTIER.map((cap) => ({ p95: median(runs[`f${cap}`]!.map((r) => r.p95)), rows: median(runs[`f${cap}`]!.map((r) => r.rowsPerSecond)) }));
  const line = frontierLine(A, points);
  const atC = line.rateAt(C.p95);
  const atBudget = line.rateAt(BUDGET_FACTOR * A);
  const p95Ratio = C.p95 / A;
  const frontierRatio = C.rows / atC;
  log('');
  log(`arm                      runs   p95 ms median (min–max)    p99 ms median   build rows/s median (min–max)`);
  const row = (label: string, rs: Run[]) => {
    const p = summary(rs, (r) => r.p95);
    const q = summary(rs, (r) => r.rowsPerSecond);
    log(`${label.padEnd(25)} ${String(rs.length).padStart(3)}   ${p.median.toFixed(2).padStart(6)} (${p.min.toFixed(2)}–${p.max.toFixed(2)})   ${summary(rs, (r) => r.p99).median.toFixed(2).padStart(10)}      ${Math.round(q.median).toLocaleString('en-US').padStart(7)} (${Math.round(q.min).toLocaleString('en-US')}–${Math.round(q.max).toLocaleString('en-US')})`);
  };
  row('(a) no build', runs.a!);
  row(`(c) throttled`, runs.c!);
  for (const cap of FRONTIER) row(`(f) held at ${cap.toLocaleString('en-US')}`, runs[`f${cap}`]!);
  log('');
  log(`(c)/(a) p95: ${p95Ratio.toFixed(2)} (target ≤ ${TARGETS.p95Ratio}); budgets ${budgets.map((b) => b.toFixed(2)).join(', ')} ms`);
  log(`frontier line: p95 = ${A.toFixed(2)} ms + ${line.slopeMsPerKRows.toFixed(3)} ms per 1,000 rows/s (least squares through the (f) medians)`);
  log(`frontier at (c)'s p95 ${C.p95.toFixed(2)} ms: ${Math.round(atC).toLocaleString('en-US')} rows/s; (c) built ${Math.round(C.rows).toLocaleString('en-US')}: ${frontierRatio.toFixed(2)} × (target ≥ ${TARGETS.frontierRatio})`);
  log(`frontier at the budget (${BUDGET_FACTOR} × (a) = ${(BUDGET_FACTOR * A).toFixed(2)} ms): ${Math.round(atBudget).toLocaleString('en-US')} rows/s; (c) ${(C.rows / atBudget).toFixed(2)} × that`);
  if (args.json) {
    const arms = (rs: Run[]) => ({
      p95Ms: summary(rs, (r) => r.p95),
      p99Ms: summary(rs, (r) => r.p99),
      buildRowsPerSecond: summary(rs, (r) => r.rowsPerSecond),
      runs: rs.map((r) => ({ tx: r.tx, errors: r.errors, p50Ms: r2(r.p50), p95Ms: r2(r.p95), p99Ms: r2(r.p99), buildRowsPerSecond: Math.round(r.rowsPerSecond), ...(r.decisions ? { decisions: r.decisions } : {}) })),
    });
    process.stdout.write(
      `${JSON.stringify({
        rows: ROWS,
        seconds: SECONDS,
        rounds: ROUNDS,
        rate: RATE,
        workers: WORKERS,
        concurrency: CONCURRENCY,
        query: QUERY,
        budgetsMs: budgets.map(r2),
        targets: TARGETS,
        arms: { a: arms(runs.a!), c: arms(runs.c!), frontier: FRONTIER.map((cap) => ({ capRowsPerSecond: cap, ...arms(runs[`f${cap}`]!) })) },
        baselineP95Ms: r2(A),
        frontier: {
          points: points.map((p) => ({ p95Ms: r2(p.p95), rowsPerSecond: Math.round(p.rows) })),
          slopeMsPerThousandRowsPerSecond: r3(line.slopeMsPerKRows),
          rowsPerSecondAtCP95: Math.round(atC),
          rowsPerSecondAtBudget: Math.round(atBudget),
        },
        frontierRatio: r3(frontierRatio),
        ratio: r3(p95Ratio),
      })}\n`,
    );
  }
} finally {
  await cleanup();
  await db.end();
}
