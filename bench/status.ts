// `genfill status` of a ten-year hourly release (87,672 partitions) against one `INSERT …
// SELECT` of as many manifest-like rows, side by side in one run (issue 19, part 1: target
// ≤ 3× that insert; `status --json` under 2 MB by default).
//
//   npx tsx bench/status.ts [--runs 3] [--before /tmp/status-before] [--json]
//
// Each status is timed as an operator sees it: the genfill binary started as a process
// (`node apps/cli/bin/genfill.js status <release> [--json]`), wall time and bytes printed; the
// process floor (`genfill --help`: node start-up and tsx compiling the sources) is printed beside
// it, and the in-process time of the same command (`main()` of @genfill/cli: the queries and the
// JSON, no start-up). `ratio` is the in-process `status --json` over the insert (medians);
// `ratioProcess` the same with the process wall time.
//
// --before <dir> also times the binary of another checkout against the same database, e.g. the
// last commit: `git worktree add /tmp/status-before HEAD` with a node_modules whose @genfill/*
// links point into that worktree (see the CHANGELOG entry of this bench for the figures).
//
// The database genfill_bench_status is created afresh (DATABASE_URL is not used: the bench
// drops what it made). Four ranges of partitions are marked FAILED as the superuser, past the
// registry's triggers, so the summary has ranges to compute.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { parse, stringify } from 'yaml';
import { main } from '@genfill/cli';
import { planRelease } from '@genfill/planner';
import { createPool } from '@genfill/registry';
import { benchDatabase, benchEnv, cliRunner, dropBenchDatabase, quantile } from './support.ts';

const { values: args } = parseArgs({
  options: {
    runs: { type: 'string', default: '3' },
    before: { type: 'string' },
    keep: { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
  },
});
const RUNS = Math.max(1, Number(args.runs));
const log = (line: string) => (args.json ? process.stderr : process.stdout).write(`${line}\n`);
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const RELEASE = 'hourly-10y@1';
const FROM = '2015-07-01T00:00:00Z';
const TO = '2025-07-01T00:00:00Z';
const N = 87_672;

delete process.env.DATABASE_URL; // the bench's own database, dropped at the end
const url = await benchDatabase('genfill_bench_status', { fresh: true });
const env = benchEnv(url, '{genfill-bench-status}');
const cli = cliRunner(env);
const db = createPool({ DATABASE_URL: url.toString() } as never, 'bench-status', 2);
const median = (xs: number[]) => quantile(xs, 0.5);
const ms = (v: number) => `${Math.round(v).toLocaleString('en-US')} ms`;
const mb = (b: number) => `${(b / 1024 / 1024).toFixed(2)} MB`;

try {
  await cli('migrate');
  await db.query(readFileSync(join(ROOT, 'examples/schema.sql'), 'utf8'));
  await db.query('GRANT CREATE ON SCHEMA public TO genfill_owner');
  await db.query(`INSERT INTO public.tax_rates (region, rate) VALUES ('north', 0.19), ('south', 0.07), ('east', 0.2) ON CONFLICT DO NOTHING`);
  const dir = mkdtempSync(join(tmpdir(), 'genfill-bench-status-'));
  const r = parse(readFileSync(join(ROOT, 'examples/order-tax-fix.yaml'), 'utf8'));
  Object.assign(r, { release: RELEASE, dataset: 'orders_hourly', range: { from: FROM, to: TO }, timezone: 'UTC', partition: { every: 'PT1H' } });
  Object.assign(r.target, { table: 'public.orders_hourly', generation: 'g1', expectedActive: null });
  writeFileSync(join(dir, 'release.yaml'), stringify(r));
  mkdirSync(join(dir, 'transforms'), { recursive: true });
  writeFileSync(join(dir, r.transform.sql), readFileSync(join(ROOT, 'examples/transforms/order-tax-fix.sql'), 'utf8'));
  await cli('release', 'submit', join(dir, 'release.yaml'));
  const p0 = performance.now();
  await planRelease(db, RELEASE);
  log(`status bench: ${RELEASE}, ${N.toLocaleString('en-US')} hourly partitions planned in ${ms(performance.now() - p0)}; ${RUNS} runs, ${cpus().length} CPUs`);

  // A few failed ranges (the superuser, past the registry's triggers: only a bench or a test does this).
  await db.query('ALTER TABLE genfill.partitions DISABLE TRIGGER USER');
  await db.query(
    `UPDATE genfill.partitions SET status = 'FAILED', attempt = 3, reason = 'DEPENDENCY_CHANGED'
      WHERE release = $1 AND (seq BETWEEN 0 AND 71 OR seq BETWEEN 40000 AND 40999 OR seq % 5000 = 17 OR seq > 87000)`,
    [RELEASE],
  );
  await db.query('ALTER TABLE genfill.partitions ENABLE TRIGGER USER');
  await db.query('VACUUM ANALYZE genfill.partitions');

  // The floor: the same number of manifest-like rows, one INSERT … SELECT into a copy of the
  // partitions table with its keys, checks and exclusion constraint.
  await db.query('CREATE TABLE public.bench_manifest (LIKE genfill.partitions INCLUDING ALL)');
  const inserts: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    await db.query('TRUNCATE public.bench_manifest');
    const t = performance.now();
    await db.query(
      `INSERT INTO public.bench_manifest (release, id, seq, kind, lower, upper, est_rows)
       SELECT $1, 'b-' || to_char(($2::timestamptz + k * interval '1 hour') AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS"Z"'), k, 'build',
              $2::timestamptz + k * interval '1 hour', $2::timestamptz + (k + 1) * interval '1 hour', 0
         FROM generate_series(0, $3 - 1) AS k`,
      [RELEASE, FROM, N],
    );
    inserts.push(performance.now() - t);
  }
  const insert = median(inserts);
  log(`  INSERT … SELECT of ${N.toLocaleString('en-US')} manifest rows: ${ms(insert)} (runs ${inserts.map(ms).join(', ')})`);
  // Most of that is the exclusion constraint's GiST index: the same insert into a copy with
  // only the primary key is the stricter floor, printed beside it.
  await db.query('CREATE TABLE public.bench_manifest_plain (LIKE genfill.partitions INCLUDING DEFAULTS, PRIMARY KEY (release, id))');
  const plains: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    await db.query('TRUNCATE public.bench_manifest_plain');
    const t = performance.now();
    await db.query('INSERT INTO public.bench_manifest_plain SELECT * FROM public.bench_manifest');
    plains.push(performance.now() - t);
  }
  const plain = median(plains);
  log(`  the same rows into a copy with only the primary key: ${ms(plain)} (runs ${plains.map(ms).join(', ')})`);

  /** The binary of `root` as a process: median wall time and the bytes of its stdout. */
  const processRun = (root: string, argv: string[]) => {
    const times: number[] = [];
    let bytes = 0;
    for (let i = 0; i < RUNS; i++) {
      const t = performance.now();
      const res = spawnSync(process.execPath, [join(root, 'apps/cli/bin/genfill.js'), ...argv], { env, maxBuffer: 1 << 30 });
      times.push(performance.now() - t);
      if (res.status !== 0) throw new Error(`${root}: genfill ${argv.join(' ')} exited ${res.status}: ${res.stderr.toString()}`);
      bytes = res.stdout.length;
    }
    return { ms: Math.round(median(times)), bytes };
  };
  const inProcess = async (argv: string[]) => {
    const times: number[] = [];
    let bytes = 0;
    for (let i = 0; i < RUNS; i++) {
      let out = 0;
      const t = performance.now();
      const code = await main(argv, { out: (s) => (out += Buffer.byteLength(s) + 1), err: () => undefined, env, tty: false });
      times.push(performance.now() - t);
      if (code !== 0) throw new Error(`genfill ${argv.join(' ')} exited ${code}`);
      bytes = out;
    }
    return { ms: Math.round(median(times)), bytes };
  };

  const sides: Record<string, Record<string, { ms: number; bytes: number }>> = {};
  for (const [side, root] of [['after', ROOT], ...(args.before ? [['before', resolve(args.before)]] : [])] as [string, string][]) {
    if (!existsSync(join(root, 'apps/cli/bin/genfill.js'))) throw new Error(`--before ${root}: no apps/cli/bin/genfill.js there`);
    sides[side] = {
      floor: processRun(root, ['--help']),
      status: processRun(root, ['status', RELEASE]),
      statusJson: processRun(root, ['status', RELEASE, '--json']),
    };
    log(
      `  ${side.padEnd(6)} process floor ${ms(sides[side].floor!.ms)}; status ${ms(sides[side].status!.ms)} (${mb(sides[side].status!.bytes)}); ` +
        `status --json ${ms(sides[side].statusJson!.ms)} (${mb(sides[side].statusJson!.bytes)})`,
    );
  }
  const after = sides.after!;
  after.inProcessStatus = await inProcess(['status', RELEASE]);
  after.inProcessJson = await inProcess(['status', RELEASE, '--json']);
  after.inProcessPage = await inProcess(['status', RELEASE, '--json', '--partitions', 'FAILED', '--page', '2', '--page-size', '1000']);
  log(
    `  after  in process: status ${ms(after.inProcessStatus.ms)}, status --json ${ms(after.inProcessJson.ms)} (${mb(after.inProcessJson.bytes)}), ` +
      `--partitions FAILED --page 2 --page-size 1000 ${ms(after.inProcessPage.ms)} (${mb(after.inProcessPage.bytes)})`,
  );
  const ratio = after.inProcessJson.ms / insert;
  const ratioProcess = after.statusJson!.ms / insert;
  const ratioBefore = sides.before ? sides.before.statusJson!.ms / insert : null;
  const ratioPlain = after.inProcessJson.ms / plain;
  const ratioPlainProcess = after.statusJson!.ms / plain;
  log(
    `\nstatus --json ${ms(after.inProcessJson.ms)} in process vs the insert ${ms(insert)}: ${ratio.toFixed(2)}× (target ≤ 3×) — ${ratio <= 3 ? 'target met' : 'OVER target'}; ` +
      `as a process ${ratioProcess.toFixed(2)}×${ratioBefore === null ? '' : ` (before: ${ratioBefore.toFixed(2)}×, ${mb(sides.before!.statusJson!.bytes)})`}; ` +
      `${mb(after.statusJson!.bytes)} ${after.statusJson!.bytes < 2 * 1024 * 1024 ? '< 2 MB' : 'OVER 2 MB'}`,
  );
  log(`against the primary-key-only insert ${ms(plain)}: ${ratioPlain.toFixed(2)}× in process, ${ratioPlainProcess.toFixed(2)}× as a process`);
  if (args.json) {
    process.stdout.write(
      `${JSON.stringify({
        bench: 'status',
        release: RELEASE,
        partitions: N,
        runs: RUNS,
        cpus: cpus().length,
        targets: { ratio: 3, jsonBytes: 2 * 1024 * 1024 },
        insertMs: Math.round(insert),
        insertPrimaryKeyOnlyMs: Math.round(plain),
        ...sides,
        ratioBefore: ratioBefore === null ? null : Math.round(ratioBefore * 1000) / 1000,
        ratioPrimaryKeyOnly: Math.round(ratioPlain * 1000) / 1000,
        ratioPrimaryKeyOnlyProcess: Math.round(ratioPlainProcess * 1000) / 1000,
        ratioProcess: Math.round(ratioProcess * 1000) / 1000,
        ratio: Math.round(ratio * 1000) / 1000,
      })}\n`,
    );
  }
} finally {
  await db.end();
  if (!args.keep) await dropBenchDatabase(url);
}
