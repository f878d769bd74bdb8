// Every service is started the same way (@genfill/service): each apps/<role>/src/main.ts,
// spawned as the node process itself, answers /healthz and /readyz on its metrics port and
// exits 0 on SIGTERM; a worker SIGTERMed mid-build finishes that partition first and claims
// nothing more; the same definitions serve the CLI's verbs.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { planner } from '@genfill/planner-service';
import { worker } from '@genfill/worker-service';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, dailyRelease, seedOrders, workspace, writeRelease } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';
import { exited, waitFor } from './support/wait.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const db = await createTestDatabase('service_mains');
const queues = createTestQueues('service-mains');
const env = { DATABASE_URL: db.url, REDIS_URL, GENFILL_QUEUE_PREFIX: queues.prefix, GENFILL_LOG_LEVEL: 'info' };
const cli = (...args: string[]) => runCli(args, env);
const children = new Set<ChildProcess>();

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

interface Main {
  child: ChildProcess;
  port: number;
  stderr: () => string;
  get(path: string): Promise<{ status: number; body: any }>;
}

/** `node --import tsx apps/<role>/src/main.ts …`: the service's own entry point, no CLI, no shell. */
async function main(role: string, args: string[] = [], extra: Record<string, string> = {}): Promise<Main> {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', `apps/${role}/src/main.ts`, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env, GENFILL_METRICS_PORT: String(port), ...extra },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr!.on('data', (b: Buffer) => (err += b.toString()));
  children.add(child);
  child.on('exit', () => children.delete(child));
  const get = async (path: string) => {
    const res = await fetch(`http://127.0.0.1:${port}${path}`);
    const text = await res.text();
    return { status: res.status, body: res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text) : text };
  };
  return { child, port, stderr: () => err, get };
}

const ready = (m: Main) => waitFor(`${m.child.pid} ready`, async () => (await m.get('/readyz').catch(() => null))?.status === 200, 45_000);
const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
  await seedOrders(db.pool, { perDay: 50, days: 4 });
});
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(queues);
});
afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
});

describe('each app’s main', { timeout: 120_000 }, () => {
  it('planner, reconciler and api answer /healthz and /readyz (database, schema, Redis) on the metrics port and exit 0 on SIGTERM', async () => {
    const apiPort = await freePort();
    const mains = await Promise.all([
      main('planner', ['--interval', '3600']),
      main('reconciler', ['--interval', '3600']),
      main('api', ['--port', String(apiPort)]),
    ]);
    await Promise.all(mains.map(ready));
    for (const m of mains) {
      expect((await m.get('/healthz')).status).toBe(200);
      const r = await m.get('/readyz');
      expect(r.body).toMatchObject({ status: 'ready', failed: [], checks: { postgres: { ok: true }, schema: { ok: true }, redis: { ok: true } } });
      expect(await m.get('/metrics')).toMatchObject({ status: 200, body: expect.stringMatching(/^genfill_process_cpu_seconds_total\{service="(planner|reconciler|api)"\}/m) });
    }
    // The API's own port answers too, beside its metrics port.
    expect((await fetch(`http://127.0.0.1:${apiPort}/healthz`)).status).toBe(200);
    for (const m of mains) m.child.kill('SIGTERM');
    expect(await Promise.all(mains.map((m) => exited(m.child)))).toEqual([0, 0, 0]);
    for (const m of mains) expect(m.stderr()).toMatch(/"signal":"SIGTERM".*"msg":"stopping: no new work; the work in flight finishes"/);
  });

  it('a worker SIGTERMed mid-build turns /readyz 503 (draining), finishes that partition, claims no other and exits 0', async () => {
    const release = 'drain@1';
    expect((await cli('release', 'submit', writeRelease(workspace(), dailyRelease(release, 'orders_drain', 4)))).code).toBe(0);
    expect((await cli('plan', release)).code).toBe(0);
    // Hold each commit for a moment inside genfill.commit_partition: the SIGTERM lands there.
    await db.pool.query(`CREATE FUNCTION public.slow_receipt() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(2); RETURN NEW; END $$;
      CREATE TRIGGER slow_receipt BEFORE INSERT ON genfill.receipts FOR EACH ROW EXECUTE FUNCTION public.slow_receipt()`);
    try {
      const w = await main('worker', ['--no-throttle', '--release', release]);
      await waitFor('the worker inside its first commit', async () =>
        (await db.pool.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = 'genfill-worker' AND state = 'active' AND query LIKE '%commit_partition%'`)).rowCount === 1,
      60_000);
      const running = await one(`SELECT id, attempt FROM genfill.partitions WHERE release = $1 AND status = 'RUNNING'`, [release]);
      expect(running).toMatchObject({ attempt: 1 });
      w.child.kill('SIGTERM');
      const draining = await waitFor('/readyz 503 while draining', async () => {
        const r = await w.get('/readyz');
        return r.status === 503 && r;
      }, 10_000);
      expect(draining.body).toMatchObject({ status: 'unavailable', reason: 'draining' });
      // Alive while it drains: a liveness probe must not restart it.
      expect((await w.get('/healthz')).status).toBe(200);
      expect(await exited(w.child)).toBe(0);
      const after = await db.pool.query(`SELECT id, status, attempt FROM genfill.partitions WHERE release = $1 ORDER BY seq`, [release]);
      const byId = Object.fromEntries(after.rows.map((r) => [r.id, r]));
      expect(byId[running.id]).toMatchObject({ status: 'BUILT', attempt: 1 });
      expect(await one(`SELECT count(*)::int AS n FROM genfill.receipts WHERE release = $1 AND partition = $2 AND attempt = 1`, [release, running.id])).toEqual({ n: 1 });
      // Nothing else was claimed after the signal: every other partition is still PENDING.
      expect(after.rows.filter((r) => r.id !== running.id).map((r) => [r.status, r.attempt])).toEqual([['PENDING', 0], ['PENDING', 0], ['PENDING', 0]]);
      expect(w.stderr()).toMatch(/"msg":"worker stopped"/);
    } finally {
      await db.pool.query('DROP TRIGGER slow_receipt ON genfill.receipts; DROP FUNCTION public.slow_receipt()');
    }
  });

  it('refuses a bad flag or a malformed environment with exit 2 before connecting, and prints its flags on --help', async () => {
    const nowhere = { DATABASE_URL: 'postgres://nobody@127.0.0.1:9/none', REDIS_URL: 'redis://127.0.0.1:9' };
    expect(await worker.main(['--concurrency', '0'], { env: nowhere })).toBe(2);
    expect(await worker.main(['--bogus'], { env: nowhere })).toBe(2);
    expect(await planner.main([], { env: { ...nowhere, GENFILL_METRICS_PORT: 'abc' } })).toBe(2);
    const help = await cli('worker', '--help');
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^Usage: genfill worker \[options\]/);
    for (const f of ['--concurrency <n>', '--lock-duration <duration>', '--release <ids>', '--throttle-interval <duration>', '--no-throttle']) expect(help.stdout).toContain(f);
    const bad = await runCli(['planner', '--interval', 'soon'], nowhere);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--interval: must be a duration: .*; got 'soon'/);
  });

  it('reports Redis unreachable on /readyz while the service keeps running, and stops on its abort signal', async () => {
    const port = await freePort();
    const stop = new AbortController();
    const running = planner.serve(['--interval', '3600'], { env: { ...env, REDIS_URL: 'redis://127.0.0.1:1', GENFILL_METRICS_PORT: String(port), GENFILL_LOG_LEVEL: 'silent' }, signal: stop.signal });
    try {
      const r = await waitFor('/readyz', async () => {
        const res = await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => null);
        return res && res.status === 503 && ((await res.json()) as any);
      }, 30_000, { ignoreErrors: true });
      expect(r).toMatchObject({ status: 'unavailable', failed: ['redis'], checks: { postgres: { ok: true }, schema: { ok: true }, redis: { ok: false } } });
      expect(r.reason).toBeUndefined();
    } finally {
      stop.abort();
      await running;
    }
  });
});
