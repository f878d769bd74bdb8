// bench/throttle: what a build costs the foreground, with and without the throttle. pgbench
// TPC-B at a fixed rate (-R) is the foreground in three arms run one after the other:
//   (a) no backfill, (b) an unthrottled build (--no-throttle), (c) a throttled build whose
//   foregroundP95Ms is 1.25 × the baseline p95 measured in (a): the canary's (default; the
//   canary is what the controller compares with the budget), or pgbench's (--budget-from pgbench).
// Prints the foreground's p95/p99 (from pgbench's per-transaction log) and the build's rows/s
// for each arm. Target: (c) p95 within 1.25 × (a) while reaching at least half of (b)'s rows/s.
// (a) runs first and again last; the ratios use the lower of its two p95s.
// --frontier r1,r2,… adds one arm per rate: a build held at that rows/s cap (one partition per
// worker, the foreground budget out of the way), to show what a build rate costs the foreground
// whatever decides it.
//
//   npx tsx bench/throttle.ts [--rows 4000000] [--seconds 60] [--rate 100] [--workers 2] [--concurrency 2]
//                             [--budget-from canary|pgbench] [--canary-every 50] [--frontier 15000,35000] [--json]
//
// With --json the progress goes to stderr and one JSON document to stdout: every arm's figures,
// and last `ratio`, (c)'s foreground p95 over the baseline p95.
//
// Uses DATABASE_URL (default: a database genfill_bench_throttle, created and seeded on first use) and REDIS_URL;
// queue prefix {genfill-bench-throttle}. Not part of npm test.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parse, stringify } from 'yaml';
import { CanarySignal } from '@genfill/throttle';
import { benchDatabase, benchEnv, cliRunner, exited } from './support.ts';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string', default: '4000000' },
    seconds: { type: 'string', default: '60' },
    rate: { type: 'string', default: '100' },
    workers: { type: 'string', default: '2' },
    concurrency: { type: 'string', default: '2' },
    'budget-from': { type: 'string', default: 'canary' },
    // How often the canary runs, in the workers and in the bench's own measurement of it.
    'canary-every': { type: 'string', default: '50' },
    frontier: { type: 'string', default: '' },
    json: { type: 'boolean', default: false },
  },
});
const ROWS = Number(args.rows);
const SECONDS = Number(args.seconds);
const RATE = Number(args.rate);
const WORKERS = Number(args.workers);
const CONCURRENCY = Number(args.concurrency);
const CANARY_EVERY = Number(args['canary-every']);
const BUDGET_FROM = args['budget-from'] === 'canary' ? 'canary' : 'pgbench';
const url = await benchDatabase('genfill_bench_throttle');
const DB_NAME = decodeURIComponent(url.pathname.slice(1));
const env = benchEnv(url, '{genfill-bench-throttle}');
const cli = cliRunner(env);
const BIN = fileURLToPath(new URL('../apps/cli/bin/genfill.js', import.meta.url));
const EXAMPLES = fileURLToPath(new URL('../examples/', import.meta.url));
const PG_BIN = execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim();
// The canary is the foreground's own transaction: TPC-B's five statements in one transaction,
// a round trip each, and a commit that waits for WAL. Its teller and branch updates matter: on
// 10 branches a transaction slowed by the build holds its branch row longer and the others
// queue behind it, which is how pgbench's p95 grows faster than its median. A canary without
// them rose 1.2–1.45× where pgbench rose 2.15×. The random keys are sub-selects so each is
// drawn once (random() in a WHERE itself forces a seq scan).
const CANARY = `BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + 0 WHERE aid = (SELECT 1 + (random() * 999999)::int);
SELECT abalance FROM pgbench_accounts WHERE aid = (SELECT 1 + (random() * 999999)::int);
UPDATE pgbench_tellers SET tbalance = tbalance + 0 WHERE tid = (SELECT 1 + (random() * 99)::int);
UPDATE pgbench_branches SET bbalance = bbalance + 0 WHERE bid = (SELECT 1 + (random() * 9)::int);
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, 1, 0, now());
COMMIT`;

const log = (line: string) => (args.json ? process.stderr : process.stdout).write(`${line}\n`);

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] ?? NaN;
}

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

/** pgbench at RATE tps for `seconds` with a per-transaction log; latencies in ms. */
async function foreground(seconds = SECONDS): Promise<{ run: Promise<number[]> }> {
  const dir = mkdtempSync(join(tmpdir(), 'genfill-bench-pgbench-'));
  const child = spawn(
    join(PG_BIN, 'pgbench'),
    ['-n', '-c', '4', '-j', '2', '-R', String(RATE), '-T', String(seconds), '-l', '--log-prefix', join(dir, 'tx'), '-h', url.hostname, '-p', url.port || '5432', '-U', 'postgres', DB_NAME],
    { stdio: 'ignore' },
  );
  const run = exited(child).then(() => {
    const ms: number[] = [];
    for (const f of readdirSync(dir)) {
      for (const line of readFileSync(join(dir, f), 'utf8').split('\n')) {
        const cols = line.trim().split(/\s+/);
        // client_id transaction_no time script_no time_epoch time_us [schedule_lag]: time is µs.
        if (cols.length >= 6) ms.push(Number(cols[2]) / 1000);
      }
    }
    return ms;
  });
  return { run };
}

async function arm(db: pg.Pool, name: string, build: null | { throttle: boolean; foregroundP95Ms: number; maxRowsPerSecond?: number; workers?: number }) {
  // Every arm starts from a clean checkpoint, so one arm's dirty pages are not the next one's cost.
  await db.query('CHECKPOINT');
  const tag = Date.now().toString(36);
  let rel: Record<string, any> | null = null;
  let workers: ChildProcess[] = [];
  if (build) {
    const dir = mkdtempSync(join(tmpdir(), 'genfill-bench-'));
    writeFileSync(join(dir, 'order-tax-fix.sql'), readFileSync(join(EXAMPLES, 'transforms/order-tax-fix.sql'), 'utf8'));
    const base = parse(readFileSync(join(EXAMPLES, 'order-tax-fix.yaml'), 'utf8'));
    rel = {
      ...base,
      release: `bench-${name}-${tag}`,
      dataset: `bench_${name}_${tag}`,
      transform: { sql: 'order-tax-fix.sql' },
      target: { ...base.target, table: `public.bench_${name}_${tag}`, generation: 'g1', expectedActive: null },
      budget: { workers: build.workers ?? WORKERS * CONCURRENCY, maxRowsPerSecond: build.maxRowsPerSecond ?? 200_000, replicaLagSeconds: 30, foregroundP95Ms: Math.max(0.1, Number(build.foregroundP95Ms.toFixed(2))) },
    };
    writeFileSync(join(dir, 'release.yaml'), stringify(rel));
    await cli('release', 'submit', join(dir, 'release.yaml'));
    await cli('plan', rel!.release);
    const wenv = { ...env, ...(build.throttle ? { GENFILL_CANARY_SQL: CANARY, GENFILL_CANARY_EVERY_MS: String(CANARY_EVERY) } : {}) };
    workers = Array.from({ length: WORKERS }, () =>
      spawn(process.execPath, [BIN, 'worker', '--release', rel!.release, '--concurrency', String(CONCURRENCY), ...(build.throttle ? [] : ['--no-throttle'])], { env: wenv, stdio: 'ignore' }),
    );
  }
  const t0 = new Date();
  // The same probe the controller runs, sampled over the whole arm.
  const canary = new CanarySignal(env.DATABASE_URL!, CANARY, { everyMs: CANARY_EVERY, windowMs: 3_600_000, timeoutMs: 5_000 });
  const fg = await foreground();
  const ms = await fg.run;
  const t1 = new Date();
  const probe = await canary.read();
  await canary.close();
  let rows = 0;
  let decisions = '';
  if (rel) {
    for (const w of workers) w.kill('SIGTERM');
    await Promise.all(workers.map(exited));
    rows = Number((await db.query(`SELECT coalesce(sum(rows_out), 0)::bigint AS n FROM genfill.receipts WHERE release = $1 AND created_at BETWEEN $2 AND $3`, [rel.release, t0, t1])).rows[0].n);
    const d = await db.query(
      `SELECT binding, count(*)::int AS n, round(avg(concurrency), 1) AS c, round(avg(rows_per_second)) AS r FROM genfill.throttle_decisions WHERE release = $1 GROUP BY binding ORDER BY n DESC`,
      [rel.release],
    );
    decisions = d.rows.map((r) => `${r.binding} ×${r.n} (avg concurrency ${r.c}, ${Number(r.r).toLocaleString('en-US')} rows/s)`).join(', ');
    await db.query(`UPDATE genfill.releases SET state = 'CANCELLED' WHERE id = $1 AND state IN ('BUILDING', 'BUILT')`, [rel.release]);
    await dropDataset(db, rel.dataset);
  }
  const seconds = (t1.getTime() - t0.getTime()) / 1000;
  return { name, tx: ms.length, p50: quantile(ms, 0.5), p95: quantile(ms, 0.95), p99: quantile(ms, 0.99), canaryP95: probe.value ?? NaN, rowsPerSecond: rows / seconds, decisions };
}

const db = await prepare();
// Warm the caches (and let autovacuum of a fresh seed settle) before anything is measured.
await db.query('CHECKPOINT');
await (await foreground(20)).run;
log(`foreground: pgbench TPC-B scale 10, ${RATE} tps, 4 clients; build: ${WORKERS} workers × concurrency ${CONCURRENCY}; arms of ${SECONDS}s`);
const a = await arm(db, 'a', null);
log(`(a) done: p95 ${a.p95.toFixed(2)} ms, canary p95 ${a.canaryP95.toFixed(2)} ms`);
const b = await arm(db, 'b', { throttle: false, foregroundP95Ms: 1000 });
log(`(b) done: p95 ${b.p95.toFixed(2)} ms`);
const budget = 1.25 * (BUDGET_FROM === 'canary' ? a.canaryP95 : a.p95);
const c = await arm(db, 'c', { throttle: true, foregroundP95Ms: budget });
log(`(c) done: p95 ${c.p95.toFixed(2)} ms; throttle bindings: ${c.decisions}`);
const frontier = [];
for (const r of args.frontier!.split(',').filter(Boolean).map(Number)) {
  const f = await arm(db, 'f', { throttle: true, foregroundP95Ms: 1000, maxRowsPerSecond: r, workers: WORKERS });
  log(`(f) cap ${r} rows/s done: p95 ${f.p95.toFixed(2)} ms, ${Math.round(f.rowsPerSecond)} rows/s`);
  frontier.push({ ...f, cap: r, label: `(f) held at ${r.toLocaleString('en-US')} rows/s` });
}
// The baseline again, last: one (a) on a shared machine can be an outlier, and the ratios
// below use the lower of the two p95s, so a noisy first (a) cannot make (c) look good.
const a2 = await arm(db, 'a', null);
log(`(a) again: p95 ${a2.p95.toFixed(2)} ms, canary p95 ${a2.canaryP95.toFixed(2)} ms`);
const base = Math.min(a.p95, a2.p95);
const fmt = (n: number) => n.toFixed(2).padStart(8);
log('');
log('arm                                      tx     p50 ms   p95 ms   p99 ms   canary p95   build rows/s');
for (const r of [
  { ...a, label: '(a) no backfill' },
  { ...b, label: '(b) unthrottled build' },
  { ...c, label: `(c) throttled, budget ${budget.toFixed(2)}ms (${BUDGET_FROM})` },
  ...frontier,
  { ...a2, label: '(a) no backfill, again' },
]) {
  log(`${r.label.padEnd(39)} ${String(r.tx).padStart(5)} ${fmt(r.p50)} ${fmt(r.p95)} ${fmt(r.p99)}     ${fmt(r.canaryP95)}   ${Math.round(r.rowsPerSecond).toLocaleString('en-US').padStart(12)}`);
}
log('');
log(`baseline p95: ${base.toFixed(2)} ms, the lower of the two (a) arms`);
log(`(c)/(a) p95: ${(c.p95 / base).toFixed(2)} (target ≤ 1.25); (c)/(b) rows/s: ${(c.rowsPerSecond / Math.max(1, b.rowsPerSecond)).toFixed(2)} (target ≥ 0.5)`);
for (const f of frontier) log(`${f.label}: p95 ${(f.p95 / base).toFixed(2)} × (a) at ${(f.rowsPerSecond / Math.max(1, b.rowsPerSecond)).toFixed(2)} × (b)'s rows/s`);
await db.end();
if (args.json) {
  const r2 = (v: number) => Math.round(v * 100) / 100;
  const r3 = (v: number) => Math.round(v * 1000) / 1000;
  const arms = (x: Awaited<ReturnType<typeof arm>>) => ({
    tx: x.tx,
    p50Ms: r2(x.p50),
    p95Ms: r2(x.p95),
    p99Ms: r2(x.p99),
    canaryP95Ms: r2(x.canaryP95),
    buildRowsPerSecond: Math.round(x.rowsPerSecond),
    ...(x.decisions ? { decisions: x.decisions } : {}),
  });
  process.stdout.write(
    `${JSON.stringify({
      rows: ROWS,
      seconds: SECONDS,
      rate: RATE,
      workers: WORKERS,
      concurrency: CONCURRENCY,
      canaryEveryMs: CANARY_EVERY,
      budgetFrom: BUDGET_FROM,
      budgetMs: r2(budget),
      targets: { p95Ratio: 1.25, rowsRatio: 0.5 },
      arms: {
        a: arms(a),
        b: arms(b),
        c: arms(c),
        frontier: frontier.map((f) => ({
          capRowsPerSecond: f.cap,
          ...arms(f),
          p95Ratio: r3(f.p95 / base),
          rowsRatio: r3(f.rowsPerSecond / Math.max(1, b.rowsPerSecond)),
        })),
        aAgain: arms(a2),
      },
      baselineP95Ms: r2(base),
      rowsRatio: r3(c.rowsPerSecond / Math.max(1, b.rowsPerSecond)),
      ratio: r3(c.p95 / base),
    })}\n`,
  );
}
