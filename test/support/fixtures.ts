// Release files and the example schema for tests: each test writes its own variant to a
// temporary directory, starting from the SPEC's example.
import { mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, stringify } from 'yaml';
import type pg from 'pg';
import { afterAll, beforeEach, onTestFailed } from 'vitest';
import { installCapture } from '@genfill/capture';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const EXAMPLE_RELEASE = join(ROOT, 'examples/order-tax-fix.yaml');
export const EXAMPLE_TRANSFORM = readFileSync(join(ROOT, 'examples/transforms/order-tax-fix.sql'), 'utf8');
export const EXAMPLE_SCHEMA = readFileSync(join(ROOT, 'examples/schema.sql'), 'utf8');

/** The SPEC example as a plain object (instants stay strings). */
export function exampleRelease(): Record<string, any> {
  return parse(readFileSync(EXAMPLE_RELEASE, 'utf8'));
}

/** The example as a first generation of a new dataset whose view does not exist yet. */
export function firstGenerationRelease(): Record<string, any> {
  const r = exampleRelease();
  r.release = 'orders-g1@1';
  r.dataset = 'orders_new';
  r.target.table = 'public.orders_new';
  r.target.generation = 'g1';
  r.target.expectedActive = null;
  return r;
}

// Every workspace a test file made is removed after the file, unless one of its tests failed
// (then they stay for inspection, as the file's database does).
const workspaces: string[] = [];
let keepWorkspaces = false;
beforeEach(() => onTestFailed(() => void (keepWorkspaces = true)));
afterAll(() => {
  if (keepWorkspaces) return;
  for (const dir of workspaces.splice(0)) rmSync(dir, { recursive: true, force: true });
});

export function workspace(): string {
  const dir = mkdtempSync(join(tmpdir(), 'genfill-test-'));
  workspaces.push(dir);
  return dir;
}

/** Write a release (object or raw text) and its transform; returns the release file path. */
export function writeRelease(
  dir: string,
  release: Record<string, any> | string,
  opts: { name?: string; transform?: string | null } = {},
): string {
  const file = join(dir, opts.name ?? 'release.yaml');
  writeFileSync(file, typeof release === 'string' ? release : stringify(release));
  const transformPath = typeof release === 'string' ? 'transforms/order-tax-fix.sql' : release.transform?.sql;
  if (opts.transform !== null && typeof transformPath === 'string') {
    const t = join(dir, transformPath);
    mkdirSync(dirname(t), { recursive: true });
    writeFileSync(t, opts.transform ?? EXAMPLE_TRANSFORM);
  }
  return file;
}

/**
 * The SPEC example's tables and rates. With the registry migrated, public.tax_rates is captured
 * as its owner (the example release declares it, and `plan` refuses an uncaptured dependency);
 * `captureDependencies: false` leaves it as the application made it.
 */
export async function createExampleSchema(pool: pg.Pool, o: { captureDependencies?: boolean } = {}): Promise<void> {
  await pool.query(EXAMPLE_SCHEMA);
  // A first generation's view is created by genfill_owner in the target's schema.
  await pool.query('GRANT CREATE ON SCHEMA public TO genfill_owner').catch(() => undefined);
  await pool.query(`INSERT INTO public.tax_rates (region, rate) VALUES ('north', 0.19), ('south', 0.07), ('east', 0.2) ON CONFLICT DO NOTHING`);
  if (o.captureDependencies === false) return;
  const { rows } = await pool.query<{ migrated: boolean }>(`SELECT to_regclass('genfill.captures') IS NOT NULL AS migrated`);
  if (rows[0]!.migrated) await captureAsOwner(pool, 'public.tax_rates');
}

/** `genfill capture install <table>` as the table's owner (a test's superuser): what `plan` asks of a declared dependency. */
export async function captureAsOwner(pool: pg.Pool, table: string): Promise<void> {
  await installCapture(pool, { table });
}

/**
 * `perDay` orders a day for `days` days from 2025-07-01 (ids 1…, evenly spaced, four regions),
 * into the example schema's public.orders.
 */
export async function seedOrders(pool: pg.Pool, o: { perDay: number; days: number }): Promise<void> {
  await pool.query(
    `INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents)
     SELECT i, i % 101, (ARRAY['north', 'south', 'east', 'west'])[1 + i % 4],
            timestamptz '2025-07-01' + (i - 1) * (interval '1 day' / $1::int), 100 + (i * 7919) % 50000
       FROM generate_series(1, $2::int) AS i`,
    [o.perDay, o.perDay * o.days],
  );
}

/** Row counts of every registry table a bad input must leave untouched. */
export async function registryCounts(pool: pg.Pool): Promise<Record<string, number>> {
  const tables = ['releases', 'datasets', 'generations', 'transforms', 'release_log', 'dataset_log', 'manifests', 'partitions', 'dependency_pins',
    'receipts', 'approvals', 'reconciliations', 'requests', 'throttle_leases', 'throttle_decisions'];
  const out: Record<string, number> = {};
  for (const t of tables) {
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM genfill.${t}`);
    out[t] = rows[0].n;
  }
  return out;
}

/**
 * The first-generation example as release `id` of its own dataset (view `public.<dataset>`),
 * over `days` daily partitions from 2025-07-01, with optional overrides (e.g. a budget).
 */
export function dailyRelease(id: string, dataset: string, days: number, overrides: Record<string, any> = {}): Record<string, any> {
  const r = firstGenerationRelease();
  r.release = id;
  r.dataset = dataset;
  r.target.table = `public.${dataset}`;
  r.range = { from: '2025-07-01T00:00:00Z', to: new Date(Date.UTC(2025, 6, 1 + days)).toISOString().replace('.000Z', 'Z') };
  return { ...r, ...overrides };
}
