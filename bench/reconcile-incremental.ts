// bench/reconcile-incremental: an incremental reconciliation after --changed changed keys
// against a full one of the same release (issue 16: target ≤ 0.2×), and the catch-up rounds that
// bring those changes into the candidate (issue 16: target ≥ 20,000 events/s).
//
//   setup   `genfill demo --rows <rows> --until build` (seed, adopt with capture, plan, build;
//           the demo's live writer stopped with it), the candidate of order-tax-fix@3 built in
//           process if the demo left partitions unbuilt; the projector drained, one catch-up
//           round, and a full reconcile that must pass (RECONCILED, recording its catch-up
//           frontier: the first parent).
//   batch   before EVERY timed arm: --changed distinct seeded orders inside the release's range
//           (a hash-ordered sample, a different one each batch) get amount_cents + 1 in ONE
//           UPDATE (the capture triggers log one event per key), the projector drains the log
//           (projectDataset until idle), and one catch-up round (catchupRound) applies it to the
//           candidate: events/s, wall clock around the call (the round's own `ms`, which
//           stops before it records the partitions it touched and commits, is shown beside).
//   arms    (A) reconcileIncremental, (B) a full reconcile (default options, as the CLI runs
//           it), interleaved A B | B A …, each right after its own batch. Each reconciliation
//           is the next one's parent, so every incremental run re-checks exactly the one batch
//           since its parent — asserted: keys === --changed. (One batch per round would leave the
//           A of a B A round nothing to check: the B before it already verified that frontier.)
//           Both must pass (RECONCILED, no findings, no pending keys), else exit 1.
//
//   npx tsx bench/reconcile-incremental.ts [--rows 1000000] [--changed 10000] [--rounds 3] [--json] [--keep]
//
// Uses DATABASE_URL (default: a database genfill_bench_incremental, dropped and created again
// at the start and dropped at the end unless --keep; a DATABASE_URL of the caller's is never
// dropped). With --json the progress goes to stderr and one JSON document to stdout.
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { buildPartition, claimPartition } from '@genfill/builder';
import { createLogger } from '@genfill/observability';
import { startBuilding } from '@genfill/planner';
import { projectDataset } from '@genfill/projector';
import { reconcile, reconcileIncremental, type IncrementalResult, type ReconcileResult } from '@genfill/reconcile';
import { benchDatabase, benchEnv, cliRunner, dropBenchDatabase, quantile } from './support.ts';
import { type CatchupRound, catchupRound } from '@genfill/switch';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string', default: '1000000' },
    changed: { type: 'string', default: '10000' },
    rounds: { type: 'string', default: '3' },
    json: { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
  },
});
const ROWS = Number(args.rows);
const CHANGED = Number(args.changed);
const ROUNDS = Number(args.rounds);
for (const [name, v] of Object.entries({ rows: ROWS, changed: CHANGED, rounds: ROUNDS })) {
  if (!Number.isInteger(v) || v < 1) throw new RangeError(`--${name} must be a positive whole number, not ${String(args[name as keyof typeof args])}`);
}
if (CHANGED > ROWS) throw new RangeError(`--changed (${CHANGED}) cannot exceed the orders in range (--rows ${ROWS})`);

const RELEASE = 'order-tax-fix@3';
const DS = 'orders_enriched';
const TARGETS = { ratio: 0.2, catchupEventsPerSecond: 20_000 };
const started = performance.now();
const owned = !process.env.DATABASE_URL;
const url = await benchDatabase('genfill_bench_incremental', { fresh: true });
const cli = cliRunner(benchEnv(url, '{genfill-bench-incremental}'));
const log = (line: string) => (args.json ? process.stderr : process.stdout).write(`${line}\n`);
const n = (v: number) => Math.round(v).toLocaleString('en-US');
const secs = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const r1 = (v: number) => Math.round(v * 10) / 10;
function spread(xs: number[], digits = 0) {
  const m = quantile(xs, 0.5);
  return { median: m, min: Math.min(...xs), max: Math.max(...xs), n: xs.length, text: `${m.toFixed(digits)} (${Math.min(...xs).toFixed(digits)}–${Math.max(...xs).toFixed(digits)})` };
}

const dir = mkdtempSync(join(tmpdir(), 'genfill-bench-incremental-'));
const db = new pg.Pool({ connectionString: url.toString(), max: 6 });
db.on('error', () => undefined);
const quiet = createLogger('bench', 'silent');
const failures: string[] = [];
let batchSeed = 0;

async function releaseState(): Promise<string> {
  const { rows } = await db.query<{ state: string }>('SELECT state FROM genfill.releases WHERE id = $1', [RELEASE]);
  if (!rows[0]) throw new Error(`release ${RELEASE} does not exist after the demo`);
  return rows[0].state;
}

/** Build every partition the demo left unbuilt, as a worker would. */
async function ensureBuilt(): Promise<void> {
  if ((await releaseState()) === 'SNAPSHOT_PINNED') await startBuilding(db, RELEASE);
  if ((await releaseState()) === 'BUILDING') {
    const { rows } = await db.query<{ id: string }>(`SELECT id FROM genfill.partitions WHERE release = $1 AND status <> 'BUILT' ORDER BY seq`, [RELEASE]);
    const t = performance.now();
    for (const p of rows) {
      const c = await claimPartition(db, { release: RELEASE, partition: p.id, worker: 'bench', leaseMs: 600_000 });
      if (c.kind !== 'claimed') throw new Error(`claim of ${RELEASE} ${p.id} refused: ${JSON.stringify(c)}`);
      await buildPartition(db, { release: RELEASE, partition: p.id, attempt: c.attempt });
    }
    log(`  built ${rows.length} partitions in process in ${secs(performance.now() - t)}`);
  }
  const s = await releaseState();
  if (s !== 'BUILT') throw new Error(`release ${RELEASE} is ${s} after the demo: the bench needs it BUILT`);
}

const drain = () => projectDataset(DS, { db, log: quiet, untilIdle: true, id: 'bench-incremental', leaseMs: 60_000 });

interface Batch {
  updated: number;
  drainMs: number;
  round: CatchupRound;
  roundMs: number;
  eventsPerSecond: number;
}

/**
 * --changed distinct seeded orders inside the release's range get amount_cents + 1 in one
 * UPDATE (a different hash-ordered sample each batch), then the projector drains and one
 * catch-up round applies them to the candidate.
 */
async function batch(): Promise<Batch> {
  const seed = ++batchSeed;
  const u = await db.query(
    `UPDATE public.orders o SET amount_cents = o.amount_cents + 1
      WHERE o.order_id IN (SELECT s.order_id FROM public.orders s, genfill.releases r
                            WHERE r.id = $1 AND s.created_at >= lower(r.range) AND s.created_at < upper(r.range)
                            ORDER BY hashint8extended(s.order_id, $2) LIMIT $3)`,
    [RELEASE, seed, CHANGED],
  );
  if (u.rowCount !== CHANGED) throw new Error(`batch ${seed}: the UPDATE changed ${u.rowCount} orders, not ${CHANGED}`);
  let t = performance.now();
  await drain();
  const drainMs = performance.now() - t;
  t = performance.now();
  const round = await catchupRound(db, RELEASE);
  const roundMs = performance.now() - t;
  if (round.events !== CHANGED) failures.push(`batch ${seed}: the catch-up round applied ${round.events} events, not ${CHANGED}`);
  return { updated: u.rowCount, drainMs, round, roundMs, eventsPerSecond: round.events / (roundMs / 1000) };
}

function checkFull(label: string, r: ReconcileResult): void {
  const live = r.summary.live;
  if (r.state !== 'RECONCILED' || r.findings.count !== 0) {
    failures.push(`${label}: full reconciliation #${r.id} is ${r.state} with ${r.findings.count} findings (${JSON.stringify(r.findings.first.slice(0, 3))})`);
  }
  if (!live?.catchupFrontier) failures.push(`${label}: full reconciliation #${r.id} recorded no catch-up frontier`);
  else if (live.pendingKeys !== 0) failures.push(`${label}: full reconciliation #${r.id} left ${live.pendingKeys} keys pending`);
}

function checkIncremental(label: string, r: IncrementalResult): void {
  if (r.state !== 'RECONCILED' || r.findings.count !== 0) {
    failures.push(`${label}: incremental reconciliation #${r.id} is ${r.state} with ${r.findings.count} findings (${JSON.stringify(r.findings.first.slice(0, 3))})`);
  }
  if (r.keys !== CHANGED) failures.push(`${label}: incremental reconciliation #${r.id} checked ${r.keys} keys, not ${CHANGED}`);
  if (r.quarantined !== 0) failures.push(`${label}: incremental reconciliation #${r.id} left out ${r.quarantined} quarantined keys`);
}

const report: Record<string, unknown> = { release: RELEASE, rows: ROWS, changed: CHANGED, rounds: ROUNDS, cpus: cpus().length, targets: TARGETS };
let code = 0;
try {
  log(`setup: genfill demo --rows ${n(ROWS)} --until build (seed, adopt with capture, plan, build; the demo's live writer stopped with it)`);
  let t = performance.now();
  await cli('demo', '--rows', String(ROWS), '--until', 'build', '--no-throttle', '--dir', join(dir, 'demo'));
  const demoMs = performance.now() - t;
  await ensureBuilt();
  t = performance.now();
  const drained = await drain();
  const first = await catchupRound(db, RELEASE);
  const base = await reconcile(db, RELEASE, { findingsDir: dir });
  const baseMs = performance.now() - t;
  checkFull('setup', base);
  if (failures.length > 0) throw new Error(failures.join('; '));
  log(
    `  demo ${secs(demoMs)}; drained ${n(drained.events)} events, catch-up round of ${n(first.events)} events, ` +
      `full reconcile #${base.id} ${base.state} — ${secs(baseMs)} in all`,
  );
  report.setup = { demoMs: Math.round(demoMs), drainedEvents: drained.events, firstRoundEvents: first.events, reconciliation: base.id, ms: Math.round(baseMs), rowsStored: base.summary.rows.stored };

  log(`${ROUNDS} rounds of (A) reconcileIncremental and (B) a full reconcile of ${RELEASE}, interleaved A B | B A, each after its own batch of ${n(CHANGED)} changed keys`);
  const a: { ms: number; keys: number; verifyMs: number; id: string }[] = [];
  const b: { ms: number; id: string; timings: Record<string, number> }[] = [];
  const batches: Batch[] = [];
  for (let r = 1; r <= ROUNDS; r++) {
    for (const arm of r % 2 === 1 ? ['A', 'B'] : ['B', 'A']) {
      const x = await batch();
      batches.push(x);
      const label = `round ${r} ${arm}`;
      const head = `  round ${r} ${arm === 'A' ? 'incremental' : 'full       '}: batch of ${n(x.updated)} keys (drain ${secs(x.drainMs)}, catch-up ${n(x.round.events)} events in ${secs(x.roundMs)} = ${n(x.eventsPerSecond)}/s, its own ms ${n(x.round.ms)});`;
      if (arm === 'A') {
        const s = performance.now();
        const res = await reconcileIncremental(db, RELEASE);
        const ms = performance.now() - s;
        checkIncremental(label, res);
        a.push({ ms, keys: res.keys, verifyMs: res.ms, id: res.id });
        log(`${head} incremental #${res.id} (parent #${res.parent}) checked ${n(res.keys)} keys in ${secs(ms)} → ${res.state}`);
      } else {
        const s = performance.now();
        const res = await reconcile(db, RELEASE, { findingsDir: dir });
        const ms = performance.now() - s;
        checkFull(label, res);
        b.push({ ms, id: res.id, timings: res.summary.timings });
        log(`${head} full #${res.id} in ${secs(ms)} → ${res.state}, ${res.findings.count} findings`);
      }
    }
  }

  const inc = spread(a.map((x) => x.ms));
  const full = spread(b.map((x) => x.ms));
  const ratio = inc.median / full.median;
  // Paired per round: the A and B of the same round ran next to each other.
  const paired = spread(a.map((x, i) => x.ms / b[i]!.ms), 3);
  const rates = spread(batches.map((x) => x.eventsPerSecond));
  const keys = a.map((x) => x.keys);
  log(`incremental: ${inc.text} ms (median, min–max of ${inc.n}); keys checked: ${keys.join(', ')}`);
  log(`full:        ${full.text} ms (median, min–max of ${full.n})`);
  log(`ratio incremental/full: ${ratio.toFixed(3)}× of the medians, per round ${paired.text}× (target ≤ ${TARGETS.ratio}×) — ${ratio <= TARGETS.ratio ? 'target met' : 'OVER target'}`);
  log(`catch-up rounds: ${rates.text} events/s over ${rates.n} rounds of ${n(CHANGED)} events (target ≥ ${n(TARGETS.catchupEventsPerSecond)}/s) — ${rates.median >= TARGETS.catchupEventsPerSecond ? 'target met' : 'UNDER target'}`);
  const strip = ({ text: _t, ...rest }: ReturnType<typeof spread>) => rest;
  report.incremental = { ms: strip(inc), keys, runs: a.map((x) => ({ id: x.id, ms: r1(x.ms), verifyMs: x.verifyMs, keys: x.keys })) };
  report.full = { ms: strip(full), runs: b.map((x) => ({ id: x.id, ms: r1(x.ms), timings: x.timings })) };
  report.ratio = Math.round(ratio * 1000) / 1000;
  report.ratioPerRound = strip(paired);
  report.ratioMet = ratio <= TARGETS.ratio;
  report.catchup = {
    eventsPerSecond: strip(rates),
    met: rates.median >= TARGETS.catchupEventsPerSecond,
    // ms: wall clock around catchupRound (the events/s above); roundMs: the round's own `ms`
    // (catchup_rounds.ms), taken before it records the partitions it touched and commits.
    rounds: batches.map((x) => ({ events: x.round.events, upserted: x.round.upserted, noops: x.round.noops, ms: r1(x.roundMs), roundMs: x.round.ms, drainMs: r1(x.drainMs) })),
  };
} catch (err) {
  failures.push(`the bench failed: ${(err as Error).stack ?? String(err)}`);
} finally {
  await db.end().catch(() => undefined);
  if (owned && !args.keep) await dropBenchDatabase(url).catch((e: Error) => log(`could not drop ${url.pathname.slice(1)}: ${e.message}`));
  rmSync(dir, { recursive: true, force: true });
}

report.failures = failures;
report.runtimeSeconds = Math.round((performance.now() - started) / 100) / 10;
if (failures.length > 0) {
  code = 1;
  for (const f of failures) log(`FAILED: ${f}`);
}
log(`runtime ${report.runtimeSeconds} s${owned && !args.keep ? `; dropped ${url.pathname.slice(1)}` : ''}`);
if (args.json) {
  // `ratio` last, as in every bench's JSON (null when the bench failed before measuring it).
  const { ratio, ...rest } = report;
  process.stdout.write(`${JSON.stringify({ ...rest, ratio: ratio ?? null })}\n`);
}
process.exit(code);
