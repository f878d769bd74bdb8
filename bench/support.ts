// What the benches share: a database of their own (created on first use), the CLI run in
// process against it, and waiting for a child process to exit; for the benches on the demo's
// dataset (rollback), small releases taken to APPROVED in process, the active generation,
// waiting for the projector, and quantiles.
import type { ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { parse, stringify } from 'yaml';
import { buildPartition, claimPartition } from '@genfill/builder';
import { main } from '@genfill/cli';
import { planRelease, startBuilding, submitRelease } from '@genfill/planner';
import { reconcile } from '@genfill/reconcile';
import { DEMO_RANGE } from '../apps/cli/src/demo/seed.ts';
import { catchupRound } from '@genfill/switch';

const LOCAL = 'postgres://postgres@127.0.0.1:5432/postgres';

/**
 * The bench's database: DATABASE_URL when it is set (the caller chose), otherwise `name` on
 * the local server, created when missing — or, with `fresh`, dropped and created again so no
 * earlier run's rows, bloat or triggers are left in it.
 */
export async function benchDatabase(name: string, opts: { fresh?: boolean } = {}): Promise<URL> {
  if (process.env.DATABASE_URL) return new URL(process.env.DATABASE_URL);
  const admin = new pg.Client({ connectionString: LOCAL });
  await admin.connect();
  try {
    const quoted = `"${name.replace(/"/g, '""')}"`;
    if (opts.fresh) await admin.query(`DROP DATABASE IF EXISTS ${quoted} WITH (FORCE)`);
    const exists = await admin.query(`SELECT 1 FROM pg_database WHERE datname = $1`, [name]);
    if (exists.rowCount === 0) await admin.query(`CREATE DATABASE ${quoted}`);
  } finally {
    await admin.end();
  }
  const url = new URL(LOCAL);
  url.pathname = `/${name}`;
  return url;
}

/** The environment the bench's CLI calls and worker processes run with. */
export function benchEnv(url: URL, queuePrefix: string): Record<string, string | undefined> {
  return { ...process.env, DATABASE_URL: url.toString(), GENFILL_QUEUE_PREFIX: queuePrefix, GENFILL_LOG_LEVEL: 'warn' };
}

/** `genfill <argv>` in process with `env`: its stdout, or an error with its stderr. */
export function cliRunner(env: Record<string, string | undefined>): (...argv: string[]) => Promise<string> {
  return async (...argv) => {
    let out = '';
    let err = '';
    const code = await main(argv, { out: (t) => (out += `${t}\n`), err: (t) => (err += `${t}\n`), env, tty: false });
    if (code !== 0) throw new Error(`genfill ${argv.join(' ')} exited ${code}: ${err}`);
    return out;
  };
}

export const exited = (c: ChildProcess): Promise<void> =>
  c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise<void>((r) => c.once('exit', () => r()));

/** The local server's postgres database, for dropping a bench's own database at its end. */
export async function dropBenchDatabase(url: URL): Promise<void> {
  const admin = new pg.Client({ connectionString: Object.assign(new URL(url), { pathname: '/postgres' }).toString() });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS "${url.pathname.slice(1).replace(/"/g, '""')}" WITH (FORCE)`);
  } finally {
    await admin.end();
  }
}

/** The q-quantile (nearest rank) of xs; NaN when empty. */
export const quantile = (xs: number[], q: number): number =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.max(0, Math.ceil(q * xs.length) - 1))] ?? NaN;
const r2 = (v: number) => Math.round(v * 100) / 100;
/** p50, p95, max, min and n of xs, to two decimals. */
export const dist = (xs: number[]) => ({ p50: r2(quantile(xs, 0.5)), p95: r2(quantile(xs, 0.95)), max: r2(Math.max(...xs)), min: r2(Math.min(...xs)), n: xs.length });

const DAY = 86_400_000;

/** A range of `days` days inside the demo's year, a different one for each i (steps of 37 days, wrapping). */
export function demoRangeOf(i: number, days: number): { from: string; to: string } {
  const span = Math.floor((Date.parse(DEMO_RANGE.to) - Date.parse(DEMO_RANGE.from)) / DAY) - days;
  const from = Date.parse(DEMO_RANGE.from) + ((i * 37) % span) * DAY;
  return { from: new Date(from).toISOString().replace('.000', ''), to: new Date(from + days * DAY).toISOString().replace('.000', '') };
}

/** The generation `dataset`'s readers see now. */
export async function activeGeneration(db: pg.Pool, dataset: string): Promise<string> {
  const { rows } = await db.query<{ g: string }>('SELECT active_generation AS g FROM genfill.datasets WHERE name = $1', [dataset]);
  return rows[0]!.g;
}

/** Resolves once the active generation's frontier contains a snapshot taken now (the projector passed it). */
export async function projectorPassedNow(db: pg.Pool, dataset: string, timeoutMs = 60_000): Promise<void> {
  const { rows: snap } = await db.query<{ s: string }>('SELECT pg_current_snapshot()::text AS s');
  for (let waited = 0; ; waited += 100) {
    const { rows } = await db.query<{ ok: boolean }>(
      `SELECT genfill.snapshot_contains(f.snapshot, $2::pg_snapshot) AS ok FROM genfill.frontiers f JOIN genfill.datasets d
          ON d.name = f.dataset AND d.active_generation = f.generation WHERE d.name = $1`,
      [dataset, snap[0]!.s],
    );
    if (rows[0]?.ok) return;
    if (waited > timeoutMs) throw new Error(`the projector did not pass ${snap[0]!.s} within ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Small releases of the shipped fixed-tax transform (examples/order-tax-fix.yaml) on the demo's
 * dataset, taken to APPROVED in process: submitted, planned, built (claimPartition +
 * buildPartition, as a worker would), one catch-up round, reconciled, and approved by a second
 * login (`approver`, a member of genfill_approver). `dir` holds the release files.
 */
export function demoReleases(o: { db: pg.Pool; approver: pg.Pool; dir: string }): {
  /** The fixed transform's SQL (it reads `FROM source AS s`). */
  fixedSql: string;
  approved(id: string, generation: string, expected: string, range: { from: string; to: string }): Promise<Record<string, number>>;
} {
  const examples = new URL('../examples/', import.meta.url);
  const template = parse(readFileSync(new URL('order-tax-fix.yaml', examples), 'utf8')) as Record<string, any>;
  const fixedSql = readFileSync(new URL(template.transform.sql, examples), 'utf8');
  mkdirSync(join(o.dir, dirname(template.transform.sql)), { recursive: true });
  writeFileSync(join(o.dir, template.transform.sql), fixedSql);
  const lap = (t: number) => Math.round(performance.now() - t);
  return {
    fixedSql,
    async approved(id, generation, expected, range) {
      const { db } = o;
      const t: Record<string, number> = {};
      let s = performance.now();
      const r = structuredClone(template);
      r.release = id;
      r.range = range;
      r.partition = { every: 'P1D' };
      r.target.generation = generation;
      r.target.expectedActive = expected;
      r.approvals = 1;
      const file = join(o.dir, `${id.replace(/[^a-z0-9-]/gi, '_')}.yaml`);
      writeFileSync(file, stringify(r));
      await submitRelease(file, db);
      const plan = await planRelease(db, id);
      await startBuilding(db, id);
      t.plan = lap(s);
      s = performance.now();
      const { rows } = await db.query<{ id: string }>(`SELECT id FROM genfill.partitions WHERE release = $1 AND status <> 'BUILT' ORDER BY seq`, [id]);
      for (const p of rows) {
        const c = await claimPartition(db, { release: id, partition: p.id, worker: 'bench', leaseMs: 600_000 });
        if (c.kind !== 'claimed') throw new Error(`claim of ${id} ${p.id} refused: ${JSON.stringify(c)}`);
        await buildPartition(db, { release: id, partition: p.id, attempt: c.attempt });
      }
      t.build = lap(s);
      t.partitions = plan.partitions;
      s = performance.now();
      await catchupRound(db, id);
      t.catchup = lap(s);
      s = performance.now();
      const rec = await reconcile(db, id);
      if (rec.state !== 'RECONCILED') {
        throw new Error(`${id}: reconciliation #${rec.id} is ${rec.state} with ${rec.findings.count} findings (${JSON.stringify(rec.findings.first.slice(0, 3))})`);
      }
      t.reconcile = lap(s);
      s = performance.now();
      const { rows: ap } = await o.approver.query<{ state: string }>('SELECT * FROM genfill.approve($1, $2)', [id, rec.id]);
      if (ap[0]?.state !== 'APPROVED') throw new Error(`${id}: the approval left it ${ap[0]?.state}`);
      t.approve = lap(s);
      return t;
    },
  };
}
