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

function worker(): ChildProcess {
  const child = spawn(process.execPath, [BIN, 'worker', '--no-throttle', '--lock-duration', '1500', '--release', 'win@1'], {
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
async function live(): Promise<number> {
  const c = await queues.queue('win@1').getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'waiting-children');
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

describe('the dispatch window', () => {
  it(`keeps at most ${WINDOW} jobs in Redis; workers top it up until every partition is built once, through a SIGKILL and a Redis that lost every key`, async () => {
    expect((await cli('release', 'submit', writeRelease(workspace(), dailyRelease('win@1', 'win_orders', 30)))).code).toBe(0);
    const plan = await cli('plan', 'win@1', '--json');
    expect(plan.code).toBe(0);
    const p = JSON.parse(plan.stdout);
    expect(p.partitions).toBe(30);
    expect(p.dispatch.enqueue).toMatchObject({ window: WINDOW, added: WINDOW, unfinished: 30 });
    expect(await live()).toBe(WINDOW);

    // Sample the window while two workers build; kill one mid-way, then lose every key.
    let max = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        max = Math.max(max, await live());
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const a = worker();
    worker();
    await waitFor('a third of the partitions built', async () => (await one(`SELECT count(*)::int AS n FROM genfill.partitions WHERE release = 'win@1' AND status = 'BUILT'`)).n >= 10);
    a.kill('SIGKILL');
    worker();
    await waitFor('half built', async () => (await one(`SELECT count(*)::int AS n FROM genfill.partitions WHERE release = 'win@1' AND status = 'BUILT'`)).n >= 15);
    expect(await queues.clear()).toBeGreaterThan(0);
    await waitFor('the release built', async () => (await one(`SELECT state FROM genfill.releases WHERE id = 'win@1'`)).state === 'BUILT', 120_000);
    sampling = false;
    await sampler;

    expect(max).toBeGreaterThan(0);
    expect(max).toBeLessThanOrEqual(WINDOW);
    const r = await one(
      `SELECT (SELECT count(*) FROM genfill.partitions WHERE release = 'win@1')::int AS parts,
              (SELECT count(*) FROM genfill.receipts WHERE release = 'win@1')::int AS receipts,
              (SELECT count(DISTINCT partition) FROM genfill.receipts WHERE release = 'win@1')::int AS receipted`,
    );
    expect(r).toEqual({ parts: 30, receipts: 30, receipted: 30 });
    const dupes = await one(`SELECT count(*)::int AS n FROM (SELECT order_id FROM genfill_data."win_orders__g1" GROUP BY order_id HAVING count(*) > 1) d`);
    expect(dupes.n).toBe(0);
  });
});
