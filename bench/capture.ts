// bench/capture: what capture costs a writer, what the consumption query costs behind a long
// transaction, and what ingest sustains — each measured side by side in one run.
//
//   tpcb     pgbench TPC-B at a fixed rate (-R) with pgbench_accounts (a) not captured and
//            (b) captured (`genfill capture install public.pgbench_accounts`), interleaved
//            a b | b a | a b …; p50/p95/p99 from pgbench's per-transaction log. Target: median
//            p95 (b) / median p95 (a) ≤ 1.5.
//   consume  EXPLAIN ANALYZE of the consumption query (packages/capture consumeStatement) against
//            `txid >= xmin(F)`, over --events events logged while one long transaction stays
//            open, alternating, repeated. The SPEC's claim: 0.4 ms over a million events.
//   ingest   `genfill ingest` of NDJSON files of each --lines size (default 100k and 1M),
//            interleaved and repeated, spawned as the genfill node process under
//            /usr/bin/time (max RSS; /proc/<pid>/status VmHWM when it is missing). Target:
//            ≥ 50,000 events/s, max RSS flat in the file's size.
//
//   npx tsx bench/capture.ts [--only tpcb,consume,ingest] [--rounds 3] [--seconds 30] [--rate 200]
//                            [--clients 4] [--scale 10] [--events 1000000] [--lines 100000,1000000] [--json]
//
// Uses DATABASE_URL (default: a database genfill_bench_capture, dropped and created again every
// run). With --json the progress goes to stderr and one JSON document to stdout. Not part of
// npm test.
import { execFileSync, spawn } from 'node:child_process';
import { createWriteStream, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parse, stringify } from 'yaml';
import { consumeStatement } from '@genfill/capture';
import { benchDatabase, benchEnv, cliRunner, exited } from './support.ts';

const { values: args } = parseArgs({
  options: {
    only: { type: 'string', default: 'tpcb,consume,ingest' },
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '30' },
    rate: { type: 'string', default: '200' },
    clients: { type: 'string', default: '4' },
    scale: { type: 'string', default: '10' },
    events: { type: 'string', default: '1000000' },
    lines: { type: 'string', default: '100000,1000000' },
    json: { type: 'boolean', default: false },
  },
});
const ONLY = new Set(args.only!.split(','));
const ROUNDS = Number(args.rounds);
const SECONDS = Number(args.seconds);
const RATE = Number(args.rate);
const CLIENTS = Number(args.clients);
const SCALE = Number(args.scale);
const EVENTS = Number(args.events);
const LINES = args.lines!.split(',').map(Number);

const url = await benchDatabase('genfill_bench_capture', { fresh: true });
const DB_NAME = decodeURIComponent(url.pathname.slice(1));
// Ingest refuses a file over the pending bound; the bench's files are the point.
const env: Record<string, string | undefined> = { ...benchEnv(url, '{genfill-bench-capture}'), GENFILL_MAX_PENDING_EVENTS: String(10 * Math.max(...LINES)) };
const cli = cliRunner(env);
const BIN = fileURLToPath(new URL('../apps/cli/bin/genfill.js', import.meta.url));
const EXAMPLES = fileURLToPath(new URL('../examples/', import.meta.url));
const PG_BIN = execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim();
const TIME = '/usr/bin/time';

const log = (line: string) => (args.json ? process.stderr : process.stdout).write(`${line}\n`);
const n = (v: number) => Math.round(v).toLocaleString('en-US');

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] ?? NaN;
}
const median = (xs: number[]) => quantile(xs, 0.5);
/** median and [min, max] of a series, printed as `m (min–max)`. */
function spread(xs: number[], digits = 2): { median: number; min: number; max: number; text: string } {
  const m = median(xs);
  const lo = Math.min(...xs);
  const hi = Math.max(...xs);
  return { median: m, min: lo, max: hi, text: `${m.toFixed(digits)} (${lo.toFixed(digits)}–${hi.toFixed(digits)})` };
}

const db = new pg.Pool({ connectionString: env.DATABASE_URL, max: 3 });
await cli('migrate');
const report: Record<string, unknown> = { database: DB_NAME, rounds: ROUNDS };

// ---------------------------------------------------------------------------------------- tpcb

/** pgbench TPC-B at RATE tps for `seconds` with a per-transaction log; latencies in ms. */
async function pgbench(seconds: number): Promise<number[]> {
  const dir = mkdtempSync(join(tmpdir(), 'genfill-bench-pgbench-'));
  const child = spawn(
    join(PG_BIN, 'pgbench'),
    ['-n', '-c', String(CLIENTS), '-j', '2', '-R', String(RATE), '-T', String(seconds), '-l', '--log-prefix', join(dir, 'tx'), '-h', url.hostname, '-p', url.port || '5432', '-U', 'postgres', DB_NAME],
    { stdio: 'ignore' },
  );
  await exited(child);
  if (child.exitCode !== 0) throw new Error(`pgbench exited ${child.exitCode}`);
  const ms: number[] = [];
  for (const f of readdirSync(dir)) {
    for (const line of readFileSync(join(dir, f), 'utf8').split('\n')) {
      // client_id transaction_no time script_no time_epoch time_us [schedule_lag]: time is µs,
      // measured from the scheduled start under -R (what a customer waits).
      const cols = line.trim().split(/\s+/);
      if (cols.length >= 6) ms.push(Number(cols[2]) / 1000);
    }
  }
  rmSync(dir, { recursive: true, force: true });
  return ms;
}

async function tpcbArm(captured: boolean) {
  if (captured) await cli('capture', 'install', 'public.pgbench_accounts');
  await db.query('CHECKPOINT');
  const before = Number((await db.query(`SELECT count(*) AS n FROM genfill.change_log`)).rows[0].n);
  const ms = await pgbench(SECONDS);
  const events = Number((await db.query(`SELECT count(*) AS n FROM genfill.change_log`)).rows[0].n) - before;
  if (captured) {
    await cli('capture', 'remove', 'public.pgbench_accounts');
    await db.query('TRUNCATE genfill.change_log'); // every (b) starts from the same empty log
  }
  return { captured, tx: ms.length, p50: quantile(ms, 0.5), p95: quantile(ms, 0.95), p99: quantile(ms, 0.99), events };
}

async function tpcb(): Promise<void> {
  log(`tpcb: pgbench -i -s ${SCALE}`);
  execFileSync(join(PG_BIN, 'pgbench'), ['-i', '-q', '-s', String(SCALE), '-h', url.hostname, '-p', url.port || '5432', '-U', 'postgres', DB_NAME], { stdio: 'ignore' });
  await db.query('VACUUM ANALYZE');
  try {
    await cli('capture', 'install', 'public.pgbench_accounts');
    await cli('capture', 'remove', 'public.pgbench_accounts');
  } catch (err) {
    report.tpcb = { available: false, reason: (err as Error).message.split('\n')[0] };
    log(`tpcb: not available — genfill capture install/remove failed: ${(err as Error).message.split('\n')[0]}`);
    return;
  }
  log(`tpcb: warming up (${Math.min(20, SECONDS)}s), then ${ROUNDS} rounds of (a) not captured and (b) captured, ${SECONDS}s each, ${RATE} tps, ${CLIENTS} clients`);
  await pgbench(Math.min(20, SECONDS));
  const a: Awaited<ReturnType<typeof tpcbArm>>[] = [];
  const b: typeof a = [];
  for (let r = 1; r <= ROUNDS; r++) {
    // a b, then b a, …: neither arm always runs on the warmer (or more bloated) database.
    for (const captured of r % 2 === 1 ? [false, true] : [true, false]) {
      const res = await tpcbArm(captured);
      (captured ? b : a).push(res);
      log(
        `  round ${r} (${captured ? 'b' : 'a'}) ${captured ? 'captured    ' : 'not captured'}: ${n(res.tx)} tx, p50 ${res.p50.toFixed(2)} ms, p95 ${res.p95.toFixed(2)} ms, p99 ${res.p99.toFixed(2)} ms` +
          (captured ? `, ${n(res.events)} events logged` : ''),
      );
    }
  }
  const pa = spread(a.map((x) => x.p95));
  const pb = spread(b.map((x) => x.p95));
  const ratio = pb.median / pa.median;
  const perRound = a.map((x, i) => b[i]!.p95 / x.p95);
  log(`tpcb: p95 (a) not captured ${pa.text} ms, (b) captured ${pb.text} ms — median of ${ROUNDS}, (min–max)`);
  log(`tpcb: p50 (a) ${spread(a.map((x) => x.p50)).text} ms, (b) ${spread(b.map((x) => x.p50)).text} ms; p99 (a) ${spread(a.map((x) => x.p99)).text} ms, (b) ${spread(b.map((x) => x.p99)).text} ms`);
  log(`tpcb: p95 ratio b/a ${ratio.toFixed(2)} (per round ${perRound.map((x) => x.toFixed(2)).join(', ')}; target ≤ 1.5)`);
  report.tpcb = { available: true, rate: RATE, clients: CLIENTS, scale: SCALE, seconds: SECONDS, notCaptured: a, captured: b, p95Ratio: ratio, p95RatioPerRound: perRound };
}

// ------------------------------------------------------------------------------------- consume

async function consume(): Promise<void> {
  const SOURCE = 'bench.consume';
  const insert = (c: pg.ClientBase | pg.Pool, from: number, count: number) =>
    c.query(
      `INSERT INTO genfill.change_log (event_id, source_table, key, op, row, revision)
       SELECT e, $1, jsonb_build_object('id', i % 50000), 'upsert', jsonb_build_object('id', i % 50000, 'v', i), e
         FROM (SELECT nextval('genfill.change_log_event_seq') AS e, i FROM generate_series($2::int, $2::int + $3::int - 1) AS i) s`,
      [SOURCE, from, count],
    );
  await db.query('TRUNCATE genfill.change_log');
  const long = await db.connect();
  await long.query('BEGIN');
  await insert(long, 49_990, 3);
  const t0 = performance.now();
  for (let i = 0; i < EVENTS; i += 1000) await insert(db, i, Math.min(1000, EVENTS - i));
  log(`consume: ${n(EVENTS)} events in ${n(EVENTS / 1000)} transactions behind one open transaction (${((performance.now() - t0) / 1000).toFixed(1)}s)`);
  await db.query('VACUUM ANALYZE genfill.change_log');
  const F = (await db.query(`SELECT pg_current_snapshot()::text AS s`)).rows[0].s as string;
  for (let t = 0; t < 5; t++) await insert(db, t * 20, 20);
  const S = (await db.query(`SELECT pg_current_snapshot()::text AS s`)).rows[0].s as string;
  const efficient = consumeStatement({ sourceTable: SOURCE, from: F, to: S, order: 'event' });
  // The same query with the range the SPEC warns about: one long transaction pins xmin(F).
  const naive = {
    text: `SELECT DISTINCT ON (key) event_id, key, op, row, revision, txid
  FROM genfill.change_log
 WHERE source_table = $1 AND txid >= pg_snapshot_xmin($2::pg_snapshot)
   AND pg_visible_in_snapshot(txid, $3::pg_snapshot) AND NOT pg_visible_in_snapshot(txid, $2::pg_snapshot)
 ORDER BY key, event_id DESC`,
    values: efficient.values,
  };
  const runs: Record<'efficient' | 'naive', { explainMs: number; planMs: number; wallMs: number; rows: number }[]> = { efficient: [], naive: [] };
  const REPEAT = Math.max(5, 2 * ROUNDS + 1);
  for (let r = 0; r < REPEAT; r++) {
    for (const which of r % 2 === 0 ? (['efficient', 'naive'] as const) : (['naive', 'efficient'] as const)) {
      const q = which === 'efficient' ? efficient : naive;
      const plan = (await db.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${q.text}`, q.values)).rows[0]['QUERY PLAN'][0];
      const w0 = performance.now();
      const rows = (await db.query(q.text, q.values)).rowCount ?? 0;
      runs[which].push({ explainMs: plan['Execution Time'], planMs: plan['Planning Time'], wallMs: performance.now() - w0, rows });
    }
  }
  await long.query('ROLLBACK');
  long.release();
  const plan = (await db.query(`EXPLAIN ${efficient.text}`, efficient.values)).rows.map((r) => r['QUERY PLAN']).join('\n');
  await db.query('TRUNCATE genfill.change_log');
  const e = spread(runs.efficient.map((x) => x.explainMs), 3);
  const v = spread(runs.naive.map((x) => x.explainMs), 3);
  log(`consume: EXPLAIN ANALYZE execution, median of ${REPEAT} (min–max): consumeStatement ${e.text} ms, txid >= xmin(F) ${v.text} ms; ratio ${(v.median / e.median).toFixed(0)}×`);
  log(`consume: wall time from the client: consumeStatement ${spread(runs.efficient.map((x) => x.wallMs), 3).text} ms, txid >= xmin(F) ${spread(runs.naive.map((x) => x.wallMs), 3).text} ms; both return ${runs.efficient[0]!.rows} rows`);
  log(`consume: plan of consumeStatement:\n${plan.replace(/^/gm, '    ')}`);
  report.consume = { events: EVENTS, from: F, to: S, efficient: runs.efficient, naive: runs.naive, medianMs: { efficient: e.median, naive: v.median }, plan };
}

// -------------------------------------------------------------------------------------- ingest

async function writeNdjson(path: string, lines: number): Promise<void> {
  const out = createWriteStream(path);
  for (let i = 1; i <= lines; i++) {
    const line = `{"key":{"order_id":${i}},"revision":${i},"op":"upsert","row":{"order_id":${i},"customer_id":${i % 1009},"region":"${['north', 'south', 'east', 'west'][i % 4]}","created_at":"2025-07-01T00:00:00Z","amount_cents":${100 + (i % 50000)}}}\n`;
    if (!out.write(line)) await once(out, 'drain');
  }
  out.end();
  await once(out, 'finish');
}

/** `genfill ingest` as its own node process: wall seconds, max RSS in MB, what it reported. */
async function ingestOnce(dataset: string, file: string): Promise<{ seconds: number; maxRssMb: number; applied: number }> {
  const argv = [BIN, 'ingest', dataset, file, '--json'];
  const timeFile = join(tmpdir(), `genfill-bench-time-${process.pid}`);
  const viaTime = existsSync(TIME);
  const t0 = performance.now();
  const child = viaTime
    ? spawn(TIME, ['-f', '%M', '-o', timeFile, process.execPath, ...argv], { env, stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn(process.execPath, argv, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => (err += d));
  let hwmKb = 0;
  const poll = viaTime
    ? undefined
    : setInterval(() => {
        try {
          const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
          if (m) hwmKb = Math.max(hwmKb, Number(m[1]));
        } catch {
          // exited between polls
        }
      }, 10);
  await exited(child);
  const seconds = (performance.now() - t0) / 1000;
  clearInterval(poll);
  if (child.exitCode !== 0) throw new Error(`genfill ingest exited ${child.exitCode}: ${err}`);
  if (viaTime) {
    hwmKb = Number(readFileSync(timeFile, 'utf8').trim().split('\n').at(-1));
    rmSync(timeFile, { force: true });
  }
  return { seconds, maxRssMb: hwmKb / 1024, applied: Number(JSON.parse(out).applied) };
}

async function ingest(): Promise<void> {
  const dataset = 'bench_ingest';
  const mirror = 'public.ingest_orders';
  try {
    await db.query(readFileSync(join(EXAMPLES, 'schema.sql'), 'utf8'));
    await db.query(`INSERT INTO public.tax_rates (region, rate) VALUES ('north', 0.19), ('south', 0.07), ('east', 0.2), ('west', 0.1) ON CONFLICT DO NOTHING`);
    await db.query('GRANT CREATE ON SCHEMA public TO genfill_owner');
    await db.query(`CREATE TABLE ${mirror} (LIKE public.orders INCLUDING ALL)`);
    await cli('capture', 'install', mirror, '--ingress');
    // A dataset is registered by its first release: one whose source is the mirror.
    const dir = mkdtempSync(join(tmpdir(), 'genfill-bench-ingest-'));
    const rel = parse(readFileSync(join(EXAMPLES, 'order-tax-fix.yaml'), 'utf8'));
    Object.assign(rel, { release: `${dataset}@1`, dataset, transform: { sql: join(EXAMPLES, 'transforms/order-tax-fix.sql') } });
    rel.source.table = mirror;
    rel.target = { ...rel.target, table: `public.${dataset}`, generation: 'g1', expectedActive: null };
    const file = join(dir, 'release.yaml');
    writeFileSync(file, stringify(rel));
    await cli('release', 'submit', file);
    rmSync(dir, { recursive: true, force: true });
  } catch (err) {
    report.ingest = { available: false, reason: (err as Error).message.split('\n')[0] };
    log(`ingest: not available — setting up an ingress mirror failed: ${(err as Error).message.split('\n')[0]}`);
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'genfill-bench-ndjson-'));
  const files = new Map<number, string>();
  for (const lines of LINES) {
    const f = join(dir, `events-${lines}.ndjson`);
    await writeNdjson(f, lines);
    files.set(lines, f);
  }
  log(`ingest: files of ${LINES.map(n).join(', ')} lines; ${ROUNDS} rounds, sizes alternating; max RSS via ${existsSync(TIME) ? '/usr/bin/time' : '/proc VmHWM'}`);
  const runs: { lines: number; seconds: number; eventsPerSecond: number; maxRssMb: number }[] = [];
  try {
    for (let r = 1; r <= ROUNDS; r++) {
      for (const lines of r % 2 === 1 ? LINES : [...LINES].reverse()) {
        // Every run starts from an empty mirror and log.
        await db.query(`TRUNCATE ${mirror}`);
        await db.query(`DELETE FROM genfill.ingress_keys WHERE source_table = $1`, [mirror]);
        await db.query('TRUNCATE genfill.change_log');
        await db.query(`VACUUM ANALYZE ${mirror}, genfill.ingress_keys`);
        await db.query('CHECKPOINT');
        const res = await ingestOnce(dataset, files.get(lines)!);
        if (res.applied !== lines) throw new Error(`ingest applied ${res.applied} of ${lines} events`);
        runs.push({ lines, seconds: res.seconds, eventsPerSecond: lines / res.seconds, maxRssMb: res.maxRssMb });
        log(`  round ${r}: ${n(lines)} lines in ${res.seconds.toFixed(2)}s = ${n(lines / res.seconds)} events/s, max RSS ${res.maxRssMb.toFixed(0)} MB`);
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const by = (lines: number) => runs.filter((x) => x.lines === lines);
  const sizes = LINES.map((lines) => ({
    lines,
    eventsPerSecond: spread(by(lines).map((x) => x.eventsPerSecond), 0),
    maxRssMb: spread(by(lines).map((x) => x.maxRssMb), 0),
  }));
  for (const s of sizes) log(`ingest: ${n(s.lines)} lines: ${s.eventsPerSecond.text} events/s, max RSS ${s.maxRssMb.text} MB (median (min–max) of ${ROUNDS})`);
  const small = sizes.reduce((a, b) => (a.lines < b.lines ? a : b));
  const large = sizes.reduce((a, b) => (a.lines > b.lines ? a : b));
  const rssRatio = large.maxRssMb.median / small.maxRssMb.median;
  // The process's start (tsx compiling the CLI: seconds on a busy machine) is in every run;
  // the slope between the two sizes is the rate at which the events themselves go in.
  const seconds = (lines: number) => median(by(lines).map((x) => x.seconds));
  const marginal = (large.lines - small.lines) / (seconds(large.lines) - seconds(small.lines));
  log(
    `ingest: ${n(large.lines)} lines at ${n(large.eventsPerSecond.median)} events/s wall (process start included), ` +
      `${n(marginal)} events/s between the two sizes (target ≥ 50,000)`,
  );
  // Bytes per extra line tells a leak (a constant per line) from a heap that settles.
  const perLine = ((large.maxRssMb.median - small.maxRssMb.median) * 1024 * 1024) / (large.lines - small.lines);
  log(
    `ingest: max RSS ${n(large.lines)}/${n(small.lines)} lines: ${rssRatio.toFixed(2)}× for ${(large.lines / small.lines).toFixed(0)}× the file, ` +
      `+${(large.maxRssMb.median - small.maxRssMb.median).toFixed(0)} MB = ${perLine.toFixed(0)} bytes per extra line (${rssRatio <= 1.25 ? 'flat' : 'NOT flat'})`,
  );
  report.ingest = { available: true, runs, sizes, marginalEventsPerSecond: marginal, rssRatio, rssBytesPerExtraLine: perLine };
}

try {
  if (ONLY.has('tpcb')) await tpcb();
  if (ONLY.has('consume')) await consume();
  if (ONLY.has('ingest')) await ingest();
} finally {
  await db.end();
}
if (args.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
