// Test setup for the reconciler: orders, an adopted old generation (g2) built with a
// truncating tax (the bug the releases fix), and candidates built by the real workers'
// code (claimPartition + buildPartition), ready to be damaged by SQL.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { buildPartition, claimPartition } from '@genfill/builder';
import { adoptDataset, planRelease, startBuilding, submitRelease } from '@genfill/planner';
import { migrate, type Db } from '@genfill/registry';
import { urlAs, type TestDatabase } from '../../../test/support/db.ts';
import { mapTestLogins } from '../../../test/support/persons.ts';
import { createExampleSchema, exampleRelease, workspace, writeRelease } from '../../../test/support/fixtures.ts';

export const LEGACY_TRANSFORM = `SELECT s.order_id, s.created_at, s.region, s.amount_cents,
       trunc(s.amount_cents * coalesce(t.rate, 0))::bigint AS tax_cents
  FROM source AS s LEFT JOIN public.tax_rates AS t ON t.region = s.region`;

export interface Seed {
  /** First day of the orders (UTC midnight). */
  from: string;
  days: number;
  perDay: number;
}

/**
 * Orders spread evenly over `days` from `from` (ids follow time), orders_enriched built by
 * the legacy transform, adopted as generation g2 of dataset orders_enriched. The admin and the
 * shared logins genfill_alice and genfill_bob are mapped to persons of their own (approvals
 * count persons: test/support/persons.ts).
 */
export async function seedAdopted(tdb: TestDatabase, db: Db, seed: Seed): Promise<void> {
  await migrate(db);
  await mapTestLogins(tdb.pool);
  await createExampleSchema(tdb.pool);
  const n = seed.days * seed.perDay;
  await tdb.pool.query(
    `INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents)
     SELECT i, i % 97, (ARRAY['north', 'south', 'east'])[1 + i % 3],
            $1::timestamptz + (i - 1) * (interval '1 day' / $2::int), 100 + (i * 7919) % 100000
       FROM generate_series(1, $3::int) AS i`,
    [seed.from, seed.perDay, n],
  );
  await tdb.pool.query(`
    INSERT INTO public.orders_enriched (order_id, created_at, region, amount_cents, tax_cents)
    SELECT s.order_id, s.created_at, s.region, s.amount_cents, trunc(s.amount_cents * coalesce(t.rate, 0))::bigint
      FROM public.orders s LEFT JOIN public.tax_rates t ON t.region = s.region;
    ANALYZE public.orders, public.orders_enriched`);
  const file = join(workspace(), 'legacy.sql');
  writeFileSync(file, LEGACY_TRANSFORM);
  await adoptDataset(db, {
    dataset: 'orders_enriched',
    source: 'public.orders',
    key: ['order_id'],
    time: 'created_at',
    table: 'public.orders_enriched',
    generation: 'g2',
    transformFile: file,
  });
}

export interface ReleaseOptions {
  id: string;
  generation: string;
  from: string;
  to: string;
  every?: string;
  approvals?: number;
  /** Submit as this login (a URL's user), e.g. to make someone else the submitter. */
  submitAs?: Db;
  /** The generation the release expects active (default g2, the adopted one). */
  expectedActive?: string;
}

/** Submit, plan and build a release of the example transform over [from, to) into `generation`. */
export async function builtRelease(db: Db, o: ReleaseOptions): Promise<void> {
  await plannedRelease(db, o);
  await startBuilding(db, o.id);
  await buildAll(db, o.id);
}

export async function plannedRelease(db: Db, o: ReleaseOptions): Promise<void> {
  const r = exampleRelease();
  r.release = o.id;
  r.target.generation = o.generation;
  r.target.expectedActive = o.expectedActive ?? 'g2';
  r.range = { from: o.from, to: o.to };
  r.partition = { every: o.every ?? 'P1D' };
  r.approvals = o.approvals ?? 1;
  await submitRelease(writeRelease(workspace(), r), o.submitAs ?? db);
  await planRelease(db, o.id);
}

/** Claim and build every unbuilt partition, as a worker would. */
export async function buildAll(db: Db, release: string): Promise<void> {
  const { rows } = await db.query<{ id: string }>(`SELECT id FROM genfill.partitions WHERE release = $1 AND status <> 'BUILT' ORDER BY seq`, [release]);
  for (const p of rows) {
    const c = await claimPartition(db, { release, partition: p.id, worker: 'test', leaseMs: 600_000 });
    if (c.kind !== 'claimed') throw new Error(`claim of ${p.id} refused: ${JSON.stringify(c)}`);
    await buildPartition(db, { release, partition: p.id, attempt: c.attempt });
  }
}

/** `genfill_data."orders_enriched__<generation>"` */
export function candidate(generation: string): string {
  return `genfill_data."orders_enriched__${generation}"`;
}

export interface FindingLine {
  partition: string | null;
  key: Record<string, unknown> | null;
  kind: string;
  check: string;
  column?: string;
  detail?: Record<string, unknown>;
}

export function readFindings(path: string): FindingLine[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as FindingLine);
}

/** The partition id of an instant with daily partitions from midnight UTC. */
export function dayPartition(iso: string): string {
  return `b-${iso.slice(0, 10).replace(/-/g, '')}T000000Z`;
}

export { urlAs };

export async function queryAs<T extends pg.QueryResultRow>(tdb: TestDatabase, role: string, text: string, values: unknown[] = []): Promise<T[]> {
  const c = new pg.Client({ connectionString: urlAs(tdb, role) });
  await c.connect();
  try {
    return (await c.query<T>(text, values)).rows;
  } finally {
    await c.end();
  }
}

const BIN = fileURLToPath(new URL('../../../apps/cli/bin/genfill.js', import.meta.url));

export interface Spawned {
  child: ChildProcess;
  /** Everything written so far. */
  stdout(): string;
  stderr(): string;
  /** The exit code (null when a signal ended it), once the process has exited. */
  exit: Promise<number | null>;
}

/**
 * The genfill binary as its own node process (never npx or a shell: a signal sent to a
 * wrapper leaves the real process running), in `cwd`, with `env` over the test's environment.
 */
export function spawnGenfill(args: string[], o: { cwd: string; env: Record<string, string> }): Spawned {
  return spawnNode([BIN, ...args], o);
}

/** Spawn the node process itself with these arguments (an entry point and its flags), never a wrapper. */
export function spawnNode(args: string[], o: { cwd: string; env: Record<string, string> }): Spawned {
  const child = spawn(process.execPath, args, { cwd: o.cwd, env: { ...process.env, GENFILL_LOG_LEVEL: 'info', ...o.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const exit = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  return { child, stdout: () => out, stderr: () => err, exit };
}

/** Run the binary to its end. */
export async function runGenfill(args: string[], o: { cwd: string; env: Record<string, string> }): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const s = spawnGenfill(args, o);
  const code = await s.exit;
  return { code, stdout: s.stdout(), stderr: s.stderr() };
}

/** The window the reconcile tests build over: two daily partitions of the seeded orders. */
export const WINDOW = { from: '2025-07-02T00:00:00Z', to: '2025-07-04T00:00:00Z', day2: 'b-20250702T000000Z', day3: 'b-20250703T000000Z' } as const;

/**
 * A maker of new releases `<prefix>-<n>@1`, each with its own candidate generation (g3, g4, …),
 * built over WINDOW: every test damages a candidate of its own.
 */
export function releaseMaker(db: Db, prefix: string): () => Promise<{ id: string; table: string }> {
  let made = 0;
  return async () => {
    made++;
    const id = `${prefix}-${made}@1`;
    await builtRelease(db, { id, generation: `g${made + 2}`, from: WINDOW.from, to: WINDOW.to });
    return { id, table: candidate(`g${made + 2}`) };
  };
}
