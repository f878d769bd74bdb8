// `genfill reconciler`, the reconciler service verb, spawned as the genfill node process
// itself (never through npx or a shell, so the signal reaches the real process): it
// reconciles every BUILT release, stores verdicts and findings in the registry and writes
// no file where it runs; `--once` is one round, SIGTERM stops it with exit 0.
import { readdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createPool } from '@genfill/registry';
import { builtRelease, candidate, plannedRelease, runGenfill, seedAdopted, spawnGenfill, type Spawned } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { workspace } from './support/fixtures.ts';
import { waitFor } from './support/wait.ts';

const tdb = await createTestDatabase('reconciler');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'reconciler-test', 4);
const env = { DATABASE_URL: tdb.url };
const FROM = '2025-07-02T00:00:00Z';
const TO = '2025-07-04T00:00:00Z';
const running = new Set<Spawned>();

const state = async (id: string) => (await db.query(`SELECT state FROM genfill.releases WHERE id = $1`, [id])).rows[0].state as string;
const latest = async (id: string) =>
  (await db.query(
    `SELECT r.id::text, r.state, r.findings_count::int AS n, r.findings_path,
            (SELECT count(*)::int FROM genfill.reconciliation_findings f WHERE f.reconciliation_id = r.id) AS stored
       FROM genfill.reconciliations r WHERE r.release = $1 ORDER BY r.id DESC LIMIT 1`,
    [id],
  )).rows[0];

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: '2025-07-01T00:00:00Z', days: 5, perDay: 240 });
});
beforeEach(() => keepOnFailure(tdb));
afterAll(async () => {
  for (const s of running) s.child.kill('SIGKILL');
  await db.end();
});

describe('genfill reconciler --once', () => {
  it('reconciles each BUILT release once, stores the findings in the registry, writes no file and exits 0', async () => {
    await builtRelease(db, { id: 'clean@1', generation: 'g3', from: FROM, to: TO });
    await builtRelease(db, { id: 'damaged@1', generation: 'g4', from: FROM, to: TO });
    await plannedRelease(db, { id: 'pinned@1', generation: 'g5', from: FROM, to: TO });
    await db.query(`DELETE FROM ${candidate('g4')} WHERE order_id = 300`);
    const cwd = workspace();

    const res = await runGenfill(['reconciler', '--once'], { cwd, env });
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/reconciler round at .*: 2 BUILT releases/);
    expect(res.stdout).toMatch(/clean@1 {2}BUILT → RECONCILED: reconciliation #\d+, 0 findings/);
    expect(res.stdout).toMatch(/damaged@1 {2}BUILT → RECONCILIATION_REQUIRED: reconciliation #\d+, \d+ findings/);
    expect(await state('clean@1')).toBe('RECONCILED');
    expect(await state('damaged@1')).toBe('RECONCILIATION_REQUIRED');
    expect(await state('pinned@1')).toBe('SNAPSHOT_PINNED');
    expect(readdirSync(cwd)).toEqual([]);

    // The service's findings are in the registry: any machine repairs from them.
    const rec = await latest('damaged@1');
    expect(rec).toMatchObject({ state: 'RECONCILIATION_REQUIRED', findings_path: null, stored: rec.n });
    expect(rec.n).toBeGreaterThan(0);
    const repaired = await runCli(['repair', 'damaged@1', '--reconciliation', rec.id, '--json'], env);
    expect(repaired.code).toBe(0);
    expect(JSON.parse(repaired.stdout).repaired.map((p: { partition: string }) => p.partition)).toEqual(['b-20250702T000000Z']);

    const again = await runGenfill(['reconciler', '--once', '--json'], { cwd, env });
    expect(again.code).toBe(0);
    const round = JSON.parse(again.stdout);
    expect(round.reconciled.map((r: { release: string; state: string }) => [r.release, r.state])).toEqual([['damaged@1', 'RECONCILED']]);
    expect(round.failed).toEqual([]);
    expect(await state('damaged@1')).toBe('RECONCILED');
    expect(readdirSync(cwd)).toEqual([]);
  });
});

describe('genfill reconciler (running)', () => {
  it('reconciles a release that becomes BUILT while it runs, and exits 0 on SIGTERM without waiting for the next round', async () => {
    const service = spawnGenfill(['reconciler', '--interval', '0.5'], { cwd: workspace(), env });
    running.add(service);
    await waitFor('the reconciler to start', async () => service.stderr().includes('"reconciler started"'), 30_000);
    await builtRelease(db, { id: 'later@1', generation: 'g6', from: FROM, to: TO });
    await waitFor('later@1 to be reconciled', async () => (await state('later@1')) === 'RECONCILED', 30_000);
    expect(service.child.exitCode).toBeNull();

    service.child.kill('SIGTERM');
    const code = await Promise.race([service.exit, new Promise<'hung'>((r) => setTimeout(() => r('hung'), 15_000))]);
    expect(code).toBe(0);
    running.delete(service);
    expect(service.stderr()).toMatch(/"signal":"SIGTERM"/);
    expect(service.stderr()).toMatch(/"reconciler stopped"/);
  });

  it('serves /metrics on GENFILL_METRICS_PORT and exits 0 on SIGTERM during a long interval', async () => {
    const port = await freePort();
    const service = spawnGenfill(['reconciler', '--interval', '3600'], { cwd: workspace(), env: { ...env, GENFILL_METRICS_PORT: String(port) } });
    running.add(service);
    await waitFor('the reconciler to start', async () => service.stderr().includes(`"metricsPort":${port},"msg":"serving /metrics, /healthz and /readyz"`) && service.stderr().includes('"reconciler started"'), 30_000);
    const metrics = await fetch(`http://127.0.0.1:${port}/metrics`);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toMatch(/genfill_process_cpu_seconds_total\{service="reconciler"\}/);
    service.child.kill('SIGTERM');
    // An hour to the next round: only the signal ends the wait.
    const code = await Promise.race([service.exit, new Promise<'hung'>((r) => setTimeout(() => r('hung'), 15_000))]);
    expect(code).toBe(0);
    running.delete(service);
    expect(service.stderr()).toMatch(/"reconciler stopped"/);
  });
});
