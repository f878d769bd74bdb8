// bench/rollback: how long a rollback takes, and how long readers wait in it, after a minute of
// writes since the cutover (issue 18; target < 10 s, seed RTO 15 minutes). The demo's dataset is
// seeded and adopted with capture; the demo's order writer runs at --rate transactions/s and the
// projector polls every 50 ms, both in this process. Then --rounds times, each on a fresh release
// (--days daily partitions of the fixed tax transform, a different day each round, the rest
// carried from the generation active then): built in process, caught up, reconciled, approved by
// a second login and cut over (bench/support.ts demoReleases); the writer writes for --after
// seconds into the new generation while the old one (RETAINED) stays at the cutover's barrier B;
// then rollbackRelease takes readers back to the old generation, which must absorb every event
// since B. Every rollback returns to the same (adopted) generation, so the next round's release
// expects it again.
//
//   total    rollbackRelease from call to the switch's commit (totalMs). Target < 10 s.
//   freeze   the rollback seal's commit to the switch's commit (freezeMs): readers of the new
//            generation see no new writes. The cutover's bound: target < 2 s, goal < 500 ms.
//   cas      the switch transaction (casMs), which applies the tail (appliedAtSwitch) in it.
//   replay   the unsealed replay rounds into the old generation (rounds, latest events per key,
//            ms) and their events/s; `log` counts the change-log rows the old generation had to
//            absorb — (B, S_rb], B its frontier before the rollback — and those written since the
//            cutover's switch (S_cut, S_rb], with their distinct keys.
//   floor    right after each rollback, --floor times: ONE `INSERT … SELECT … ON CONFLICT DO
//            UPDATE` of as many rows as the replay applied (the rows the replay wrote, read from
//            the old generation, the replayed keys first) into a copy of the adopted generation's
//            table (same columns, indexes and key — today two identical unique indexes on
//            (generation, order_id), adopt's and the one ATTACH built, so both sides maintain
//            both), REPEATABLE READ, timed from pool checkout to COMMIT like a replay round. The first sample inserts the writer's new keys, later
//            ones only update. floor rows/s over replay events/s is how far the replay is from
//            the bare write of its rows (and so what bounds the rollback's time).
//   check    after each rollback the writer pauses, the projector passes a snapshot taken then,
//            and driftCheck (@genfill/reconcile) compares the active (old) generation with its
//            transform map applied to the source (missing, extra and pending must be 0); the view
//            public.orders_enriched is compared with that generation's live rows (EXCEPT ALL,
//            both ways). A difference, a refusal or a wrong pointer fails the run (exit 1). The
//            writer then starts again (a new writer: it inserts first, seed 42 + round).
//
//   npx tsx bench/rollback.ts [--rows 200000] [--rounds 5] [--rate 20] [--after 60] [--days 1] [--floor 3] [--json] [--keep]
//
// Quick: --after 10 --rounds 3. Uses DATABASE_URL (default: a database genfill_bench_rollback,
// dropped and created again at the start and dropped at the end unless --keep; a DATABASE_URL of
// the caller's is never dropped). Creates the login genfill_bench_approver (a member of
// genfill_approver) when missing. With --json the progress goes to stderr and one JSON document
// to stdout.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { createLogger } from '@genfill/observability';
import { projectDataset } from '@genfill/projector';
import { driftCheck, type DriftResult } from '@genfill/reconcile';
import { qualifiedGenerationTable, withTransaction } from '@genfill/registry';
import { startOrderWriter, type OrderWriter, type WriterStats } from '../apps/cli/src/demo/writer.ts';
import { demoCounts } from '../apps/cli/src/demo/seed.ts';
import { activeGeneration, benchDatabase, benchEnv, cliRunner, demoRangeOf, demoReleases, dist, dropBenchDatabase, projectorPassedNow, quantile } from './support.ts';
import { cutoverRelease, rollbackRelease, type RollbackResult } from '@genfill/switch';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string', default: '200000' },
    rounds: { type: 'string', default: '5' },
    rate: { type: 'string', default: '20' },
    after: { type: 'string', default: '60' },
    days: { type: 'string', default: '1' },
    floor: { type: 'string', default: '3' },
    json: { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
  },
});
const ROWS = Number(args.rows);
const ROUNDS = Number(args.rounds);
const RATE = Number(args.rate);
const AFTER = Number(args.after);
const DAYS = Number(args.days);
const FLOOR = Number(args.floor);
for (const [name, v] of Object.entries({ rows: ROWS, rounds: ROUNDS, rate: RATE, days: DAYS, floor: FLOOR })) {
  if (!Number.isInteger(v) || v < 1) throw new RangeError(`--${name} must be a positive whole number, not ${String(args[name as keyof typeof args])}`);
}
if (!Number.isFinite(AFTER) || AFTER < 0) throw new RangeError(`--after must be a number of seconds (0 or more), not ${args.after}`);
if (DAYS > 90) throw new RangeError(`--days must leave room for different ranges inside the demo's year: at most 90, not ${DAYS}`);

const DS = 'orders_enriched';
const COLS = ['order_id', 'created_at', 'region', 'amount_cents', 'tax_cents'];
const APPROVER = 'genfill_bench_approver';
const TARGETS = { totalMs: 10_000, rtoMs: 15 * 60_000, freezeMs: 2000, freezeGoalMs: 500 };
const started = performance.now();
const owned = !process.env.DATABASE_URL;
const url = await benchDatabase('genfill_bench_rollback', { fresh: true });
const env = benchEnv(url, '{genfill-bench-rollback}');
const cli = cliRunner(env);
const log = (line: string) => (args.json ? process.stderr : process.stdout).write(`${line}\n`);
const n = (v: number) => Math.round(v).toLocaleString('en-US');
const ms = (v: number) => `${v.toFixed(1)} ms`;
const r1 = (v: number) => Math.round(v * 10) / 10;
const lap = (t: number) => Math.round(performance.now() - t);

const dir = mkdtempSync(join(tmpdir(), 'genfill-bench-rollback-'));
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
const releases = demoReleases({ db, approver, dir });
const FLOOR_TABLE = 'genfill_bench.floor';

/** Change-log rows of the source in (from, to], and their distinct keys. */
async function logBetween(source: string, from: string, to: string): Promise<{ events: number; keys: number }> {
  const { rows } = await db.query<{ events: number; keys: number }>(
    `SELECT count(*)::int AS events, count(DISTINCT l.key)::int AS keys FROM genfill.change_log l
      WHERE l.source_table = $1 AND l.txid >= pg_snapshot_xmin($2::pg_snapshot)
        AND NOT pg_visible_in_snapshot(l.txid, $2::pg_snapshot) AND pg_visible_in_snapshot(l.txid, $3::pg_snapshot)`,
    [source, from, to],
  );
  return rows[0]!;
}

/** The keys of `want` rows of `generation` for the floor: those of the events in (from, to] first, then others. */
async function floorKeys(source: string, generation: string, from: string, to: string, want: number): Promise<string[]> {
  const gen = qualifiedGenerationTable(DS, generation);
  const { rows } = await db.query<{ k: string }>(
    `SELECT g.order_id::text AS k FROM ${gen} g WHERE g.generation = $5 AND g.order_id IN (
       SELECT (l.key->>'order_id')::bigint FROM genfill.change_log l
        WHERE l.source_table = $1 AND l.txid >= pg_snapshot_xmin($2::pg_snapshot)
          AND NOT pg_visible_in_snapshot(l.txid, $2::pg_snapshot) AND pg_visible_in_snapshot(l.txid, $3::pg_snapshot))
      ORDER BY random() LIMIT $4`,
    [source, from, to, want, generation],
  );
  const keys = rows.map((r) => r.k);
  if (keys.length < want) {
    const { rows: more } = await db.query<{ k: string }>(`SELECT order_id::text AS k FROM ${gen} WHERE NOT (order_id = ANY($1::bigint[])) ORDER BY random() LIMIT $2`, [keys, want - keys.length]);
    keys.push(...more.map((r) => r.k));
  }
  return keys;
}

/** One INSERT … ON CONFLICT DO UPDATE of `keys`' rows of `generation` into the floor table, checkout to COMMIT. */
async function floorUpsert(generation: string, keys: string[]): Promise<{ ms: number; rows: number }> {
  const t = performance.now();
  const rows = await withTransaction(
    db,
    async (conn) => {
      const r = await conn.query(
        `INSERT INTO ${FLOOR_TABLE} AS f SELECT g.* FROM ${qualifiedGenerationTable(DS, generation)} g WHERE g.generation = $2 AND g.order_id = ANY($1::bigint[])
         ON CONFLICT (generation, order_id) DO UPDATE SET created_at = EXCLUDED.created_at, region = EXCLUDED.region, amount_cents = EXCLUDED.amount_cents,
           tax_cents = EXCLUDED.tax_cents, _gf_rev = EXCLUDED._gf_rev, _gf_deleted = EXCLUDED._gf_deleted`,
        [keys, generation],
      );
      return r.rowCount ?? 0;
    },
    'REPEATABLE READ',
  );
  return { ms: performance.now() - t, rows };
}

/** The view against the active generation's live rows, both ways: the number of rows that differ. */
async function viewAgainstGeneration(generation: string): Promise<number> {
  const c = COLS.join(', ');
  const view = `SELECT ${c} FROM public.orders_enriched`;
  const gen = `SELECT ${c} FROM ${qualifiedGenerationTable(DS, generation)} WHERE NOT _gf_deleted`;
  const { rows } = await withTransaction(
    db,
    (conn) => conn.query<{ n: number }>(`SELECT (SELECT count(*) FROM (${view} EXCEPT ALL ${gen}) a)::int + (SELECT count(*) FROM (${gen} EXCEPT ALL ${view}) b)::int AS n`),
    'REPEATABLE READ',
  );
  return rows[0]!.n;
}

interface Round {
  release: string;
  range: { from: string; to: string };
  /** The generation cut over to and rolled back from, and the one readers went back to. */
  from: string;
  to: string;
  cutover: { freezeMs: number; casMs: number };
  /** Seconds from the cutover's return to the rollback's call (the writer writing into the new generation). */
  afterSeconds: number;
  totalMs: number;
  freezeMs: number;
  casMs: number;
  replay: RollbackResult['replay'] & { eventsPerSecond: number };
  appliedAtSwitch: number;
  steps: Record<string, number>;
  /** Change-log rows the old generation absorbed (B, S_rb], and those since the cutover's switch (S_cut, S_rb]. */
  log: { sinceB: { events: number; keys: number }; sinceCutover: { events: number; keys: number } };
  floor: { rows: number; ms: number[]; rowsPerSecond: number; ratio: number };
  check: { drift: Pick<DriftResult, 'missing' | 'extra' | 'pending' | 'verified'>; viewDifferences: number; pausedMs: number };
  prepareMs: Record<string, number>;
}

const controller = new AbortController();
let projectorError: unknown = null;
let projector: Promise<unknown> = Promise.resolve();
let setupMs = 0;
let writer: OrderWriter | null = null;
const writerTotals: WriterStats = { transactions: 0, inserts: 0, updates: 0, moves: 0, deletes: 0, errors: 0 };
const addStats = (w: WriterStats) => {
  for (const k of Object.keys(writerTotals) as (keyof WriterStats)[]) writerTotals[k] += w[k];
};
const rounds: Round[] = [];
const failures: string[] = [];
let failure: unknown = null;
try {
  const t0 = performance.now();
  log(`setup: genfill demo --until adopt --rows ${n(ROWS)} (seed, adopt with capture) into ${url.pathname.slice(1)}`);
  await cli('demo', '--until', 'adopt', '--rows', String(ROWS), '--no-throttle', '--dir', join(dir, 'demo'));
  await db.query(`DO $$ BEGIN CREATE ROLE ${APPROVER} LOGIN IN ROLE genfill_approver; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
  const adopted = await activeGeneration(db, DS);
  const { rows: src } = await db.query<{ log: string }>(
    'SELECT c.source_table AS log FROM genfill.datasets d JOIN genfill.captures c ON c.relid = to_regclass(d.source_table) WHERE d.name = $1',
    [DS],
  );
  const source = src[0]!.log;
  // The floor's table: the adopted generation's columns, indexes and key, and its rows.
  await db.query(`CREATE SCHEMA genfill_bench`);
  await db.query(`CREATE TABLE ${FLOOR_TABLE} (LIKE ${qualifiedGenerationTable(DS, adopted)} INCLUDING ALL)`);
  const { rows: pk } = await db.query<{ def: string }>(`SELECT pg_get_constraintdef(oid) AS def FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'`, [FLOOR_TABLE]);
  if (pk[0]?.def !== 'PRIMARY KEY (generation, order_id)') throw new Error(`the generation's key is ${pk[0]?.def ?? 'missing'}, not (generation, order_id): the floor's upsert needs another conflict target`);
  await db.query(`INSERT INTO ${FLOOR_TABLE} SELECT * FROM ${qualifiedGenerationTable(DS, adopted)}`);
  await db.query(`ANALYZE ${FLOOR_TABLE}`);
  setupMs = lap(t0);

  projector = projectDataset(DS, { db, log: quiet, id: 'bench-rollback', pollMs: 50, signal: controller.signal }).catch((err: unknown) => {
    projectorError = err;
  });
  const seededOrders = demoCounts(ROWS).total;
  writer = await startOrderWriter(db, { ratePerSecond: RATE, inRange: true, seededOrders });
  log(
    `rounds: ${ROUNDS} × (cut over a ${DAYS}-day release, ${AFTER} s of writes, roll back to ${adopted}) under the demo's writer at ${RATE} transactions/s and the projector (poll 50 ms)`,
  );
  for (let i = 1; i <= ROUNDS; i++) {
    const id = `bench-rb-${i}@1`;
    const expected = await activeGeneration(db, DS);
    const generation = `tax-fix-g${i + 2}`;
    const range = demoRangeOf(i - 1, DAYS);
    const prepareMs = await releases.approved(id, generation, expected, range);
    const cut = await cutoverRelease(db, id);
    const cutAt = performance.now();
    if (!cut.ok || (await activeGeneration(db, DS)) !== generation) throw new Error(`round ${i}: the cutover of ${id} did not leave ${generation} active: ${JSON.stringify(cut)}`);
    const { rows: fr } = await db.query<{ b: string; s_cut: string }>(
      `SELECT (SELECT snapshot::text FROM genfill.frontiers WHERE dataset = $1 AND generation = $2) AS b,
              (SELECT s_cut::text FROM genfill.cutovers WHERE release = $3 AND kind = 'cutover' AND state = 'DONE' ORDER BY id DESC LIMIT 1) AS s_cut`,
      [DS, expected, id],
    );
    const { b, s_cut: sCut } = fr[0]!;
    log(`  ${i}: ${expected} → ${generation} [${range.from.slice(0, 10)}, +${DAYS}d) cut over (freeze ${ms(cut.freezeMs ?? NaN)}); writing for ${AFTER} s`);
    await sleep(Math.max(0, AFTER * 1000 - (performance.now() - cutAt)));
    const afterSeconds = r1((performance.now() - cutAt) / 1000);

    let res: RollbackResult;
    try {
      res = await rollbackRelease(db, id);
    } catch (err) {
      throw new Error(`round ${i}: the rollback of ${id} (${generation} → ${expected}) failed: ${(err as Error).message}`, { cause: err });
    }
    if (!res.ok || res.totalMs === undefined || res.freezeMs === undefined || res.casMs === undefined || !res.sRollback) {
      throw new Error(`round ${i}: the rollback of ${id} returned without a switch: ${JSON.stringify(res)}`);
    }
    const now = await activeGeneration(db, DS);
    const { rows: st } = await db.query<{ state: string }>('SELECT state FROM genfill.releases WHERE id = $1', [id]);
    if (now !== expected || st[0]?.state !== 'ROLLED_BACK') failures.push(`round ${i}: after the rollback ${now} is active (not ${expected}) and ${id} is ${st[0]?.state}`);

    const sinceB = await logBetween(source, b, res.sRollback);
    const sinceCutover = await logBetween(source, sCut, res.sRollback);
    // The floor: as many rows as the replay applied, in one statement.
    const keys = await floorKeys(source, expected, b, res.sRollback, Math.max(1, res.replay.events));
    const floorMs: number[] = [];
    let floorRows = 0;
    for (let k = 0; k < FLOOR; k++) {
      const f = await floorUpsert(expected, keys);
      floorMs.push(r1(f.ms));
      floorRows = f.rows;
    }
    const eventsPerSecond = res.replay.ms > 0 ? res.replay.events / (res.replay.ms / 1000) : NaN;
    const floorRate = floorRows / (quantile(floorMs, 0.5) / 1000);

    // The check: the writer pauses, the projector drains, the old generation against its map.
    const p = performance.now();
    const w = writer;
    writer = null;
    if (w) addStats(await w.stop());
    await projectorPassedNow(db, DS);
    const drift = await driftCheck(db, DS);
    const viewDifferences = await viewAgainstGeneration(now);
    if (drift.generation !== expected || !drift.verified || drift.pending !== 0 || viewDifferences !== 0) {
      failures.push(
        `round ${i}: ${drift.generation} against its transform map: ${drift.missing} missing, ${drift.extra} extra, ${drift.pending} pending (sample ${JSON.stringify(drift.sample.slice(0, 5))}); view differs in ${viewDifferences} rows`,
      );
    }
    if (i < ROUNDS) writer = await startOrderWriter(db, { ratePerSecond: RATE, inRange: true, seededOrders, seed: 42 + i });
    const pausedMs = lap(p);

    const round: Round = {
      release: id,
      range,
      from: generation,
      to: expected,
      cutover: { freezeMs: cut.freezeMs ?? NaN, casMs: cut.casMs ?? NaN },
      afterSeconds,
      totalMs: res.totalMs,
      freezeMs: res.freezeMs,
      casMs: res.casMs,
      replay: { ...res.replay, eventsPerSecond: Math.round(eventsPerSecond) },
      appliedAtSwitch: res.appliedAtSwitch?.events ?? 0,
      steps: Object.fromEntries(res.steps.map((s) => [s.step, s.ms])),
      log: { sinceB, sinceCutover },
      floor: { rows: floorRows, ms: floorMs, rowsPerSecond: Math.round(floorRate), ratio: r1(floorRate / eventsPerSecond) },
      check: { drift: { missing: drift.missing, extra: drift.extra, pending: drift.pending, verified: drift.verified }, viewDifferences, pausedMs },
      prepareMs,
    };
    rounds.push(round);
    log(
      `     rolled back in ${ms(round.totalMs)}: freeze ${ms(round.freezeMs)}, cas ${ms(round.casMs)}; replay ${round.replay.rounds} round(s), ${n(round.replay.events)} events (latest per key) in ${ms(round.replay.ms)} = ${n(eventsPerSecond)}/s; ` +
        `${round.appliedAtSwitch} at the switch; log since B ${n(sinceB.events)} rows (${n(sinceB.keys)} keys), since the cutover ${n(sinceCutover.events)} rows in ${afterSeconds} s; ` +
        `steps ${res.steps.map((s) => `${s.step} ${s.ms}`).join(', ')}; floor ${n(floorRows)} rows in ${ms(quantile(floorMs, 0.5))} (${floorMs.join(', ')}) = ${n(floorRate)}/s, ×${round.floor.ratio} the replay; ` +
        `check: ${drift.missing}/${drift.extra}/${drift.pending} missing/extra/pending, view ${viewDifferences} (writer paused ${(pausedMs / 1000).toFixed(1)} s)`,
    );
  }
} catch (err) {
  failure = err;
} finally {
  if (writer) addStats(await writer.stop());
  controller.abort();
  await projector;
  await approver.end();
  await db.end();
  log(`writer: ${n(writerTotals.transactions)} transactions (${writerTotals.inserts} inserts, ${writerTotals.updates} updates, ${writerTotals.moves} moved, ${writerTotals.deletes} deleted, ${writerTotals.errors} errors)`);
  rmSync(dir, { recursive: true, force: true });
  if (owned && !args.keep) await dropBenchDatabase(url);
  else if (owned) log(`kept database ${url.pathname.slice(1)} (--keep)`);
}
if (failure) throw failure;
if (projectorError) throw new Error(`the projector failed during the run: ${(projectorError as Error).message}`, { cause: projectorError });

const total = dist(rounds.map((r) => r.totalMs));
const freeze = dist(rounds.map((r) => r.freezeMs));
const cas = dist(rounds.map((r) => r.casMs));
const replayMs = dist(rounds.map((r) => r.replay.ms));
const replayEvents = dist(rounds.map((r) => r.replay.events));
const replayRate = dist(rounds.map((r) => r.replay.eventsPerSecond));
const applied = dist(rounds.map((r) => r.appliedAtSwitch));
const sinceB = dist(rounds.map((r) => r.log.sinceB.events));
const sinceCutover = dist(rounds.map((r) => r.log.sinceCutover.events));
const floorMs = dist(rounds.map((r) => quantile(r.floor.ms, 0.5)));
const floorRate = dist(rounds.map((r) => r.floor.rowsPerSecond));
const ratio = dist(rounds.map((r) => r.floor.ratio));
// What the rest of the total is: the lease, the refusal check, the seal and the step records.
const other = dist(rounds.map((r) => r.totalMs - r.replay.ms - r.freezeMs));
const stepNames = [...new Set(rounds.flatMap((r) => Object.keys(r.steps)))];
const stepMedians = Object.fromEntries(stepNames.map((s) => [s, quantile(rounds.map((r) => r.steps[s] ?? 0), 0.5)]));
const prepare = Object.fromEntries(['plan', 'build', 'catchup', 'reconcile', 'approve'].map((k) => [k, quantile(rounds.map((r) => r.prepareMs[k] ?? 0), 0.5)]));
const totalSeconds = Math.round((performance.now() - started) / 100) / 10;
const verdict = (d: { p50: number; max: number }, target: number) => `p50 ${d.p50 < target ? 'met' : 'MISSED'}, max ${d.max < target ? 'met' : 'MISSED'}`;

log(`total:  p50 ${ms(total.p50)}, max ${ms(total.max)} (min ${ms(total.min)}) over ${total.n} rollbacks after ${AFTER} s of writes each (target < 10,000 ms: ${verdict(total, TARGETS.totalMs)}; seed RTO 15 min)`);
log(`freeze: p50 ${ms(freeze.p50)}, max ${ms(freeze.max)} (min ${ms(freeze.min)}) (target < 2,000 ms: ${verdict(freeze, TARGETS.freezeMs)}; goal < 500 ms: ${verdict(freeze, TARGETS.freezeGoalMs)})`);
log(`cas:    p50 ${ms(cas.p50)}, max ${ms(cas.max)} (min ${ms(cas.min)}); events applied in it p50 ${applied.p50}, max ${applied.max}`);
log(
  `replay: p50 ${ms(replayMs.p50)}, max ${ms(replayMs.max)}; ${n(replayEvents.p50)} events p50 (${n(replayEvents.min)}–${n(replayEvents.max)}) in ${quantile(rounds.map((r) => r.replay.rounds), 0.5)} round(s); ` +
    `${n(replayRate.p50)} events/s p50 (${n(replayRate.min)}–${n(replayRate.max)}); rest of the total (lease, seal, records) p50 ${ms(other.p50)}, max ${ms(other.max)}`,
);
log(`log:    ${n(sinceB.p50)} rows p50 (${n(sinceB.min)}–${n(sinceB.max)}) for the old generation to absorb since B, ${n(sinceCutover.p50)} (${n(sinceCutover.min)}–${n(sinceCutover.max)}) since the cutover's switch`);
log(`floor:  one INSERT … ON CONFLICT of the replay's row count p50 ${ms(floorMs.p50)} (${ms(floorMs.min)}–${ms(floorMs.max)}) = ${n(floorRate.p50)} rows/s; floor/replay rate p50 ×${ratio.p50} (×${ratio.min}–×${ratio.max})`);
log(`steps (median ms): ${stepNames.map((s) => `${s} ${stepMedians[s]}`).join(', ')}`);
log(`check:  ${failures.length === 0 ? `after every rollback the old generation equals its transform map of the source (driftCheck) and the view equals it` : `FAILED:\n  ${failures.join('\n  ')}`}`);
log(`prepare (median ms per release): ${Object.entries(prepare).map(([k, v]) => `${k} ${n(v)}`).join(', ')}; total ${totalSeconds} s (setup ${(setupMs / 1000).toFixed(1)} s)`);

if (args.json) {
  process.stdout.write(
    `${JSON.stringify({
      rows: ROWS,
      rounds: ROUNDS,
      ratePerSecond: RATE,
      afterSeconds: AFTER,
      days: DAYS,
      targets: TARGETS,
      totalMs: total,
      freezeMs: freeze,
      casMs: cas,
      replayMs,
      replayEvents,
      replayEventsPerSecond: replayRate,
      appliedAtSwitch: applied,
      logSinceB: sinceB,
      logSinceCutover: sinceCutover,
      floorMs,
      floorRowsPerSecond: floorRate,
      floorOverReplay: ratio,
      otherMs: other,
      stepMedianMs: stepMedians,
      failures,
      writer: writerTotals,
      prepareMedianMs: prepare,
      setupSeconds: setupMs / 1000,
      totalSeconds,
      runs: rounds,
      // The headline comparison: the replay's time over the bare write of its rows (median).
      ratio: ratio.p50,
    })}\n`,
  );
}
if (failures.length > 0) process.exitCode = 1;
