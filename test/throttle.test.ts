// The throttle against a real streaming replica, real Redis and real worker processes (SPEC
// invariant 14): replica lag and a slow foreground make the controller back off and pause;
// health brings the pace back; the operator's pause is never the controller's to clear.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, dailyRelease, seedOrders, workspace, writeRelease } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';
import { startReplica, type Replica } from './support/replica.ts';
import { waitFor as waitUntil } from './support/wait.ts';

const BIN = fileURLToPath(new URL('../apps/cli/bin/genfill.js', import.meta.url));
const db = await createTestDatabase('throttle');
const queues = createTestQueues('throttle');
const env = { DATABASE_URL: db.url, REDIS_URL, GENFILL_QUEUE_PREFIX: queues.prefix, GENFILL_LOG_LEVEL: 'warn' };
const cli = (...args: string[]) => runCli(args, env);
const children = new Set<ChildProcess>();
const INTERVAL_MS = 250;
let replica: Replica | undefined;

function worker(release: string, extraEnv: Record<string, string> = {}): ChildProcess {
  const child = spawn(
    process.execPath,
    [BIN, 'worker', '--release', release, '--concurrency', '4', '--lock-duration', '5000', '--throttle-interval', String(INTERVAL_MS)],
    { env: { ...process.env, ...env, ...extraEnv }, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  child.stderr!.on('data', () => undefined);
  children.add(child);
  child.on('exit', () => children.delete(child));
  return child;
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}

const waitFor = <T>(what: string, probe: () => Promise<T | undefined | null | false>, timeoutMs = 30_000) => waitUntil(what, probe, timeoutMs);

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
const flags = (release: string) => one('SELECT state, operator_paused, throttle_paused FROM genfill.releases WHERE id = $1', [release]);
const latest = (release: string) => one('SELECT * FROM genfill.throttle_decisions WHERE release = $1 ORDER BY id DESC LIMIT 1', [release]);
const decisionAfter = (release: string, id: number, where: string) =>
  one(`SELECT * FROM genfill.throttle_decisions WHERE release = $1 AND id > $2 AND ${where} ORDER BY id LIMIT 1`, [release, id]);
const activity = (release: string) =>
  one(
    `SELECT (SELECT sum(attempt) FROM genfill.partitions WHERE release = $1)::int AS attempts,
            (SELECT count(*) FROM genfill.receipts WHERE release = $1)::int AS receipts`,
    [release],
  );

async function release(id: string, dataset: string, budget: Record<string, number>, days = 120): Promise<void> {
  expect((await cli('release', 'submit', writeRelease(workspace(), dailyRelease(id, dataset, days, { budget })))).code).toBe(0);
  expect((await cli('plan', id)).code).toBe(0);
}

beforeAll(async () => {
  replica = await startReplica();
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
  // 120 days of orders, 2,000 a day: a build that lasts while the budget holds it back.
  await seedOrders(db.pool, { perDay: 2000, days: 120 });
  // The canary of the second test reads its delay from here, so the test sets the foreground's latency.
  await db.pool.query(`CREATE TABLE public.canary_delay (s double precision NOT NULL); INSERT INTO public.canary_delay VALUES (0.2)`);
  // pg_basebackup copies the whole cluster: allow it more than the default hook timeout.
}, 120_000);
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(queues);
});
afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  replica?.stop();
});

describe('throttle', () => {
  it('steps the rate down and then stops claims while replay is frozen on a replica, and climbs back once it resumes', async () => {
    // 240,000 rows at a 20,000 rows/s cap: the admission rate, not the database, paces this build.
    await release('lag@1', 'orders_lag', { workers: 4, maxRowsPerSecond: 20000, replicaLagSeconds: 1, foregroundP95Ms: 1000 });
    const w = worker('lag@1', { GENFILL_REPLICA_URLS: replica!.url(db.name) });
    const full = await waitFor('the controller at the rate cap', async () => {
      const d = await latest('lag@1');
      return d && d.rows_per_second === 20000 && d;
    });
    expect(full.ratio ?? 0).toBeLessThan(0.8);

    await replica!.pauseReplay();
    const down = await waitFor('a decrease bound by replica lag', () => decisionAfter('lag@1', full.id, `action = 'decrease' AND binding = 'replica_lag'`));
    expect(down.rows_per_second).toBeLessThan(20000);
    expect(down.concurrency).toBeLessThanOrEqual(full.concurrency);
    expect(down.signals.replica_lag.value).toBeGreaterThan(1);
    await waitFor('throttle_paused', async () => (await flags('lag@1')).throttle_paused);
    expect((await flags('lag@1')).operator_paused).toBe(false);
    await waitFor('in-flight builds to finish', async () =>
      (await one(`SELECT count(*)::int AS n FROM genfill.partitions WHERE release = 'lag@1' AND status = 'RUNNING'`)).n === 0,
    );
    // No claim while paused: watch three more decisions go by with nothing started.
    const before = await activity('lag@1');
    const mark = (await latest('lag@1')).id;
    await waitFor('three more decisions', async () => (await one(`SELECT count(*)::int AS n FROM genfill.throttle_decisions WHERE release = 'lag@1' AND id > $1`, [mark])).n >= 3);
    expect(await activity('lag@1')).toEqual(before);
    expect(before.receipts).toBeLessThan(120);
    // --watch draws the throttle and its binding signal beside the progress.
    const watching = cli('status', 'lag@1', '--watch', '--interval', '0.1');
    await waitFor('two more decisions while watching', () => decisionAfter('lag@1', Number(mark) + 4, 'true'));

    await replica!.resumeReplay();
    const resumed = await waitFor('a resume', () => decisionAfter('lag@1', mark, `action = 'resume'`));
    expect((await flags('lag@1')).throttle_paused).toBe(false);
    await waitFor('the rate climbing back', () => decisionAfter('lag@1', resumed.id, `action = 'increase' AND rows_per_second > ${Number(resumed.rows_per_second)}`));
    await waitFor('new receipts after the resume', async () => (await activity('lag@1')).receipts > before.receipts);
    const status = await cli('status', 'lag@1');
    expect(status.stdout).toMatch(/throttle\s+concurrency \d, [\d,]+ rows\/s \([\d,]+\/worker × \d+\); binding \w+/);
    const json = JSON.parse((await cli('status', 'lag@1', '--json')).stdout);
    expect(json.throttle).toMatchObject({ concurrency: expect.any(Number), binding: expect.any(String), throttlePaused: false });
    // The watch started while paused ends when the release leaves BUILDING (built, or cancelled here).
    if ((await flags('lag@1')).state === 'BUILDING') expect((await cli('cancel', 'lag@1')).code).toBe(0);
    const watched = await watching;
    expect(watched.code).toBe(0);
    expect(watched.stdout).toMatch(/BUILDING: .* rows\/s; ETA .*; throttle concurrency \d, [\d,]+ rows\/s .*binding \w+/);
    await stop(w);
  });

  it('backs off from a slow foreground canary and never clears the operator pause', async () => {
    await release('canary@1', 'orders_canary', { workers: 4, maxRowsPerSecond: 20000, replicaLagSeconds: 60, foregroundP95Ms: 25 }, 30);
    expect((await cli('pause', 'canary@1')).code).toBe(0);
    const w = worker('canary@1', { GENFILL_CANARY_SQL: 'SELECT pg_sleep((SELECT s FROM public.canary_delay))' });
    const slow = await waitFor('a back-off bound by the canary', async () =>
      one(`SELECT * FROM genfill.throttle_decisions WHERE release = 'canary@1' AND action IN ('decrease', 'pause') AND binding = 'foreground_p95' ORDER BY id LIMIT 1`),
    );
    expect(slow.signals.foreground_p95.value).toBeGreaterThan(25);
    await waitFor('throttle_paused', async () => (await flags('canary@1')).throttle_paused);

    await db.pool.query('UPDATE public.canary_delay SET s = 0');
    await waitFor('the controller resuming', () => decisionAfter('canary@1', slow.id, `action = 'resume'`));
    await waitFor('throttle_paused cleared', async () => !(await flags('canary@1')).throttle_paused);
    const f = await flags('canary@1');
    expect(f.operator_paused).toBe(true);
    expect(await activity('canary@1')).toEqual({ attempts: 0, receipts: 0 });
    const log = await db.pool.query(`SELECT action FROM genfill.release_log WHERE release = 'canary@1' ORDER BY id`);
    expect(log.rows.map((r) => r.action).filter((a: string) => a === 'pause' || a === 'resume')).toEqual(['pause']);
    await stop(w);
  });
});
