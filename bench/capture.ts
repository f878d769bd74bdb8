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
//   ingest   `genfill ingest` of NDJSON files of each --lines size (default 100k and 1M) of new
//            keys, spawned as the genfill node process under /usr/bin/time (max RSS;
//            /proc/<pid>/status VmHWM when it is missing), its stage (COPY) and apply (the verb)
//            read from pg_stat_activity; beside it, in the same rounds, two floors: the same
//            writes without genfill's logic (staged COPY + three INSERT … SELECT, via psql) and
//            a raw COPY of the typed rows into an unindexed table. Sizes alternate, arms rotate.
//            Target: ≥ 50,000 events/s, max RSS flat in the file's size.
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
function spread(all: number[], digits = 2): { median: number; min: number; max: number; text: string } {
  const xs = all.filter((x) => !Number.isNaN(x));
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

const MIRROR = 'public.ingest_orders';
const FLOOR_TABLE = 'bench_floor.rows';
const REGIONS = ['north', 'south', 'east', 'west'];

/** One size's input in three spellings of the same rows. */
interface IngestFiles {
  /** NDJSON events for `genfill ingest`. */
  ndjson: string;
  /** COPY text `line<TAB>event`: what genfill stages, for the inserts floor. */
  staged: string;
  /** COPY text of the typed rows, for the raw COPY floor. */
  rows: string;
}

async function writeInputs(dir: string, lines: number): Promise<IngestFiles> {
  const files: IngestFiles = { ndjson: join(dir, `events-${lines}.ndjson`), staged: join(dir, `events-${lines}.copy`), rows: join(dir, `rows-${lines}.copy`) };
  const outs = [files.ndjson, files.staged, files.rows].map((f) => createWriteStream(f));
  let texts = ['', '', ''];
  for (let i = 1; i <= lines; i++) {
    const region = REGIONS[i % 4]!;
    const amount = 100 + (i % 50000);
    const line = `{"key":{"order_id":${i}},"revision":${i},"op":"upsert","row":{"order_id":${i},"customer_id":${i % 1009},"region":"${region}","created_at":"2025-07-01T00:00:00Z","amount_cents":${amount}}}`;
    texts[0] += `${line}\n`;
    texts[1] += `${i}\t${line}\n`;
    texts[2] += `${i}\t${i % 1009}\t${region}\t2025-07-01T00:00:00Z\t${amount}\n`;
    if (i % 2000 === 0 || i === lines) {
      for (const [k, out] of outs.entries()) if (!out.write(texts[k])) await once(out, 'drain');
      texts = ['', '', ''];
    }
  }
  for (const out of outs) {
    out.end();
    await once(out, 'finish');
  }
  return files;
}

/** Server timestamps of the ingest's statements, polled from pg_stat_activity (ms since the epoch). */
interface Phases {
  copyStart?: number;
  applyStart?: number;
  applyEnd?: number;
}

/** Poll pg_stat_activity for the ingest's COPY and apply until stopped. */
function watchPhases(): { phases: Phases; stop: () => Promise<void> } {
  const phases: Phases = {};
  let applyPid: number | null = null;
  let busy: Promise<void> = Promise.resolve();
  const poll = async () => {
    const { rows } = await db.query<{ pid: number; query: string; state: string; query_start: Date; state_change: Date }>(
      `SELECT pid, query, state, query_start, state_change FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`,
    );
    // The session may end within a poll of its apply: then the poll that no longer sees it.
    if (applyPid !== null && phases.applyEnd === undefined && !rows.some((r) => r.pid === applyPid)) {
      phases.applyEnd = (await db.query<{ now: Date }>('SELECT clock_timestamp() AS now')).rows[0]!.now.getTime();
    }
    for (const r of rows) {
      if (r.query.startsWith('COPY pg_temp.ingress_events')) phases.copyStart ??= r.query_start.getTime();
      if (r.query.includes('genfill.ingest_apply')) {
        phases.applyStart ??= r.query_start.getTime();
        applyPid = r.pid;
        if (r.state !== 'active') phases.applyEnd ??= r.state_change.getTime();
      } else if (r.pid === applyPid && phases.applyStart !== undefined && r.query_start.getTime() >= phases.applyStart) {
        // The statement after the apply (its COMMIT) started when the apply ended.
        phases.applyEnd ??= r.query_start.getTime();
      }
    }
  };
  const timer = setInterval(() => {
    busy = busy.then(poll).catch(() => undefined);
  }, 100);
  return {
    phases,
    stop: async () => {
      clearInterval(timer);
      await busy;
    },
  };
}

/** `genfill ingest` as its own node process: wall seconds, max RSS in MB, what it reported, where its time went. */
async function ingestOnce(dataset: string, file: string) {
  const argv = [BIN, 'ingest', dataset, file, '--json'];
  const timeFile = join(tmpdir(), `genfill-bench-time-${process.pid}`);
  const viaTime = existsSync(TIME);
  const watch = watchPhases();
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
  await watch.stop();
  if (child.exitCode !== 0) throw new Error(`genfill ingest exited ${child.exitCode}: ${err}`);
  if (viaTime) {
    hwmKb = Number(readFileSync(timeFile, 'utf8').trim().split('\n').at(-1));
    rmSync(timeFile, { force: true });
  }
  const p = watch.phases;
  const stage = p.copyStart !== undefined && p.applyStart !== undefined ? (p.applyStart - p.copyStart) / 1000 : NaN;
  const apply = p.applyStart !== undefined && p.applyEnd !== undefined ? (p.applyEnd - p.applyStart) / 1000 : NaN;
  return { seconds, maxRssMb: hwmKb / 1024, applied: Number(JSON.parse(out).applied), stageSeconds: stage, applySeconds: apply };
}

/** Run a psql script against the bench database; its wall seconds. */
async function psqlSeconds(script: string): Promise<number> {
  const t0 = performance.now();
  const child = spawn(join(PG_BIN, 'psql'), ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-h', url.hostname, '-p', url.port || '5432', '-U', 'postgres', '-d', DB_NAME], {
    stdio: ['pipe', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr!.on('data', (d) => (err += d));
  child.stdin!.end(script);
  await exited(child);
  if (child.exitCode !== 0) throw new Error(`psql exited ${child.exitCode}: ${err}`);
  return (performance.now() - t0) / 1000;
}

const copyPath = (f: string) => `'${f.replace(/'/g, "''")}'`;

/**
 * Floor 1: the typed rows COPYed into a logged table with the mirror's columns and no index —
 * what getting the rows into PostgreSQL at all costs on this machine.
 */
const floorCopy = (files: IngestFiles) => psqlSeconds(`\\copy ${FLOOR_TABLE} FROM ${copyPath(files.rows)}\n`);

/**
 * Floor 2: genfill's writes without genfill's logic — the same staged COPY of the raw lines, then
 * in one transaction the three inserts an ingest of new keys makes (the keys' ingress_keys rows,
 * the mirror rows typed by jsonb_populate_record, the change log with the typed image), straight
 * from the staged rows: no checks, no candidate per key, no locking order, no fallback.
 */
const floorInserts = (files: IngestFiles) =>
  psqlSeconds(`SET temp_buffers = '256MB';
SET "TimeZone" = 'UTC';
SET extra_float_digits = 1;
BEGIN;
SET LOCAL work_mem = '256MB';
SET LOCAL jit = off;
CREATE TEMPORARY TABLE staged (line integer, event jsonb) ON COMMIT DROP;
\\copy staged FROM ${copyPath(files.staged)}
INSERT INTO genfill.ingress_keys (source_table, key, revision, deleted)
SELECT '${MIRROR}', s.event -> 'key', (s.event ->> 'revision')::bigint, false FROM staged s;
INSERT INTO ${MIRROR} SELECT r.* FROM staged s CROSS JOIN LATERAL jsonb_populate_record(NULL::${MIRROR}, s.event -> 'row') r;
INSERT INTO genfill.change_log (source_table, key, op, row, revision)
SELECT '${MIRROR}', s.event -> 'key', 'upsert', to_jsonb(r), (s.event ->> 'revision')::bigint
  FROM staged s CROSS JOIN LATERAL jsonb_populate_record(NULL::${MIRROR}, s.event -> 'row') r;
COMMIT;
`);

/**
 * Every arm starts from an empty mirror, log and floor table. The mirror is the only one in
 * this database, so its keys go by TRUNCATE too: a DELETE leaves a million dead index entries
 * of the very keys the next run inserts (VACUUM cannot remove them while any older snapshot is
 * open on the server), and each insert then visits them.
 */
async function resetIngest(): Promise<void> {
  await db.query(`TRUNCATE ${MIRROR}, ${FLOOR_TABLE}, genfill.ingress_keys, genfill.change_log`);
  await db.query(`VACUUM ANALYZE ${MIRROR}, genfill.ingress_keys`);
  await db.query('CHECKPOINT');
}

type Arm = 'ingest' | 'inserts' | 'copy';
const ARMS: Arm[] = ['ingest', 'inserts', 'copy'];

async function ingest(): Promise<void> {
  const dataset = 'bench_ingest';
  try {
    await db.query(readFileSync(join(EXAMPLES, 'schema.sql'), 'utf8'));
    await db.query(`INSERT INTO public.tax_rates (region, rate) VALUES ('north', 0.19), ('south', 0.07), ('east', 0.2), ('west', 0.1) ON CONFLICT DO NOTHING`);
    await db.query('GRANT CREATE ON SCHEMA public TO genfill_owner');
    await db.query(`CREATE TABLE ${MIRROR} (LIKE public.orders INCLUDING ALL)`);
    await db.query(`CREATE SCHEMA bench_floor; CREATE TABLE ${FLOOR_TABLE} (LIKE public.orders)`);
    await cli('capture', 'install', MIRROR, '--ingress');
    // A dataset is registered by its first release: one whose source is the mirror.
    const dir = mkdtempSync(join(tmpdir(), 'genfill-bench-ingest-'));
    const rel = parse(readFileSync(join(EXAMPLES, 'order-tax-fix.yaml'), 'utf8'));
    Object.assign(rel, { release: `${dataset}@1`, dataset, transform: { sql: join(EXAMPLES, 'transforms/order-tax-fix.sql') } });
    rel.source.table = MIRROR;
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
  const files = new Map<number, IngestFiles>();
  for (const lines of LINES) files.set(lines, await writeInputs(dir, lines));
  log(
    `ingest: files of ${LINES.map(n).join(', ')} lines; ${ROUNDS} rounds, sizes alternating, arms rotating: ` +
      `(ingest) genfill ingest, (inserts) the same writes without genfill's logic, (copy) a raw COPY of the rows into an unindexed table; ` +
      `max RSS via ${existsSync(TIME) ? '/usr/bin/time' : '/proc VmHWM'}`,
  );
  type Run = { arm: Arm; lines: number; seconds: number; eventsPerSecond: number; maxRssMb?: number; stageSeconds?: number; applySeconds?: number };
  const runs: Run[] = [];
  try {
    for (let r = 1; r <= ROUNDS; r++) {
      const arms = [...ARMS.slice((r - 1) % ARMS.length), ...ARMS.slice(0, (r - 1) % ARMS.length)];
      for (const lines of r % 2 === 1 ? LINES : [...LINES].reverse()) {
        for (const arm of arms) {
          await resetIngest();
          const f = files.get(lines)!;
          if (arm === 'ingest') {
            const res = await ingestOnce(dataset, f.ndjson);
            if (res.applied !== lines) throw new Error(`ingest applied ${res.applied} of ${lines} events`);
            runs.push({ arm, lines, seconds: res.seconds, eventsPerSecond: lines / res.seconds, maxRssMb: res.maxRssMb, stageSeconds: res.stageSeconds, applySeconds: res.applySeconds });
            log(
              `  round ${r} (ingest):  ${n(lines)} lines in ${res.seconds.toFixed(2)}s = ${n(lines / res.seconds)} events/s ` +
                `(stage ${res.stageSeconds.toFixed(2)}s, apply ${res.applySeconds.toFixed(2)}s), max RSS ${res.maxRssMb.toFixed(0)} MB`,
            );
          } else {
            const seconds = arm === 'inserts' ? await floorInserts(f) : await floorCopy(f);
            const got = Number((await db.query(`SELECT count(*) AS n FROM ${arm === 'inserts' ? MIRROR : FLOOR_TABLE}`)).rows[0].n);
            if (got !== lines) throw new Error(`floor (${arm}) wrote ${got} of ${lines} rows`);
            runs.push({ arm, lines, seconds, eventsPerSecond: lines / seconds });
            log(`  round ${r} (${arm}): ${' '.repeat(7 - arm.length)}${n(lines)} lines in ${seconds.toFixed(2)}s = ${n(lines / seconds)} rows/s`);
          }
        }
      }
    }
  } finally {
    await resetIngest();
    rmSync(dir, { recursive: true, force: true });
  }
  const by = (arm: Arm, lines: number) => runs.filter((x) => x.arm === arm && x.lines === lines);
  const sizes = LINES.map((lines) => {
    const ing = by('ingest', lines);
    const secs = (arm: Arm) => median(by(arm, lines).map((x) => x.seconds));
    return {
      lines,
      eventsPerSecond: spread(ing.map((x) => x.eventsPerSecond), 0),
      maxRssMb: spread(ing.map((x) => x.maxRssMb!), 0),
      stageSeconds: spread(ing.map((x) => x.stageSeconds!)),
      applySeconds: spread(ing.map((x) => x.applySeconds!)),
      floors: {
        inserts: spread(by('inserts', lines).map((x) => x.eventsPerSecond), 0),
        copy: spread(by('copy', lines).map((x) => x.eventsPerSecond), 0),
      },
      // Per round (the arms of one round ran back to back): how much longer genfill took.
      ratioToInsertsFloor: spread(ing.map((x, i) => x.seconds / by('inserts', lines)[i]!.seconds)),
      ratioToCopyFloor: spread(ing.map((x, i) => x.seconds / by('copy', lines)[i]!.seconds)),
      medianSeconds: { ingest: secs('ingest'), inserts: secs('inserts'), copy: secs('copy') },
    };
  });
  for (const s of sizes) {
    log(
      `ingest: ${n(s.lines)} lines: genfill ingest ${s.eventsPerSecond.text} events/s (stage ${s.stageSeconds.text}s, apply ${s.applySeconds.text}s), ` +
        `max RSS ${s.maxRssMb.text} MB; floors: same writes without genfill's logic ${s.floors.inserts.text} rows/s, raw COPY ${s.floors.copy.text} rows/s ` +
        `(median (min–max) of ${ROUNDS})`,
    );
    log(`ingest: ${n(s.lines)} lines: time / floor per round: ×${s.ratioToInsertsFloor.text} the inserts floor, ×${s.ratioToCopyFloor.text} the raw COPY`);
  }
  const small = sizes.reduce((a, b) => (a.lines < b.lines ? a : b));
  const large = sizes.reduce((a, b) => (a.lines > b.lines ? a : b));
  const rssRatio = large.maxRssMb.median / small.maxRssMb.median;
  // The process's start (tsx compiling the CLI: seconds on a busy machine) is in every run;
  // the slope between the two sizes is the rate at which the events themselves go in.
  const marginal = (large.lines - small.lines) / (large.medianSeconds.ingest - small.medianSeconds.ingest);
  const marginalFloor = (large.lines - small.lines) / (large.medianSeconds.inserts - small.medianSeconds.inserts);
  log(
    `ingest: ${n(large.lines)} lines at ${n(large.eventsPerSecond.median)} events/s wall (process start included), ` +
      `${n(marginal)} events/s between the two sizes (target ≥ 50,000); the inserts floor ${n(marginalFloor)} rows/s between the two sizes`,
  );
  // Bytes per extra line tells a leak (a constant per line) from a heap that settles.
  const perLine = ((large.maxRssMb.median - small.maxRssMb.median) * 1024 * 1024) / (large.lines - small.lines);
  log(
    `ingest: max RSS ${n(large.lines)}/${n(small.lines)} lines: ${rssRatio.toFixed(2)}× for ${(large.lines / small.lines).toFixed(0)}× the file, ` +
      `+${(large.maxRssMb.median - small.maxRssMb.median).toFixed(0)} MB = ${perLine.toFixed(0)} bytes per extra line (${rssRatio <= 1.25 ? 'flat' : 'NOT flat'})`,
  );
  report.ingest = {
    available: true,
    runs,
    sizes,
    marginalEventsPerSecond: marginal,
    marginalInsertsFloorRowsPerSecond: marginalFloor,
    rssRatio,
    rssBytesPerExtraLine: perLine,
  };
}

try {
  if (ONLY.has('tpcb')) await tpcb();
  if (ONLY.has('consume')) await consume();
  if (ONLY.has('ingest')) await ingest();
} finally {
  await db.end();
}
// The headline comparison, last: captured vs not-captured foreground p95 (the capture's cost)
// when TPC-B ran, else the ingest's time over the same writes without genfill's logic.
const tp = report.tpcb as { p95Ratio?: number } | undefined;
const ing = report.ingest as { marginalEventsPerSecond?: number; marginalInsertsFloorRowsPerSecond?: number } | undefined;
report.ratio =
  tp?.p95Ratio ??
  (ing?.marginalEventsPerSecond && ing.marginalInsertsFloorRowsPerSecond ? Number((ing.marginalInsertsFloorRowsPerSecond / ing.marginalEventsPerSecond).toFixed(3)) : null);
if (args.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
