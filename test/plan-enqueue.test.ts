// `genfill plan` and the planner service enqueue exactly the partitions the registry says are
// unfinished, against the real Redis and PostgreSQL (SPEC "Parts": planner; issue 4 item 2).
import { Worker, UnrecoverableError } from 'bullmq';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { planRelease } from '@genfill/planner';
import { createRedis } from '@genfill/queue';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, firstGenerationRelease, workspace, writeRelease } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';

const db = await createTestDatabase('plan_enqueue');
const q = createTestQueues('plan-enqueue');
const env = { DATABASE_URL: db.url, REDIS_URL, GENFILL_QUEUE_PREFIX: q.prefix, GENFILL_LOG_LEVEL: 'silent' };
const cli = (...args: string[]) => runCli(args, env);
const RELEASE = 'orders-g1@1';
const queue = q.queue(RELEASE);

async function planJson(release = RELEASE) {
  const res = await cli('plan', release, '--json');
  expect(res.stderr).toBe('');
  expect(res.code).toBe(0);
  return JSON.parse(res.stdout);
}

async function jobIds(): Promise<string[]> {
  const jobs = await queue.getJobs(['waiting', 'delayed', 'active', 'failed'], 0, -1);
  return jobs.map((j) => j.id!).sort();
}

async function partitions(release = RELEASE): Promise<{ id: string; status: string; enqueue_epoch: number; est_rows: string | null }[]> {
  const { rows } = await db.pool.query(
    'SELECT id, status, enqueue_epoch, est_rows FROM genfill.partitions WHERE release = $1 ORDER BY seq',
    [release],
  );
  return rows;
}

async function submit(r: ReturnType<typeof firstGenerationRelease>, transform?: string): Promise<void> {
  const res = await cli('release', 'submit', writeRelease(workspace(), r, transform ? { transform } : {}));
  expect(res.stderr).toBe('');
  expect(res.code).toBe(0);
}

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
  // Known rows: three on the first day, two on the last instant of 2025-12-31, and rows just
  // outside the range on both sides, which no partition may count.
  await db.pool.query(`
    INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents) VALUES
      (1, 1, 'north', '2025-07-01T00:00:00Z', 100),
      (2, 1, 'south', '2025-07-01T12:00:00Z', 200),
      (3, 1, 'east',  '2025-07-01T23:59:59.999999Z', 300),
      (4, 2, 'north', '2025-12-31T23:59:59Z', 400),
      (5, 2, 'north', '2025-12-31T00:00:00Z', 500),
      (6, 3, 'east',  '2025-06-30T23:59:59.999999Z', 600),
      (7, 3, 'east',  '2026-07-01T00:00:00Z', 700)`);
  await submit(firstGenerationRelease());
});
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(q);
});

describe('genfill plan', () => {
  it('moves the release to BUILDING and enqueues one job per partition with its id, payload and retry policy', async () => {
    const plan = await planJson();
    expect(plan).toMatchObject({
      status: 'planned',
      state: 'BUILDING',
      partitions: 365,
      build: { started: true, state: 'BUILDING', estimatedRows: 5 },
      dispatch: { queue: `${q.prefix}:release.${RELEASE}`, queuePaused: false, enqueue: { unfinished: 365, added: 365, requeued: 0, lost: 0 } },
    });
    const parts = await partitions();
    expect(parts).toHaveLength(365);
    expect(await jobIds()).toEqual(parts.map((p) => `${p.id}.e0`).sort());
    expect(await queue.getJobCounts('waiting')).toEqual({ waiting: 365 });

    const first = await queue.getJob('b-20250701T000000Z.e0');
    expect(first?.name).toBe('build');
    expect(first?.data).toEqual({ release: RELEASE, partition: 'b-20250701T000000Z', epoch: 0 });
    expect(first?.opts).toMatchObject({ attempts: 5, backoff: { type: 'exponential', delay: 1000 }, removeOnComplete: true, removeOnFail: false });

    const log = await db.pool.query(`SELECT action, from_state, to_state, principal, detail FROM genfill.release_log WHERE release = $1 ORDER BY id`, [RELEASE]);
    expect(log.rows.map((r) => r.action)).toEqual(['submit', 'plan', 'build']);
    expect(log.rows[2]).toMatchObject({ from_state: 'SNAPSHOT_PINNED', to_state: 'BUILDING', principal: 'postgres', detail: { estimatedRows: 5 } });
  });

  it('stores each partition\'s estimated source rows, counting no row outside [from, to)', async () => {
    const est = new Map((await partitions()).map((p) => [p.id, p.est_rows === null ? null : Number(p.est_rows)]));
    expect(est.get('b-20250701T000000Z')).toBe(3);
    expect(est.get('b-20251231T000000Z')).toBe(2);
    expect(est.get('b-20250702T000000Z')).toBe(0);
    expect(est.get('b-20260630T000000Z')).toBe(0);
    expect([...est.values()].reduce((a, b) => a! + b!, 0)).toBe(5);
  });

  it('converts the bounds to the release timezone for a `timestamp without time zone` source column', async () => {
    await db.pool.query(`
      CREATE TABLE public.visits (visit_id bigint PRIMARY KEY, seen_at timestamp NOT NULL, pages int NOT NULL);
      INSERT INTO public.visits VALUES
        (1, '2025-06-30 23:30', 1),  -- Berlin, before local midnight: outside the range
        (2, '2025-07-01 00:30', 1),  -- 2025-06-30T22:30Z: in the first Berlin day
        (3, '2025-07-02 01:00', 1);  -- the second Berlin day`);
    const r = firstGenerationRelease();
    Object.assign(r, {
      release: 'visits-g1@1',
      dataset: 'visits_daily',
      source: { table: 'public.visits', key: ['visit_id'], time: 'seen_at' },
      range: { from: '2025-06-30T22:00:00Z', to: '2025-07-02T22:00:00Z' },
      timezone: 'Europe/Berlin',
      dependencies: [],
      reconcile: { conserved: ['pages'], expectedDiff: [] },
      transform: { sql: 'transforms/visits.sql' },
    });
    r.target.table = 'public.visits_new';
    await submit(r, 'SELECT s.visit_id, s.seen_at, s.pages FROM source AS s');
    const plan = await planJson('visits-g1@1');
    expect(plan.build.estimatedRows).toBe(2);
    expect((await partitions('visits-g1@1')).map((p) => Number(p.est_rows))).toEqual([1, 1]);
  });

  it('adds nothing when run again and logs nothing', async () => {
    const before = await db.pool.query('SELECT count(*)::int AS n FROM genfill.release_log');
    const plan = await planJson();
    expect(plan).toMatchObject({ status: 'already-planned', state: 'BUILDING', build: { started: false }, dispatch: { enqueue: { unfinished: 365, added: 0, requeued: 0 } } });
    expect(await queue.getJobCounts('waiting')).toEqual({ waiting: 365 });
    const after = await db.pool.query('SELECT count(*)::int AS n FROM genfill.release_log');
    expect(after.rows[0].n).toBe(before.rows[0].n);
  });

  it('leaves exactly 365 jobs when two plans run at once', async () => {
    const [a, b] = await Promise.all([cli('plan', RELEASE, '--json'), cli('plan', RELEASE, '--json')]);
    expect([a.code, b.code]).toEqual([0, 0]);
    expect((await jobIds()).length).toBe(365);
  });

  it('enqueues every unfinished partition again after Redis lost every key', async () => {
    expect(await q.clear()).toBeGreaterThan(0);
    expect(await q.keys()).toEqual([]);
    const plan = await planJson();
    expect(plan.dispatch.enqueue).toMatchObject({ unfinished: 365, added: 365 });
    expect((await jobIds()).length).toBe(365);
    // Twice at once after the loss too: BullMQ drops the second add of each id.
    await q.clear();
    await Promise.all([cli('plan', RELEASE), cli('plan', RELEASE)]);
    expect((await jobIds()).length).toBe(365);
  });

  it('re-enqueues a FAILED partition under a new epoch, resets it to PENDING and records the requeue', async () => {
    await db.pool.query(
      `UPDATE genfill.partitions SET status = 'FAILED', reason = 'TRANSFORM_ERROR', evidence = '{"message":"division by zero"}'
        WHERE release = $1 AND id = 'b-20250702T000000Z'`,
      [RELEASE],
    );
    const plan = await planJson();
    expect(plan.dispatch.enqueue).toMatchObject({ unfinished: 365, added: 1, requeued: 1, requeuedPartitions: ['b-20250702T000000Z'] });
    const p = (await partitions()).find((x) => x.id === 'b-20250702T000000Z')!;
    expect(p).toMatchObject({ status: 'PENDING', enqueue_epoch: 1 });
    const job = await queue.getJob('b-20250702T000000Z.e1');
    expect(job?.data).toEqual({ release: RELEASE, partition: 'b-20250702T000000Z', epoch: 1 });
    expect(await queue.getJobState('b-20250702T000000Z.e1')).toBe('waiting');

    const log = await db.pool.query(`SELECT action, principal, detail FROM genfill.release_log WHERE release = $1 ORDER BY id DESC LIMIT 1`, [RELEASE]);
    expect(log.rows[0]).toEqual({
      action: 'requeue',
      principal: 'postgres',
      detail: { partitions: ['b-20250702T000000Z'], previous: { 'b-20250702T000000Z': 'FAILED: TRANSFORM_ERROR' } },
    });
    // Once requeued it is an ordinary unfinished partition: the next plan bumps nothing.
    const again = await planJson();
    expect(again.dispatch.enqueue).toMatchObject({ added: 0, requeued: 0 });
  });

  it('gives a new epoch to a partition whose job BullMQ gave up on while the registry still says RUNNING', async () => {
    // A worker takes the job, then BullMQ fails it for good (as after too many stalls).
    const redis = createRedis(REDIS_URL);
    const worker = new Worker(queue.name, null, { connection: redis, prefix: q.prefix, autorun: false });
    try {
      const job = (await worker.getNextJob('test-token'))!;
      const { partition, epoch } = job.data as { partition: string; epoch: number };
      await db.pool.query(`UPDATE genfill.partitions SET status = 'RUNNING', attempt = attempt + 1 WHERE release = $1 AND id = $2`, [RELEASE, partition]);
      await job.moveToFailed(new UnrecoverableError('job stalled more than allowable limit'), 'test-token');
      expect(await queue.getJobState(job.id!)).toBe('failed');

      const plan = await planJson();
      expect(plan.dispatch.enqueue).toMatchObject({ requeued: 1, requeuedPartitions: [partition], added: 1 });
      const p = (await partitions()).find((x) => x.id === partition)!;
      expect(p).toMatchObject({ status: 'PENDING', enqueue_epoch: epoch + 1 });
      expect(await queue.getJobState(`${partition}.e${epoch + 1}`)).toBe('waiting');
    } finally {
      await worker.close();
      await redis.quit();
    }
  });
});

describe('genfill plan when Redis is down', () => {
  it('does its registry part, then exits 1 saying Redis could not be reached and that plan is safe to re-run', async () => {
    const r = firstGenerationRelease();
    r.release = 'orders-g1-late@1';
    // One open release per candidate generation: another dataset's first generation.
    r.dataset = 'orders_late';
    r.target.table = 'public.orders_late';
    r.range = { from: '2026-08-01T00:00:00Z', to: '2026-09-01T00:00:00Z' };
    await submit(r);
    const down = await runCli(['plan', 'orders-g1-late@1'], { ...env, REDIS_URL: 'redis://127.0.0.1:1' });
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/error: release orders-g1-late@1 is BUILDING in the registry, but Redis at 127\.0\.0\.1:1 could not be reached/);
    expect(down.stderr).toMatch(/Re-running `genfill plan orders-g1-late@1` is safe/);
    const st = await db.pool.query(`SELECT state FROM genfill.releases WHERE id = 'orders-g1-late@1'`);
    expect(st.rows[0].state).toBe('BUILDING');

    const plan = await planJson('orders-g1-late@1');
    expect(plan.dispatch.enqueue).toMatchObject({ unfinished: 31, added: 31 });
    expect(await q.queue('orders-g1-late@1').getJobCounts('waiting')).toEqual({ waiting: 31 });
  });
});

describe('genfill planner', () => {
  it('enqueues in one round the unfinished partitions of every open release, leaving FAILED ones to the operator', async () => {
    // A SNAPSHOT_PINNED release the planner must start, and a DRAFT it must leave alone.
    const next = firstGenerationRelease();
    next.release = 'orders-g1-next@1';
    next.dataset = 'orders_next';
    next.target.table = 'public.orders_next';
    next.range = { from: '2026-07-01T00:00:00Z', to: '2026-08-01T00:00:00Z' };
    await submit(next);
    await planRelease(db.pool, 'orders-g1-next@1');
    const draft = firstGenerationRelease();
    draft.release = 'orders-g1-draft@1';
    draft.dataset = 'orders_draft';
    draft.target.table = 'public.orders_draft';
    draft.range = { from: '2026-09-01T00:00:00Z', to: '2026-10-01T00:00:00Z' };
    await submit(draft);
    await db.pool.query(`UPDATE genfill.partitions SET status = 'FAILED', reason = 'JOIN_FANOUT' WHERE release = $1 AND id = 'b-20250703T000000Z'`, [RELEASE]);
    await q.clear();

    const res = await cli('planner', '--once', '--json');
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    const round = JSON.parse(res.stdout);
    expect(round.redis).toBe(true);
    const byId = Object.fromEntries(round.releases.map((r: { release: string }) => [r.release, r]));
    expect(Object.keys(byId).sort()).toEqual([RELEASE, 'orders-g1-late@1', 'orders-g1-next@1', 'visits-g1@1'].sort());
    expect(byId[RELEASE]).toMatchObject({ state: 'BUILDING', started: false, unfinished: 365, added: 364, requeued: 0, error: null });
    expect(byId['orders-g1-next@1']).toMatchObject({ state: 'BUILDING', started: true, unfinished: 31, added: 31, error: null });
    expect(await queue.getJobCounts('waiting')).toEqual({ waiting: 364 });
    expect(await q.queue('orders-g1-next@1').getJobCounts('waiting')).toEqual({ waiting: 31 });
    expect(await q.queue('orders-g1-draft@1').getJobCounts('waiting')).toEqual({ waiting: 0 });
    const states = await db.pool.query(`SELECT id, state FROM genfill.releases WHERE id LIKE 'orders-g1-%' ORDER BY id`);
    expect(states.rows).toEqual([
      { id: 'orders-g1-draft@1', state: 'DRAFT' },
      { id: 'orders-g1-late@1', state: 'BUILDING' },
      { id: 'orders-g1-next@1', state: 'BUILDING' },
    ]);
    const failed = (await partitions()).find((p) => p.id === 'b-20250703T000000Z')!;
    expect(failed).toMatchObject({ status: 'FAILED', enqueue_epoch: 0 });
  });

  it('serves only the releases named in GENFILL_RELEASE', async () => {
    await q.clear();
    const res = await runCli(['planner', '--once', '--json'], { ...env, GENFILL_RELEASE: 'orders-g1-next@1' });
    expect(res.code).toBe(0);
    expect(JSON.parse(res.stdout).releases.map((r: { release: string }) => r.release)).toEqual(['orders-g1-next@1']);
    expect(await queue.getJobCounts('waiting')).toEqual({ waiting: 0 });
    expect(await q.queue('orders-g1-next@1').getJobCounts('waiting')).toEqual({ waiting: 31 });
  });
});

