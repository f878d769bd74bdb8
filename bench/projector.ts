// bench/projector: how fast the projector applies the change log through the demo's tax
// transform, against the single statement's pace, and how far its frontier lags a live writer.
//
//   apply   --events updates of seeded orders (1,000 per transaction) wait in the log; then
//           (a) the projector drains them (projectDataset until idle, default batch cap) and
//           (b) the floor: ONE statement applies the same keys straight from the source —
//           INSERT … SELECT <adopt transform> … ON CONFLICT DO UPDATE into the generation,
//           no log, no version check. Interleaved a b | b a …, each round on fresh events.
//           Targets: (a) ≥ 20,000 events/s (goal 50,000); the ratio a/b shows what the log,
//           the latest-per-key and the tombstones cost over the bare write.
//   catchup the fresh candidate's first round, then per --catchup-sizes (default 50,000 and
//           200,000; 1,000,000 needs --rows 1000000) as many updates drained by the projector
//           (timed) and applied to the release's candidate by one catch-up round (catchupRound):
//           events/s (target ≥ 20,000/s) and the ratio to the projector's own apply of them.
//   lag     the demo's order writer at --rate transactions/s for --seconds while the projector
//           runs (poll 50 ms); the age of the oldest event not yet in the frontier sampled
//           every 50 ms. Target: p95 < 1 s.
//
//   npx tsx bench/projector.ts [--rows 200000] [--events 100000] [--rounds 3] [--rate 200] [--seconds 20] [--catchup-sizes 50000,200000] [--only apply,catchup,lag] [--json]
//
// Uses DATABASE_URL (default: a database genfill_bench_projector, dropped and created again
// every run). With --json the progress goes to stderr and one JSON document to stdout.
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { createLogger } from '@genfill/observability';
import { projectDataset, projectorStatus } from '@genfill/projector';
import { startOrderWriter } from '../apps/cli/src/demo/writer.ts';
import { DEMO_ADOPT_TRANSFORM } from '../apps/cli/src/demo/seed.ts';
import { benchDatabase, benchEnv, cliRunner } from './support.ts';
import { catchupRound } from '@genfill/switch';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string', default: '200000' },
    events: { type: 'string', default: '100000' },
    rounds: { type: 'string', default: '3' },
    rate: { type: 'string', default: '200' },
    seconds: { type: 'string', default: '20' },
    only: { type: 'string', default: 'apply,catchup,lag' },
    'catchup-sizes': { type: 'string', default: '50000,200000' },
    json: { type: 'boolean', default: false },
  },
});
const ROWS = Number(args.rows);
const EVENTS = Number(args.events);
const ROUNDS = Number(args.rounds);
const RATE = Number(args.rate);
const SECONDS = Number(args.seconds);
const ONLY = new Set(args.only!.split(','));
const SIZES = args['catchup-sizes']!.split(',').map(Number);

const url = await benchDatabase('genfill_bench_projector', { fresh: true });
const env = benchEnv(url, '{genfill-bench-projector}');
const cli = cliRunner(env);
const log = (line: string) => (args.json ? process.stderr : process.stdout).write(`${line}\n`);
const n = (v: number) => Math.round(v).toLocaleString('en-US');
const quantile = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.max(0, Math.ceil(q * xs.length) - 1))] ?? NaN;
function spread(xs: number[], digits = 0) {
  const m = quantile(xs, 0.5);
  return { median: m, min: Math.min(...xs), max: Math.max(...xs), text: `${m.toFixed(digits)} (${Math.min(...xs).toFixed(digits)}–${Math.max(...xs).toFixed(digits)})` };
}

// The catch-up arm needs the release built (its candidate and receipts); the others only adopt.
const UNTIL = ONLY.has('catchup') ? 'build' : 'adopt';
log(`setup: genfill demo --until ${UNTIL} --rows ${n(ROWS)} (seed, adopt with capture${UNTIL === 'build' ? ', plan, build' : ''}; the demo's live writer stopped with it)`);
await cli('demo', '--until', UNTIL, '--rows', String(ROWS), '--no-throttle', '--dir', `/tmp/genfill-bench-projector-${process.pid}`);
const db = new pg.Pool({ connectionString: url.toString(), max: 6 });
const quiet = createLogger('bench', 'silent');
const GEN = `genfill_data."orders_enriched__tax-fix-g2"`;
const report: Record<string, unknown> = { rows: ROWS, events: EVENTS, rounds: ROUNDS };
let offset = 0;

/** Fresh events: `count` seeded orders updated, 1,000 per transaction; returns their id range. */
async function makeEvents(count: number): Promise<[number, number]> {
  const first = 1 + (offset % Math.max(1, ROWS - count));
  offset += count;
  for (let i = 0; i < count; i += 1000) {
    await db.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id >= $1 AND order_id < $2`, [first + i, first + Math.min(count, i + 1000)]);
  }
  return [first, first + count];
}

async function projectorArm(): Promise<{ seconds: number; events: number }> {
  await makeEvents(EVENTS);
  const t0 = performance.now();
  const t = await projectDataset('orders_enriched', { db, log: quiet, untilIdle: true, id: 'bench' });
  return { seconds: (performance.now() - t0) / 1000, events: t.events };
}

async function floorArm(): Promise<{ seconds: number; events: number }> {
  // The same number of keys, applied from the source in one statement (the projector must not
  // see these: drain them afterwards outside the timing).
  const [a, b] = await makeEvents(EVENTS);
  const transform = DEMO_ADOPT_TRANSFORM.replace(/FROM source AS s/, 'FROM (SELECT * FROM public.orders WHERE order_id >= $1 AND order_id < $2) AS s');
  const t0 = performance.now();
  const r = await db.query(
    `INSERT INTO ${GEN} AS g (generation, order_id, created_at, region, amount_cents, tax_cents)
     SELECT 'tax-fix-g2', t.order_id, t.created_at, t.region, t.amount_cents, t.tax_cents FROM (${transform}) AS t
     ON CONFLICT (generation, order_id) DO UPDATE SET created_at = EXCLUDED.created_at, region = EXCLUDED.region,
        amount_cents = EXCLUDED.amount_cents, tax_cents = EXCLUDED.tax_cents`,
    [a, b],
  );
  const seconds = (performance.now() - t0) / 1000;
  await projectDataset('orders_enriched', { db, log: quiet, untilIdle: true, id: 'bench' });
  return { seconds, events: r.rowCount ?? 0 };
}

if (ONLY.has('apply')) {
  log(`apply: ${ROUNDS} rounds of (a) the projector draining ${n(EVENTS)} events and (b) one INSERT … ON CONFLICT of as many keys, interleaved`);
  await projectDataset('orders_enriched', { db, log: quiet, untilIdle: true, id: 'bench' });
  const a: { seconds: number; events: number }[] = [];
  const b: typeof a = [];
  for (let r = 1; r <= ROUNDS; r++) {
    const order = r % 2 === 1 ? ['a', 'b'] : ['b', 'a'];
    for (const arm of order) {
      const x = arm === 'a' ? await projectorArm() : await floorArm();
      (arm === 'a' ? a : b).push(x);
      log(`  round ${r} ${arm === 'a' ? 'projector' : 'floor    '}: ${n(x.events)} events in ${x.seconds.toFixed(2)} s = ${n(x.events / x.seconds)}/s`);
    }
  }
  const rateA = spread(a.map((x) => x.events / x.seconds));
  const rateB = spread(b.map((x) => x.events / x.seconds));
  const ratio = spread(a.map((x, i) => x.seconds / b[i]!.seconds), 2);
  log(`apply: projector ${rateA.text} events/s; floor ${rateB.text} rows/s; projector time / floor time ${ratio.text} (target ≥ 20,000 events/s)`);
  report.apply = { projectorEventsPerSecond: rateA, floorRowsPerSecond: rateB, ratio: ratio.median, ratioSpread: ratio };
}

if (ONLY.has('catchup')) {
  // The first round catches a freshly built candidate up from its build watermarks (what never
  // finished before issue 29's finding 8); then, per size, `size` updates of as many keys, drained
  // by the projector (timed: the ratio's denominator), then one catch-up round of them (timed).
  log(`catchup: ${ROUNDS} rounds at each of ${SIZES.map(n).join(', ')} events, drained by the projector, then one catch-up round of order-tax-fix@3`);
  await projectDataset('orders_enriched', { db, log: quiet, untilIdle: true, id: 'bench' });
  let t0 = performance.now();
  const first = await catchupRound(db, 'order-tax-fix@3');
  log(`  first round of the fresh candidate: ${n(first.events)} events in ${((performance.now() - t0) / 1000).toFixed(2)} s`);
  const bySize: Record<string, unknown> = {};
  for (const size of SIZES) {
    if (size > ROWS) {
      log(`  ${n(size)} events: skipped (--rows ${n(ROWS)} has fewer keys; run with --rows ${n(size)})`);
      continue;
    }
    const rates: number[] = [];
    const ratios: number[] = [];
    for (let r = 1; r <= ROUNDS; r++) {
      await makeEvents(size);
      t0 = performance.now();
      const p = await projectDataset('orders_enriched', { db, log: quiet, untilIdle: true, id: 'bench' });
      const projectorRate = p.events / ((performance.now() - t0) / 1000);
      t0 = performance.now();
      const round = await catchupRound(db, 'order-tax-fix@3');
      const seconds = (performance.now() - t0) / 1000;
      rates.push(round.events / seconds);
      ratios.push(round.events / seconds / projectorRate);
      log(
        `  ${n(size)} round ${r}: ${n(round.events)} events (${n(round.upserted)} written, ${n(round.noops)} no-ops) in ${seconds.toFixed(2)} s = ${n(round.events / seconds)}/s; ` +
          `the projector applied them at ${n(projectorRate)}/s (catch-up / projector ${(round.events / seconds / projectorRate).toFixed(2)})`,
      );
    }
    const c = spread(rates);
    const ratio = spread(ratios, 2);
    log(`catchup ${n(size)}: ${c.text} events/s (target ≥ 20,000); catch-up / projector ${ratio.text}`);
    bySize[String(size)] = { eventsPerSecond: c, ratioToProjector: ratio };
  }
  report.catchup = bySize;
}

if (ONLY.has('lag')) {
  log(`lag: the demo's writer at ${RATE} transactions/s for ${SECONDS} s, the projector polling every 50 ms`);
  const controller = new AbortController();
  const projector = projectDataset('orders_enriched', { db, log: quiet, id: 'bench', pollMs: 50, signal: controller.signal });
  const writer = await startOrderWriter(db, { ratePerSecond: RATE, inRange: true, seededOrders: ROWS });
  const lags: number[] = [];
  const end = performance.now() + SECONDS * 1000;
  while (performance.now() < end) {
    const s = await projectorStatus(db, 'orders_enriched');
    if (s) lags.push(s.lagSeconds * 1000);
    await sleep(50);
  }
  const w = await writer.stop();
  controller.abort();
  await projector;
  const lag = { p50: quantile(lags, 0.5), p95: quantile(lags, 0.95), max: Math.max(...lags), samples: lags.length };
  log(`lag: ${n(w.transactions)} writer transactions (${n(w.transactions / SECONDS)}/s); frontier lag p50 ${lag.p50.toFixed(0)} ms, p95 ${lag.p95.toFixed(0)} ms, max ${lag.max.toFixed(0)} ms (target p95 < 1,000 ms)`);
  report.lag = { writer: w, ratePerSecond: w.transactions / SECONDS, lagMs: lag };
}

await db.end();
const apply = report.apply as { ratio: number } | undefined;
report.ratio = apply?.ratio ?? null;
if (args.json) process.stdout.write(`${JSON.stringify(report)}\n`);
