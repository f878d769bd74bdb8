// A window of jobs per release (issue 19): Redis holds at most GENFILL_DISPATCH_WINDOW jobs of a
// release, not one per partition; the workers top the window up from the registry as partitions
// finish, so a release planned by `genfill plan` alone (no planner service) still completes —
// every partition built exactly once, under SIGKILL of a worker and after Redis lost every key.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, dailyRelease, seedOrders, workspace, writeRelease } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';
import { waitFor } from './support/wait.ts';

const BIN = fileURLToPath(new URL('../apps/cli/bin/genfill.js', import.meta.url));
const db = await createTestDatabase('dispatch_window');
const queues = createTestQueues('dispatch-window');
const WINDOW = 4;
const env = { DATABASE_URL: db.url, REDIS_URL, GENFILL_QUEUE_PREFIX: queues.prefix, GENFILL_LOG_LEVEL: 'warn', GENFILL_DISPATCH_WINDOW: String(WINDOW) };
const cli = (...args: string[]) => runCli(args, env);
const children = new Set<ChildProcess>();

function worker(release: string): ChildProcess {
  const child = spawn(process.execPath, [BIN, 'worker', '--no-throttle', '--lock-duration', '1500', '--release', release], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr!.on('data', () => undefined);
  children.add(child);
  child.on('exit', () => children.delete(child));
  return child;
}

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
/** Jobs of the release Redis holds that are still to run or running. */
async function live(release: string): Promise<number> {
  const c = await queues.queue(release).getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'waiting-children');
  return Object.values(c).reduce((a, b) => a + b, 0);
}

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
  await seedOrders(db.pool, { perDay: 200, days: 40 });
});
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(queues);
});
afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
});

/**
 * Plan `release` (30 daily partitions of 200 orders), build it with two workers while sampling
 * the live jobs every 20 ms, SIGKILL one worker, lose every Redis key: every partition is built
 * exactly once and Redis never held more than the window.
 */
async function buildUnderFaults(release: string, dataset: string, partition: Record<string, unknown>, expected: { added: number; addedPartitions: number }, afterPlan?: () => Promise<void>) {
  expect((await cli('release', 'submit', writeRelease(workspace(), dailyRelease(release, dataset, 30, { partition })))).code).toBe(0);
  const plan = await cli('plan', release, '--json');
  expect(plan.code).toBe(0);
  const p = JSON.parse(plan.stdout);
  expect(p.partitions).toBe(30);
  expect(p.dispatch.enqueue).toMatchObject({ window: WINDOW, unfinished: 30, ...expected });
  expect(await live(release)).toBe(WINDOW);
  await afterPlan?.();
  const built = async () => (await one(`SELECT count(*)::int AS n FROM genfill.partitions WHERE release = $1 AND status = 'BUILT'`, [release])).n as number;

  let max = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      max = Math.max(max, await live(release));
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  const a = worker(release);
  worker(release);
  await waitFor('a third of the partitions built', async () => (await built()) >= 10);
  a.kill('SIGKILL');
  worker(release);
  await waitFor('half built', async () => (await built()) >= 15);
  expect(await queues.clear()).toBeGreaterThan(0);
  await waitFor('the release built', async () => (await one(`SELECT state FROM genfill.releases WHERE id = $1`, [release])).state === 'BUILT', 120_000);
  sampling = false;
  await sampler;
  for (const c of children) c.kill('SIGKILL');

  expect(max).toBeGreaterThan(0);
  expect(max).toBeLessThanOrEqual(WINDOW);
  const r = await one(
    `SELECT (SELECT count(*) FROM genfill.partitions WHERE release = $1)::int AS parts,
            (SELECT count(*) FROM genfill.receipts WHERE release = $1)::int AS receipts,
            (SELECT count(DISTINCT partition) FROM genfill.receipts WHERE release = $1)::int AS receipted`,
    [release],
  );
  expect(r).toEqual({ parts: 30, receipts: 30, receipted: 30 });
  const dupes = await one(`SELECT count(*)::int AS n FROM (SELECT order_id FROM genfill_data."${dataset}__g1" GROUP BY order_id HAVING count(*) > 1) d`);
  expect(dupes.n).toBe(0);
}

describe('the dispatch window', () => {
  it(`keeps at most ${WINDOW} jobs in Redis; workers top it up until every partition is built once, through a SIGKILL and a Redis that lost every key`, async () => {
    await buildUnderFaults('win@1', 'win_orders', { every: 'P1D' }, { added: WINDOW, addedPartitions: WINDOW });
  });

  it('with partition.batchRows, a job is a unit of consecutive partitions, each with its own receipt, under the same faults', async () => {
    // 200 estimated rows a day: units of 3 partitions fit 700 rows, so 4 jobs carry 12 partitions.
    await buildUnderFaults('units@1', 'unit_orders', { every: 'P1D', batchRows: 700 }, { added: WINDOW, addedPartitions: 3 * WINDOW }, async () => {
      // The first unit: the range's first day and the two after it, named by its first partition.
      const jobs = await queues.queue('units@1').getJobs(['waiting']);
      expect(jobs.map((j) => j.id).sort()).toEqual(['b-20250701T000000Z+2.e0', 'b-20250704T000000Z+2.e0', 'b-20250707T000000Z+2.e0', 'b-20250710T000000Z+2.e0']);
      expect(jobs.find((j) => j.id === 'b-20250701T000000Z+2.e0')!.data.partitions).toEqual(['b-20250701T000000Z', 'b-20250702T000000Z', 'b-20250703T000000Z']);
    });
  });
});
