// genfill on a three-node Redis Cluster (ioredis Cluster through REDIS_URL=redis+cluster://…):
// with the hash-tagged queue prefix every key of a release — its BullMQ queue and the
// throttle's lease — sits in one slot of one node, so plan, workers, pause, the lease and the
// planner's resync work as on one server, including after that node lost every key.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it, onTestFailed } from 'vitest';
import { createRedis, releaseQueue, type Redis } from '@genfill/queue';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, dailyRelease, seedOrders, workspace, writeRelease } from './support/fixtures.ts';
import { nodeOf, useRedisCluster } from './support/redis-cluster.ts';
import { exited, waitFor } from './support/wait.ts';

const BIN = fileURLToPath(new URL('../apps/cli/bin/genfill.js', import.meta.url));
const cluster = await useRedisCluster();
const db = await createTestDatabase('redis_cluster');
const prefix = `{gftest-cluster-${randomBytes(4).toString('hex')}}`;
const env = { DATABASE_URL: db.url, REDIS_URL: cluster.url, GENFILL_QUEUE_PREFIX: prefix, GENFILL_LOG_LEVEL: 'warn' };
const cli = (...args: string[]) => runCli(args, env);
const RELEASE = 'cluster@1';
const DAYS = 6;
const children = new Set<ChildProcess>();
const clients: Redis[] = [];
let failed = false;

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
const partitions = () =>
  one(`SELECT count(*) FILTER (WHERE status = 'BUILT')::int AS built, coalesce(sum(attempt), 0)::int AS attempts FROM genfill.partitions WHERE release = $1`, [RELEASE]);

/** Keys under the test's prefix on one node (SCAN: never KEYS on a shared server); `del` drops them. */
async function keysOn(port: number, opts: { del?: boolean } = {}): Promise<string[]> {
  const node = createRedis(`redis://127.0.0.1:${port}`);
  try {
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = (await node.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000)) as [string, string[]];
      keys.push(...batch);
      cursor = next;
    } while (cursor !== '0');
    // One hash tag, one slot: a multi-key DEL is allowed.
    if (opts.del && keys.length > 0) await node.del(...keys);
    return keys;
  } finally {
    node.disconnect();
  }
}

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
  await seedOrders(db.pool, { perDay: 40, days: DAYS });
});
beforeEach(() => {
  keepOnFailure(db);
  onTestFailed(() => void (failed = true));
});
afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  // The prefix's keys go after success (kept for inspection after a failure), as elsewhere.
  if (failed) process.stderr.write(`kept Redis Cluster keys ${prefix}* for inspection\n`);
  else for (const port of cluster.ports) await keysOn(port, { del: true });
  await Promise.all(clients.map((c) => c.quit().catch(() => c.disconnect())));
});

describe('a Redis Cluster behind REDIS_URL', { timeout: 120_000 }, () => {
  it('plans into one slot, pauses, elects the throttle, builds, and resyncs after the slot’s node lost every key', async () => {
    const admin = createRedis(cluster.url);
    clients.push(admin);
    expect((await cli('release', 'submit', writeRelease(workspace(), dailyRelease(RELEASE, 'orders_cluster', DAYS)))).code).toBe(0);
    const planned = await cli('plan', RELEASE, '--json');
    expect(planned.code).toBe(0);

    // Every key of the queue lives on the one master that serves the prefix's slot.
    const owner = await nodeOf(cluster, prefix);
    clients.push(owner.node);
    const onOwner = await keysOn(owner.port);
    expect(onOwner.length).toBeGreaterThan(DAYS);
    for (const port of cluster.ports.filter((p) => p !== owner.port)) expect(await keysOn(port)).toEqual([]);
    for (const key of onOwner.slice(0, 20)) expect(Number(await admin.call('CLUSTER', 'KEYSLOT', key))).toBe(owner.slot);
    const queue = releaseQueue(RELEASE, { connection: admin, prefix });
    expect(await queue.getJobCounts('waiting')).toEqual({ waiting: DAYS });

    // Paused before any worker runs: the queue pause is a Lua script on the cluster.
    expect((await cli('pause', RELEASE)).code).toBe(0);
    expect(await queue.isPaused()).toBe(true);

    const worker = spawn(process.execPath, [BIN, 'worker', '--release', RELEASE, '--throttle-interval', '200', '--lock-duration', '5000'], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    worker.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
    children.add(worker);
    const leaseKey = `${prefix}:throttle:${RELEASE}:leader`;
    const held = async () => {
      const v = await owner.node.get(leaseKey);
      return v !== null && v.includes(`:${worker.pid}#`) && v;
    };
    await waitFor('the worker to hold the throttle lease on the cluster', held, 30_000);
    // Paused: the controller decides, nothing is claimed.
    await waitFor('a throttle decision', async () => (await one('SELECT count(*)::int AS n FROM genfill.throttle_decisions WHERE release = $1', [RELEASE])).n > 0, 20_000);
    expect(await partitions()).toEqual({ built: 0, attempts: 0 });

    // The node serving the slot loses every key: jobs, queue meta, the lease.
    await owner.node.flushall();
    expect(await keysOn(owner.port)).toEqual([]);
    // The controller takes its lease again after the flush. Checked while the release is still
    // paused: once it is BUILT the worker stops serving it and lets the lease go, and on an idle
    // machine the build can finish inside one throttle interval (a probe after BUILT raced that).
    await waitFor('the lease held again', held, 10_000);
    expect((await cli('resume', RELEASE)).code).toBe(0);
    // The registry is the record: plan re-derives one job per unfinished partition.
    const again = await cli('plan', RELEASE, '--json');
    expect(again.code).toBe(0);
    await waitFor(`${RELEASE} BUILT`, async () => (await one('SELECT state FROM genfill.releases WHERE id = $1', [RELEASE])).state === 'BUILT', 60_000);

    worker.kill('SIGTERM');
    expect(await exited(worker)).toBe(0);
    children.delete(worker);
    const receipts = await one(`SELECT count(*)::int AS n, count(DISTINCT partition)::int AS parts FROM genfill.receipts WHERE release = $1`, [RELEASE]);
    expect(receipts).toEqual({ n: DAYS, parts: DAYS });
    expect(stderr).not.toMatch(/CROSSSLOT|MOVED|"level":50/);
    await queue.close();
  });
});
