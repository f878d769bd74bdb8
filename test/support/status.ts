// Registry contents for the status page tests (test/status-page.test.ts, test/status-browser.test.ts):
// releases submitted and planned through the CLI, partitions failed and claimed through the
// builder's own claim and fail functions, and — where the page only reads what another service
// writes (a throttle decision, a reconciliation with findings, a projector's frontier) — rows
// inserted as that service would store them.
import type pg from 'pg';
import { expect } from 'vitest';
import { claimPartition, failPartition } from '@genfill/builder';
import { runCli } from './cli.ts';
import { firstGenerationRelease, workspace, writeRelease } from './fixtures.ts';

export const TOKENS = { olga: 'operator-token-status-0123456789', vera: 'viewer-token-status-0123456789' };
export const API_TOKENS = `olga:operator:${TOKENS.olga},vera:viewer:${TOKENS.vera}`;

/**
 * Submit and plan a first-generation release of `dataset` (default orders_new, view
 * public.<dataset>) over [from, to). One open release per candidate generation: a second
 * release at once needs a dataset of its own.
 */
export async function submitAndPlan(env: Record<string, string>, id: string, from: string, to: string, every = 'P1D', dataset = 'orders_new'): Promise<void> {
  const r = firstGenerationRelease();
  r.release = id;
  r.dataset = dataset;
  r.target.table = `public.${dataset}`;
  r.range = { from, to };
  r.partition = { every };
  expect((await runCli(['release', 'submit', writeRelease(workspace(), r)], env)).code).toBe(0);
  const plan = await runCli(['plan', id], env);
  expect(plan.stderr).toBe('');
  expect(plan.code).toBe(0);
}

export async function partitionIds(pool: pg.Pool, release: string, seqs: number[]): Promise<string[]> {
  const { rows } = await pool.query('SELECT id FROM genfill.partitions WHERE release = $1 AND seq = ANY($2::int[]) ORDER BY seq', [release, seqs]);
  return rows.map((r) => r.id as string);
}

/** Claim a partition as a worker would; returns the attempt (it stays RUNNING). */
export async function claim(pool: pg.Pool, release: string, partition: string): Promise<number> {
  const c = await claimPartition(pool, { release, partition, worker: 'worker-7', leaseMs: 3_600_000 });
  if (c.kind !== 'claimed') throw new Error(`claim of ${partition} was ${JSON.stringify(c)}`);
  return c.attempt;
}

/** Claim and fail a partition as a worker does on a non-retryable error. */
export async function fail(pool: pg.Pool, release: string, partition: string, reason: string, evidence: unknown): Promise<void> {
  const attempt = await claim(pool, release, partition);
  expect(await failPartition(pool, { release, partition, attempt, reason, evidence })).toBe(true);
}

/** A throttle controller's decision, written under its fence as genfill.throttle_decisions requires. */
export async function recordThrottleDecision(pool: pg.Pool, release: string): Promise<void> {
  await pool.query(`INSERT INTO genfill.throttle_leases (release, token, holder) VALUES ($1, 1, 'worker-7')`, [release]);
  await pool.query(
    `INSERT INTO genfill.throttle_decisions (release, token, holder, signals, binding, ratio, action, concurrency, rows_per_second,
                                             live_workers, worker_rows_per_second, throttle_paused)
     VALUES ($1, 1, 'worker-7', '{"replicaLag": {"value": 4.2}, "foregroundP95": {"value": 11.5}, "errorRate": {"value": 0}}',
             'replicaLag', 0.84, 'hold', 4, 20000, 2, 10000, false)`,
    [release],
  );
}

/** A reconciliation that found `keys` missing in `partition`, with its findings stored (migration 0007). */
export async function recordReconciliation(pool: pg.Pool, release: string, partition: string, keys: number[]): Promise<string> {
  const { rows } = await pool.query(
    `INSERT INTO genfill.reconciliations (release, snapshot, from_state, release_digest, state, summary, findings_count)
     SELECT id, pg_current_snapshot(), state, digest, 'RECONCILIATION_REQUIRED', $2, $3 FROM genfill.releases WHERE id = $1
     RETURNING id::text`,
    [release, JSON.stringify({ rows: { source: '1000', stored: String(1000 - keys.length) } }), keys.length],
  );
  const id = rows[0].id as string;
  await pool.query(
    `INSERT INTO genfill.reconciliation_findings (reconciliation_id, seq, partition, kind, check_name, key)
     SELECT $1, n, $2, 'missing', 'old_generation', jsonb_build_object('order_id', k) FROM unnest($3::int[]) WITH ORDINALITY AS u(k, n)`,
    [id, partition, keys],
  );
  return id;
}

/** A dataset whose active generation has a projector frontier committed at `at`. */
export async function datasetWithFrontier(pool: pg.Pool, name: string, at: string): Promise<void> {
  await pool.query(
    `INSERT INTO genfill.datasets (name, target_table, source_table, key_columns, time_column)
     VALUES ($1, 'public.' || $1, 'public.' || $1 || '_source', '{id}', 'created_at')`,
    [name],
  );
  await pool.query(`INSERT INTO genfill.generations (dataset, generation, state) VALUES ($1, 'g1', 'ACTIVE')`, [name]);
  await pool.query(`UPDATE genfill.datasets SET active_generation = 'g1' WHERE name = $1`, [name]);
  await pool.query(`INSERT INTO genfill.frontiers (dataset, generation, snapshot, updated_at) VALUES ($1, 'g1', pg_current_snapshot(), $2)`, [name, at]);
}
