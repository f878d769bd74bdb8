// bench/build: the tax-fix build of the demo dataset done by (a) genfill with two worker
// processes and (b) one INSERT … SELECT of the same transform into another generation,
// alternating in one run. Prints rows/s of each, the median ratio a/b, and where genfill's
// worker time goes (from the receipts' timings).
//
//   npx tsx bench/build.ts [--rows 2000000] [--rounds 3] [--workers 2] [--json]
//
// With --json the progress goes to stderr and one JSON object to stdout, its ratio last.
// Uses DATABASE_URL (default: a database genfill_bench, created and seeded on first use) and
// REDIS_URL; queue prefix {genfill-bench}. Not part of npm test.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parse, stringify } from 'yaml';
import { benchDatabase, benchEnv, cliRunner, exited } from './support.ts';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string', default: '2000000' },
    rounds: { type: 'string', default: '3' },
    workers: { type: 'string', default: '2' },
    concurrency: { type: 'string', default: '1' },
    json: { type: 'boolean', default: false },
  },
});
/** The story: stdout, or stderr when stdout carries the JSON. */
const say = (text: string) => (args.json ? process.stderr : process.stdout).write(text);
const ROWS = Number(args.rows);
const ROUNDS = Number(args.rounds);
const WORKERS = Number(args.workers);
const CONCURRENCY = Number(args.concurrency);
const env = benchEnv(await benchDatabase('genfill_bench'), '{genfill-bench}');
const cli = cliRunner(env);
const BIN = fileURLToPath(new URL('../apps/cli/bin/genfill.js', import.meta.url));
const EXAMPLES = fileURLToPath(new URL('../examples/', import.meta.url));

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

async function main_(): Promise<void> {
  say(`preparing: demo dataset with ${ROWS.toLocaleString('en-US')} orders in range (seeded once)\n`);
  // The demo seeds, adopts tax-fix-g2 and builds tax-fix-g3 once; the rounds below build fresh generations.
  // Up to the approval: the bench's releases expect the adopted generation to be the active one.
  await cli('demo', '--rows', String(ROWS), '--until', 'approve', '--dir', mkdtempSync(join(tmpdir(), 'genfill-bench-')), '--json');
  const db = new pg.Pool({ connectionString: env.DATABASE_URL, max: 2 });
  const transform = readFileSync(join(EXAMPLES, 'transforms/order-tax-fix.sql'), 'utf8');
  const base = parse(readFileSync(join(EXAMPLES, 'order-tax-fix.yaml'), 'utf8'));
  const results: { a: number; b: number; aRows: number; bRows: number; timings: Record<string, number>; wallA: number }[] = [];

  for (let round = 1; round <= ROUNDS; round++) {
    const tag = `${Date.now().toString(36)}`;
    // (a) genfill: a release building generation bench-a<tag> with WORKERS worker processes.
    const dir = mkdtempSync(join(tmpdir(), 'genfill-bench-'));
    writeFileSync(join(dir, 'order-tax-fix.sql'), transform);
    // Against whatever generation is active (a database a full demo ran on has tax-fix-g3).
    const active = (await db.query(`SELECT active_generation AS g FROM genfill.datasets WHERE name = 'orders_enriched'`)).rows[0].g as string;
    const rel = { ...base, release: `bench-${tag}`, transform: { sql: 'order-tax-fix.sql' }, target: { ...base.target, generation: `bench-a${tag}`, expectedActive: active } };
    writeFileSync(join(dir, 'release.yaml'), stringify(rel));
    await cli('release', 'submit', join(dir, 'release.yaml'));
    const workers = Array.from({ length: WORKERS }, () => spawn(process.execPath, [BIN, 'worker', '--no-throttle', '--release', rel.release, '--concurrency', String(CONCURRENCY)], { env, stdio: 'ignore' }));
    await new Promise((r) => setTimeout(r, 1500)); // let the services start: they are long-running in production
    // Planning (manifest, estimates, enqueue) is its own step; the build is timed from there.
    const tp = performance.now();
    await cli('plan', rel.release);
    const planS = (performance.now() - tp) / 1000;
    const t0 = performance.now();
    for (;;) {
      const { rows } = await db.query(`SELECT state FROM genfill.releases WHERE id = $1`, [rel.release]);
      if (rows[0].state === 'BUILT') break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const wallA = (performance.now() - t0) / 1000;
    for (const w of workers) w.kill('SIGTERM');
    await Promise.all(workers.map(exited));
    const rec = (await db.query(
      `SELECT sum(rows_out)::bigint AS rows, jsonb_object_agg(k, s) AS timings FROM (
         SELECT k, sum(v::numeric) AS s FROM genfill.receipts, jsonb_each_text(timings) t(k, v) WHERE release = $1 GROUP BY k) x,
       (SELECT sum(rows_out) AS rows_out FROM genfill.receipts WHERE release = $1) y GROUP BY y.rows_out`,
      [rel.release],
    )).rows[0];
    const aRows = Number((await db.query(`SELECT sum(rows_out)::bigint AS n FROM genfill.receipts WHERE release = $1`, [rel.release])).rows[0].n);

    // (b) one INSERT … SELECT of the same transform into generation bench-b<tag>.
    const gen = `bench-b${tag}`;
    await db.query(`SELECT genfill.add_generation('orders_enriched', $1)`, [gen]);
    const t1 = performance.now();
    const ins = await db.query(
      `INSERT INTO genfill_data."orders_enriched__${gen}" (generation, order_id, created_at, region, amount_cents, tax_cents)
       SELECT $1, t.* FROM (WITH source AS (SELECT * FROM public.orders WHERE created_at >= $2 AND created_at < $3)
                            SELECT * FROM (${transform}) q) t`,
      [gen, base.range.from, base.range.to],
    );
    const wallB = (performance.now() - t1) / 1000;

    results.push({ a: aRows / wallA, b: (ins.rowCount ?? 0) / wallB, aRows, bRows: ins.rowCount ?? 0, timings: rec.timings, wallA });
    say(
      `round ${round}: genfill ${aRows.toLocaleString('en-US')} rows in ${wallA.toFixed(2)}s = ${Math.round(aRows / wallA).toLocaleString('en-US')} rows/s; ` +
        `INSERT … SELECT ${(ins.rowCount ?? 0).toLocaleString('en-US')} rows in ${wallB.toFixed(2)}s = ${Math.round((ins.rowCount ?? 0) / wallB).toLocaleString('en-US')} rows/s; ` +
        `ratio ${(aRows / wallA / ((ins.rowCount ?? 1) / wallB)).toFixed(3)} (plan took ${planS.toFixed(2)}s before the build)\n`,
    );
    // Keep the table the same size from round to round.
    for (const g of [rel.target.generation, gen]) {
      await db.query(`ALTER TABLE genfill_data.orders_enriched DETACH PARTITION genfill_data."orders_enriched__${g}"`);
      await db.query(`DROP TABLE genfill_data."orders_enriched__${g}"`);
    }
    await db.query(`UPDATE genfill.releases SET state = 'CANCELLED' WHERE id = $1`, [rel.release]);
  }

  const ratio = median(results.map((r) => r.a / r.b));
  const t = results.at(-1)!.timings;
  const workerMs = results.at(-1)!.wallA * 1000 * WORKERS;
  const pct = (ms: number | undefined) => `${((100 * (ms ?? 0)) / workerMs).toFixed(1)}%`;
  say(
    [
      '',
      `median genfill/INSERT…SELECT ratio over ${ROUNDS} rounds: ${ratio.toFixed(3)} (target ≥ 0.85, goal 0.95)`,
      `median rows/s: genfill ${Math.round(median(results.map((r) => r.a))).toLocaleString('en-US')}, INSERT … SELECT ${Math.round(median(results.map((r) => r.b))).toLocaleString('en-US')}`,
      `workers ${WORKERS} × concurrency ${CONCURRENCY}; where genfill's workers spent the last round (${(workerMs / 1000).toFixed(1)} worker-seconds):`,
      `  claim ${pct(t.claim)}, prepare ${pct(t.prepare)}, statement (read, transform, insert, roots) ${pct(t.statement)}, fence+receipt ${pct(t.fence)}, ` +
        `queue and idle ${pct(workerMs - (t.total ?? 0))}`,
      '',
    ].join('\n'),
  );
  if (args.json) {
    process.stdout.write(
      `${JSON.stringify({
        rows: ROWS,
        rounds: ROUNDS,
        workers: WORKERS,
        concurrency: CONCURRENCY,
        perRound: results.map((r) => ({ genfillRowsPerSecond: Math.round(r.a), insertSelectRowsPerSecond: Math.round(r.b), rows: r.aRows, ratio: Number((r.a / r.b).toFixed(3)) })),
        genfillRowsPerSecond: Math.round(median(results.map((r) => r.a))),
        insertSelectRowsPerSecond: Math.round(median(results.map((r) => r.b))),
        workerTimeShare: { claim: t.claim ?? 0, prepare: t.prepare ?? 0, statement: t.statement ?? 0, fence: t.fence ?? 0, total: t.total ?? 0, workerMs },
        ratio: Number(ratio.toFixed(3)),
      })}\n`,
    );
  }
  await db.end();
}

await main_();
