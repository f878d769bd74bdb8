// Worker processes against real Redis and Postgres (SPEC fault suite rows on workers): every
// partition built once, whatever crashes; pause, cancel and re-enqueue.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, dailyRelease, seedOrders, workspace, writeRelease } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';
import { exited, waitFor as waitUntil } from './support/wait.ts';

const BIN = fileURLToPath(new URL('../apps/cli/bin/genfill.js', import.meta.url));
const db = await createTestDatabase('worker');
const queues = createTestQueues('worker');
const env = { DATABASE_URL: db.url, REDIS_URL, GENFILL_QUEUE_PREFIX: queues.prefix, GENFILL_LOG_LEVEL: 'warn' };
const cli = (...args: string[]) => runCli(args, env);
const children = new Set<ChildProcess>();

function worker(...args: string[]): ChildProcess {
  const child = spawn(process.execPath, [BIN, 'worker', '--no-throttle', '--lock-duration', '1500', ...args], {
    // A short idle-in-transaction limit, so the stalled-worker test need not wait 30 s.
    env: { ...process.env, ...env, GENFILL_IDLE_IN_TRANSACTION_TIMEOUT: '2s' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr!.on('data', () => undefined);
  children.add(child);
  child.on('exit', () => children.delete(child));
  return child;
}


const waitFor = <T>(what: string, probe: () => Promise<T | undefined | null | false>, timeoutMs = 120_000) => waitUntil(what, probe, timeoutMs);

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
const state = async (release: string) => (await one('SELECT state FROM genfill.releases WHERE id = $1', [release])).state as string;

/** A first-generation release of its own dataset over `days` daily partitions from 2025-07-01. */
async function release(id: string, dataset: string, days = 20): Promise<void> {
  expect((await cli('release', 'submit', writeRelease(workspace(), dailyRelease(id, dataset, days)))).code).toBe(0);
}

/** The release's candidate holds exactly the transform of the source in range, once per key. */
async function assertBuiltOnce(id: string, dataset: string): Promise<void> {
  expect(await state(id)).toBe('BUILT');
  const r = await one(
    `SELECT (SELECT count(*) FROM genfill.partitions WHERE release = $1)::int AS parts,
            (SELECT count(*) FROM genfill.receipts WHERE release = $1)::int AS receipts,
            (SELECT count(DISTINCT partition) FROM genfill.receipts WHERE release = $1)::int AS receipted`,
    [id],
  );
  expect(r.receipts).toBe(r.parts);
  expect(r.receipted).toBe(r.parts);
  const cand = `genfill_data."${dataset}__g1"`;
  const rng = await one('SELECT lower(range) AS f, upper(range) AS t FROM genfill.releases WHERE id = $1', [id]);
  const diff = await one(
    `WITH want AS (SELECT o.order_id, o.created_at, o.region, o.amount_cents, round(o.amount_cents * coalesce(t.rate, 0))::bigint AS tax_cents
                     FROM public.orders o LEFT JOIN public.tax_rates t ON t.region = o.region WHERE o.created_at >= $1 AND o.created_at < $2),
          got AS (SELECT order_id, created_at, region, amount_cents, tax_cents FROM ${cand})
     SELECT (SELECT count(*) FROM (SELECT * FROM want EXCEPT ALL SELECT * FROM got) a)::int AS missing,
            (SELECT count(*) FROM (SELECT * FROM got EXCEPT ALL SELECT * FROM want) b)::int AS extra,
            (SELECT count(*) FROM want)::int AS wanted`,
    [rng.f, rng.t],
  );
  expect(diff).toEqual({ missing: 0, extra: 0, wanted: expect.any(Number) });
  expect(diff.wanted).toBeGreaterThan(0);
}

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
  // Sixty days of orders, 250 a day, so a partition takes a moment to build.
  await seedOrders(db.pool, { perDay: 250, days: 60 });
});
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(queues);
});
afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
});

// Real processes on a shared 2-core machine: generous limits; each wait is on registry state.
describe('genfill worker', { timeout: 150_000 }, () => {
  it('two worker processes build every partition once, and SIGTERM exits 0', async () => {
    await release('two@1', 'orders_two');
    expect((await cli('plan', 'two@1')).code).toBe(0);
    // Held paused until both processes serve the queue: otherwise the first one up can build
    // everything (and the SIGTERM below reach the other before its handlers are installed).
    expect((await cli('pause', 'two@1')).code).toBe(0);
    const a = worker();
    const b = worker();
    const queue = queues.queue('two@1');
    await waitFor('both workers on the queue', async () => (await queue.getWorkers()).length >= 2);
    expect((await cli('resume', 'two@1')).code).toBe(0);
    await waitFor('two@1 BUILT', async () => (await state('two@1')) === 'BUILT');
    a.kill('SIGTERM');
    b.kill('SIGTERM');
    expect(await exited(a)).toBe(0);
    expect(await exited(b)).toBe(0);
    await assertBuiltOnce('two@1', 'orders_two');
    const by = await one(`SELECT count(DISTINCT leased_by)::int AS n FROM genfill.partitions WHERE release = 'two@1'`);
    expect(by.n).toBe(2);
    // status --json --partitions carries each partition's state, attempt, rows, roots, timings and reason.
    const st = JSON.parse((await cli('status', 'two@1', '--json', '--partitions')).stdout);
    const p0 = st.partitions[0];
    expect(p0).toMatchObject({ status: 'BUILT', attempt: 1, reason: null, receipt: { kind: 'build', rowsOut: expect.any(Number), keyRoot: expect.stringMatching(/^\d+$/), rowRoot: expect.stringMatching(/^\d+$/) } });
    expect(p0.receipt.rowsOut).toBe(p0.receipt.rowsIn);
    expect(Object.keys(p0.receipt.timingsMs)).toEqual(expect.arrayContaining(['claim', 'statement', 'fence', 'total']));
    // The summary names the slowest built partitions by their receipt's timings.total, slowest first.
    const { slowest } = JSON.parse((await cli('status', 'two@1', '--json')).stdout).summary;
    const byTotal = [...st.partitions].sort((a, b) => b.receipt.timingsMs.total - a.receipt.timingsMs.total || a.seq - b.seq);
    expect(slowest.map((s: { id: string }) => s.id)).toEqual(byTotal.slice(0, 10).map((p) => p.id));
    expect(slowest[0]).toEqual({ id: byTotal[0].id, seq: byTotal[0].seq, kind: 'build', attempt: 1, totalMs: byTotal[0].receipt.timingsMs.total, rowsIn: byTotal[0].receipt.rowsIn, rowsOut: byTotal[0].receipt.rowsOut });
  });

  it('completes with one receipt per partition when workers are SIGKILLed mid-partition, again and again', async () => {
    await release('kill@1', 'orders_kill', 30);
    expect((await cli('plan', 'kill@1')).code).toBe(0);
    for (let i = 0; i < 3; i++) {
      const w = worker();
      await waitFor(`a partition running on worker ${w.pid}`, async () =>
        (await one(`SELECT count(*)::int AS n FROM genfill.partitions WHERE release = 'kill@1' AND status = 'RUNNING' AND leased_by LIKE $1`, [`%:${w.pid}`])).n > 0,
      );
      w.kill('SIGKILL');
      await exited(w);
    }
    const last = worker();
    await waitFor('kill@1 BUILT', async () => (await state('kill@1')) === 'BUILT', 90_000);
    last.kill('SIGTERM');
    await exited(last);
    await assertBuiltOnce('kill@1', 'orders_kill');
    const retried = await one(`SELECT count(*)::int AS n, max(attempt) AS max FROM genfill.partitions WHERE release = 'kill@1' AND attempt > 1`);
    expect(retried.n).toBeGreaterThanOrEqual(1);
  });

  it('finishes after Redis lost every key mid-run once plan has re-derived the work', async () => {
    await release('flush@1', 'orders_flush');
    expect((await cli('plan', 'flush@1')).code).toBe(0);
    const w = worker();
    await waitFor('some partitions built', async () =>
      (await one(`SELECT count(*)::int AS n FROM genfill.partitions WHERE release = 'flush@1' AND status = 'BUILT'`)).n >= 3,
    );
    await queues.clear();
    expect((await cli('plan', 'flush@1')).code).toBe(0);
    await waitFor('flush@1 BUILT', async () => (await state('flush@1')) === 'BUILT');
    w.kill('SIGTERM');
    await exited(w);
    await assertBuiltOnce('flush@1', 'orders_flush');
  });

  it('starts no partition and spends no attempt after pause returns; resume completes every partition once', async () => {
    await release('pause@1', 'orders_pause');
    expect((await cli('plan', 'pause@1')).code).toBe(0);
    const w = worker();
    await waitFor('a partition built', async () =>
      (await one(`SELECT count(*)::int AS n FROM genfill.partitions WHERE release = 'pause@1' AND status = 'BUILT'`)).n >= 1,
    );
    expect((await cli('pause', 'pause@1')).code).toBe(0);
    const at = await one(`SELECT sum(attempt)::int AS attempts, count(*) FILTER (WHERE status = 'PENDING')::int AS pending FROM genfill.partitions WHERE release = 'pause@1'`);
    // In-flight builds finish; nothing new is claimed. Watch the registry for a while.
    const watchUntil = Date.now() + 2_500;
    while (Date.now() < watchUntil) {
      const now = await one(`SELECT sum(attempt)::int AS attempts, count(*) FILTER (WHERE status = 'PENDING')::int AS pending FROM genfill.partitions WHERE release = 'pause@1'`);
      expect(now).toEqual(at);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(at.pending).toBeGreaterThan(0);
    expect((await cli('resume', 'pause@1')).code).toBe(0);
    await waitFor('pause@1 BUILT', async () => (await state('pause@1')) === 'BUILT');
    w.kill('SIGTERM');
    await exited(w);
    await assertBuiltOnce('pause@1', 'orders_pause');
  });

  it('stops a cancelled release for good', async () => {
    await release('cancel@1', 'orders_cancel');
    expect((await cli('plan', 'cancel@1')).code).toBe(0);
    expect((await cli('pause', 'cancel@1')).code).toBe(0);
    const w = worker();
    expect((await cli('cancel', 'cancel@1')).code).toBe(0);
    const before = await one(`SELECT sum(attempt)::int AS a FROM genfill.partitions WHERE release = 'cancel@1'`);
    expect((await cli('resume', 'cancel@1')).code).not.toBe(1);
    const watchUntil = Date.now() + 2_000;
    while (Date.now() < watchUntil) {
      expect(await one(`SELECT sum(attempt)::int AS a FROM genfill.partitions WHERE release = 'cancel@1'`)).toEqual(before);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(await state('cancel@1')).toBe('CANCELLED');
    w.kill('SIGTERM');
    await exited(w);
  });

  it('re-enqueues partitions that failed for good once plan runs after the cause is fixed', async () => {
    await release('retry@1', 'orders_retry', 5);
    expect((await cli('plan', 'retry@1')).code).toBe(0);
    await db.pool.query(`UPDATE public.tax_rates SET rate = 0.5 WHERE region = 'south'`);
    const w = worker();
    try {
      await waitFor('every partition FAILED', async () =>
        (await one(`SELECT count(*) FILTER (WHERE status = 'FAILED')::int AS n FROM genfill.partitions WHERE release = 'retry@1'`)).n === 5,
      );
      const failed = await one(`SELECT min(reason) AS r FROM genfill.partitions WHERE release = 'retry@1'`);
      expect(failed.r).toBe('DEPENDENCY_CHANGED');
      const st = JSON.parse((await cli('status', 'retry@1', '--json', '--partitions')).stdout);
      expect(st.partitions[0]).toMatchObject({ status: 'FAILED', reason: 'DEPENDENCY_CHANGED', receipt: null });
      expect(st.partitions[0].evidence.changed[0].relation).toBe('public.tax_rates');
    } finally {
      await db.pool.query(`UPDATE public.tax_rates SET rate = 0.07 WHERE region = 'south'`);
    }
    const plan = await cli('plan', 'retry@1', '--json');
    expect(plan.code).toBe(0);
    await waitFor('retry@1 BUILT', async () => (await state('retry@1')) === 'BUILT');
    w.kill('SIGTERM');
    await exited(w);
    await assertBuiltOnce('retry@1', 'orders_retry');
    const epochs = await one(`SELECT min(enqueue_epoch)::int AS e FROM genfill.partitions WHERE release = 'retry@1'`);
    expect(epochs.e).toBe(1);
  });

  it('a worker stopped right after taking the release row lock stalls nothing: pause returns within seconds, its late commit writes nothing', async () => {
    await release('stall@1', 'orders_stall', 2);
    expect((await cli('plan', 'stall@1')).code).toBe(0);
    // Hold the commit inside genfill.commit_partition (release row locked, partition fenced)
    // long enough to SIGSTOP the worker there; its session is then idle in a transaction.
    await db.pool.query(`CREATE FUNCTION public.slow_receipt() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(1.5); RETURN NEW; END $$;
      CREATE TRIGGER slow_receipt BEFORE INSERT ON genfill.receipts FOR EACH ROW WHEN (NEW.release = 'stall@1') EXECUTE FUNCTION public.slow_receipt()`);
    const w = worker('--lock-duration', '60000');
    try {
      const backend = await waitFor('the worker inside its commit', async () =>
        (await db.pool.query(`SELECT pid FROM pg_stat_activity WHERE application_name = 'genfill-worker' AND state = 'active' AND query LIKE '%commit_partition%'`)).rows[0],
      );
      w.kill('SIGSTOP');
      const stalled = await one(`SELECT id, attempt FROM genfill.partitions WHERE release = 'stall@1' AND status = 'RUNNING' ORDER BY id LIMIT 1`);
      const started = Date.now();
      const pause = await cli('pause', 'stall@1');
      const waited = Date.now() - started;
      expect(pause.code).toBe(0);
      // idle_in_transaction_session_timeout (2 s here; 30 s by default) ended the stalled
      // session and its lock; without it pause waits for TCP keepalive (hours).
      expect(waited).toBeLessThan(30_000);
      expect((await one('SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1', [backend.pid])).n).toBe(0);
      w.kill('SIGCONT');
      const late = await one(`SELECT count(*)::int AS n FROM genfill.receipts WHERE release = 'stall@1' AND partition = $1 AND attempt = $2`, [stalled.id, stalled.attempt]);
      expect(late.n).toBe(0);
    } finally {
      w.kill('SIGCONT');
      w.kill('SIGTERM');
      await exited(w);
      await db.pool.query('DROP TRIGGER slow_receipt ON genfill.receipts; DROP FUNCTION public.slow_receipt()');
    }
  });
});
