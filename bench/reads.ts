// Pinned reads and diff on a million rows (issue 17), each measured side by side with the
// cheapest read of the same rows in one run: `genfill diff` against one sequential scan of
// both generations, and paging the whole generation with readPage against one SELECT of it.
//
//   npx tsx bench/reads.ts [--rows 1000000] [--page 10000] [--runs 3] [--json]
//
// With --json the progress goes to stderr and one JSON document to stdout: the figures, and
// last `ratio`, the diff's time over one scan of both generations (paging's is paging.ratio).
// Without DATABASE_URL it uses a database genfill_bench_reads, dropped and made again: a
// dataset `big` built by hand (key id), generation g1 active and g2 a candidate in which a
// third of the rows have another tax, a few keys only in g1 and a few only in g2, and a
// release big@1 from g1 to g2.
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { diffRelease, readPage } from '@genfill/reads';
import { createPool, migrate } from '@genfill/registry';
import { benchDatabase } from './support.ts';

const { values: args } = parseArgs({
  options: {
    rows: { type: 'string', default: '1000000' },
    page: { type: 'string', default: '10000' },
    runs: { type: 'string', default: '3' },
    json: { type: 'boolean', default: false },
  },
});
const ROWS = Number(args.rows);
const PAGE = Number(args.page);
const RUNS = Math.max(1, Number(args.runs));
const url = await benchDatabase('genfill_bench_reads', { fresh: !process.env.DATABASE_URL });
const db = createPool({ DATABASE_URL: url.toString() } as never, 'bench-reads', 4);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const secs = (ms: number) => `${(ms / 1000).toFixed(2)}s`;
const log = (line: string) => (args.json ? process.stderr : process.stdout).write(`${line}\n`);
const r1 = (ms: number) => Math.round(ms * 10) / 10;
const r3 = (v: number) => Math.round(v * 1000) / 1000;

async function time(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

await migrate(db);
const exists = (await db.query(`SELECT 1 FROM genfill.releases WHERE id = 'big@1'`)).rowCount === 1;
if (!exists) {
  log(`preparing: ${ROWS.toLocaleString('en-US')} rows in each of g1 and g2`);
  const sha = `'sha256:' || encode(sha256(convert_to('SELECT 1', 'UTF8')), 'hex')`;
  await db.query(`
    CREATE TABLE public.big_shape (id bigint NOT NULL, created_at timestamptz NOT NULL, region text NOT NULL, amount bigint NOT NULL, tax bigint NOT NULL);
    INSERT INTO genfill.datasets (name, target_table, source_table, key_columns, time_column) VALUES ('big', 'public.big', 'public.big_src', '{id}', 'created_at');
    INSERT INTO genfill.generations (dataset, generation, state) VALUES ('big', 'g1', 'ACTIVE'), ('big', 'g2', 'CANDIDATE');
    UPDATE genfill.datasets SET active_generation = 'g1' WHERE name = 'big';
    SELECT genfill.create_parent('big', 'public.big_shape'::regclass, '{id}');
    SELECT genfill.add_generation('big', 'g1');
    SELECT genfill.add_generation('big', 'g2');
    INSERT INTO genfill.transforms (digest, sql) VALUES (${sha}, 'SELECT 1');
    INSERT INTO genfill.releases (id, dataset, generation, expected_active, digest, spec, transform_digest, range, timezone, every, approvals_required, owner, deadline)
    VALUES ('big@1', 'big', 'g2', 'g1', 'sha256:' || repeat('0', 64), '{}', ${sha}, tstzrange('2025-01-01', '2027-01-01'), 'UTC', 'P1D', 1, 'bench', '2027-01-01')`);
  await db.query(
    `INSERT INTO genfill_data.big (generation, id, created_at, region, amount, tax)
     SELECT 'g1', i, timestamptz '2025-01-01' + i * interval '1 minute', (ARRAY['n', 's', 'e'])[1 + i % 3], i % 10000, (i % 10000) / 10
       FROM generate_series(1, $1::bigint) AS i`,
    [ROWS],
  );
  await db.query(
    `INSERT INTO genfill_data.big (generation, id, created_at, region, amount, tax)
     SELECT 'g2', i, timestamptz '2025-01-01' + i * interval '1 minute', (ARRAY['n', 's', 'e'])[1 + i % 3], i % 10000,
            (i % 10000) / 10 + CASE WHEN i % 3 = 0 THEN 1 ELSE 0 END
       FROM generate_series(5, $1::bigint + 10) AS i`,
    [ROWS],
  );
  await db.query('ANALYZE genfill_data.big');
}

const scan = () =>
  db.query(`SELECT (SELECT count(*) FROM genfill_data.big WHERE generation = 'g1' AND NOT _gf_deleted), (SELECT count(*) FROM genfill_data.big WHERE generation = 'g2' AND NOT _gf_deleted)`);
const diffs: number[] = [];
const scans: number[] = [];
let counts: Record<string, number> = {};
for (let i = 0; i < RUNS; i++) {
  scans.push(await time(scan));
  diffs.push(await time(async () => (counts = (await diffRelease(db, 'big@1', { sample: 20 })).counts)));
}
const diffRatio = median(diffs) / median(scans);
log(`diff ${secs(median(diffs))} vs one scan of both generations ${secs(median(scans))}: ${diffRatio.toFixed(2)}× (${JSON.stringify(counts)})`);

const whole = () => db.query(`SELECT id, created_at, region, amount, tax FROM genfill_data.big WHERE generation = 'g1' AND NOT _gf_deleted ORDER BY id`);
const paged = async () => {
  let cursor: string | null = null;
  let n = 0;
  do {
    const p: Awaited<ReturnType<typeof readPage>> = await readPage(db, { dataset: 'big', cursor, limit: PAGE, holder: 'bench-reads' });
    n += p.rows.length;
    cursor = p.nextCursor;
  } while (cursor);
  if (n !== ROWS) throw new Error(`paged ${n} rows, expected ${ROWS}`);
};
const pages: number[] = [];
const selects: number[] = [];
for (let i = 0; i < RUNS; i++) {
  selects.push(await time(whole));
  pages.push(await time(paged));
}
const pagingRatio = median(pages) / median(selects);
log(`paging g1 by ${PAGE.toLocaleString('en-US')} ${secs(median(pages))} vs one SELECT of it ${secs(median(selects))}: ${pagingRatio.toFixed(2)}×`);
await db.end();
if (args.json) {
  process.stdout.write(
    `${JSON.stringify({
      rows: ROWS,
      page: PAGE,
      runs: RUNS,
      // Medians of RUNS, ms; the per-run times beside them.
      diff: { ms: r1(median(diffs)), scanMs: r1(median(scans)), ratio: r3(diffRatio), counts, runsMs: diffs.map(r1), scanRunsMs: scans.map(r1) },
      paging: { ms: r1(median(pages)), selectMs: r1(median(selects)), ratio: r3(pagingRatio), runsMs: pages.map(r1), selectRunsMs: selects.map(r1) },
      ratio: r3(diffRatio),
    })}\n`,
  );
}
