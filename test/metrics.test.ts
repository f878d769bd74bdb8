// Each service's /metrics (SPEC "Parts": workers, planner, api) parses and passes
// `promtool check metrics`, and its counters say what happened: a worker's after it built a
// release, the planner's after a round, the api's queue gauges from Redis and the registry.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApi } from '@genfill/api';
import { startWorkerService } from '@genfill/builder';
import { loadConfig } from '@genfill/contracts';
import { createLogger, createMetricsRegistry, serveMetrics, workerMetrics } from '@genfill/observability';
import { planner } from '@genfill/planner-service';
import { createRedis } from '@genfill/queue';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, dailyRelease, seedOrders, workspace, writeRelease } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';
import { waitFor as waitUntil } from './support/wait.ts';

const BIN = fileURLToPath(new URL('../apps/cli/bin/genfill.js', import.meta.url));
const db = await createTestDatabase('metrics');
const q = createTestQueues('metrics');
const env = { DATABASE_URL: db.url, REDIS_URL, GENFILL_QUEUE_PREFIX: q.prefix, GENFILL_LOG_LEVEL: 'silent' };
const cli = (...args: string[]) => runCli(args, env);
const silent = createLogger('test', 'silent');
const children = new Set<ChildProcess>();
const cleanups: (() => Promise<unknown>)[] = [];

/** `promtool check metrics` on the text; a missing promtool fails the test, never skips it. */
function promtool(text: string): void {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if ((r.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    throw new Error(
      'promtool is not installed: install the Debian package `prometheus` ' +
        '(apt-get update && apt-get install -y --no-install-recommends prometheus); .ci/run does this when promtool is missing',
    );
  }
  if (r.error) throw r.error;
  expect({ status: r.status, problems: `${r.stdout}${r.stderr}`.trim() }).toEqual({ status: 0, problems: '' });
}

async function scrape(url: string): Promise<string> {
  const res = await fetch(url);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return res.text();
}

function parseSeries(series: string): { name: string; labels: string } | null {
  const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$/.exec(series);
  if (!m) return null;
  const labels = [...(m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((l) => `${l[1]}=${l[2]}`);
  return { name: m[1]!, labels: labels.sort().join(',') };
}

/** The value of one sample, e.g. value(text, 'genfill_rows_written_total{release="r@1",service="worker"}'); label order does not matter. */
function value(text: string, series: string): number | undefined {
  const want = parseSeries(series)!;
  for (const line of text.split('\n')) {
    const at = line.lastIndexOf(' ');
    if (line.startsWith('#') || at < 0) continue;
    const got = parseSeries(line.slice(0, at));
    if (got && got.name === want.name && got.labels === want.labels) return Number(line.slice(at + 1));
  }
  return undefined;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

const waitFor = <T>(what: string, probe: () => Promise<T | undefined | null | false>, timeoutMs = 60_000) => waitUntil(what, probe, timeoutMs, { ignoreErrors: true });

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];

async function release(id: string, dataset: string, days: number): Promise<void> {
  expect((await cli('release', 'submit', writeRelease(workspace(), dailyRelease(id, dataset, days)))).code).toBe(0);
}

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
  await seedOrders(db.pool, { perDay: 100, days: 10 });
});
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(q);
});
afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  for (const c of cleanups.reverse()) await c();
});

describe('/metrics of each service', () => {
  it('worker: counts claims, builds, rows and build seconds per release, and passes promtool', async () => {
    await release('built@1', 'orders_built', 5);
    expect((await cli('plan', 'built@1')).code).toBe(0);
    const registry = createMetricsRegistry('worker');
    const connection = createRedis(REDIS_URL);
    const service = await startWorkerService({ db: db.pool, connection, prefix: q.prefix, log: silent, releases: ['built@1'], metrics: workerMetrics(registry) });
    const server = await serveMetrics(registry, { port: 0 });
    cleanups.push(() => server.close(), () => connection.quit(), () => service.close());
    await waitFor('built@1 BUILT', async () => (await one(`SELECT state FROM genfill.releases WHERE id = 'built@1'`)).state === 'BUILT');

    const text = await scrape(`http://127.0.0.1:${server.port}/metrics`);
    promtool(text);
    const rows = (await one(`SELECT sum(rows_out)::int AS n FROM genfill.receipts WHERE release = 'built@1'`)).n;
    expect(rows).toBeGreaterThan(0);
    const r = 'release="built@1",service="worker"';
    expect(value(text, `genfill_partitions_built_total{${r}}`)).toBe(5);
    expect(value(text, `genfill_rows_written_total{${r}}`)).toBe(rows);
    expect(value(text, `genfill_partition_build_seconds_count{${r}}`)).toBe(5);
    expect(value(text, `genfill_claims_total{release="built@1",outcome="claimed",reason="none",service="worker"}`)).toBe(5);
    expect(value(text, `genfill_build_attempts_total{release="built@1",outcome="built",service="worker"}`)).toBe(5);
    expect(text).toMatch(/^genfill_process_cpu_seconds_total\{service="worker"\} /m);
    // No partition id or key ever becomes a label.
    expect(text).not.toMatch(/partition="/);
  });

  it('worker: `genfill worker` serves /metrics on GENFILL_METRICS_PORT', async () => {
    const port = await freePort();
    const child = spawn(process.execPath, [BIN, 'worker', '--no-throttle'], { env: { ...process.env, ...env, GENFILL_METRICS_PORT: String(port) }, stdio: 'ignore' });
    children.add(child);
    // The port answers from the start (the probes need it); the worker's counters appear once it has started.
    const text = await waitFor('the worker /metrics', () =>
      fetch(`http://127.0.0.1:${port}/metrics`).then(async (r) => {
        const t = r.ok ? await r.text() : '';
        return t.includes('genfill_partitions_built_total') ? t : undefined;
      }),
    );
    promtool(text);
    expect(text).toMatch(/^# TYPE genfill_partitions_built_total counter$/m);
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    children.delete(child);
  });

  it('planner: counts rounds and enqueued jobs on GENFILL_METRICS_PORT, and passes promtool', async () => {
    await release('planned@1', 'orders_planned', 3);
    expect((await cli('plan', 'planned@1')).code).toBe(0);
    // Redis lost every key: the planner's round re-derives the three jobs from the registry.
    await q.clear();
    const port = await freePort();
    const controller = new AbortController();
    // The planner service as apps/planner runs it: @genfill/service serves its registry.
    const running = planner.serve(['--interval', '0.2'], {
      env: { ...env, GENFILL_METRICS_PORT: String(port), GENFILL_RELEASE: 'planned@1' },
      signal: controller.signal,
    });
    cleanups.push(async () => {
      controller.abort();
      await running.catch(() => undefined);
    });
    const text = await waitFor('a planner round on /metrics', async () => {
      const t = await fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text());
      return (value(t, 'genfill_planner_rounds_total{redis="true",service="planner"}') ?? 0) >= 1 ? t : undefined;
    });
    promtool(text);
    expect(value(text, 'genfill_planner_round_seconds_count{service="planner"}')).toBeGreaterThanOrEqual(1);
    expect(value(text, 'genfill_jobs_enqueued_total{release="planned@1",service="planner"}')).toBe(3);
    expect(await q.queue('planned@1').getJobCounts('waiting')).toEqual({ waiting: 3 });
    controller.abort();
    await running;
  });

  it('api: queue and release gauges per open release, HTTP counters, and passes promtool', async () => {
    await release('queued@1', 'orders_queued', 4);
    expect((await cli('plan', 'queued@1')).code).toBe(0);
    expect((await cli('pause', 'queued@1')).code).toBe(0);
    const api = await startApi({ config: loadConfig(env), log: silent, port: 0 });
    cleanups.push(() => api.close());
    expect((await fetch(`${api.url}/healthz`)).status).toBe(200);

    const text = await scrape(`${api.url}/metrics`);
    promtool(text);
    const r = 'release="queued@1"';
    expect(value(text, `genfill_queue_jobs{${r},state="waiting",service="api"}`)).toBe(4);
    expect(value(text, `genfill_queue_jobs{${r},state="active",service="api"}`)).toBe(0);
    expect(value(text, `genfill_queue_paused{${r},service="api"}`)).toBe(1);
    expect(value(text, `genfill_release_partitions{${r},status="PENDING",service="api"}`)).toBe(4);
    expect(value(text, `genfill_release_paused{${r},flag="operator",service="api"}`)).toBe(1);
    // Its deadline, for the past-deadline alert (deploy/base/alerts.yaml).
    const deadline = (await one(`SELECT extract(epoch FROM deadline)::float8 AS t FROM genfill.releases WHERE id = 'queued@1'`)).t;
    expect(value(text, `genfill_release_deadline_timestamp_seconds{${r},service="api"}`)).toBe(deadline);
    expect(value(text, 'genfill_http_requests_total{method="GET",route="/healthz",status="200",service="api"}')).toBe(1);
    // Workers do not report queue gauges: N replicas would report the same queue N times.
    expect(text).toMatch(/^# TYPE genfill_queue_jobs gauge$/m);
  });

  it('api: a Redis that does not answer leaves the queue gauges out and counts it, /metrics still answers', async () => {
    const api = await startApi({ config: loadConfig({ ...env, REDIS_URL: 'redis://127.0.0.1:1' }), log: silent, port: 0 });
    cleanups.push(() => api.close());
    const text = await scrape(`${api.url}/metrics`);
    promtool(text);
    expect(value(text, 'genfill_metrics_collect_failures_total{source="redis",service="api"}')).toBe(1);
    expect(text).not.toMatch(/^genfill_queue_jobs\{/m);
    expect(value(text, 'genfill_release_partitions{release="queued@1",status="PENDING",service="api"}')).toBe(4);
  });
});
