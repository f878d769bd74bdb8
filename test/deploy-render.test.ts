// `genfill deploy render <release>` against a real registry, and the query KEDA's PostgreSQL
// scaler runs for the workers: it counts the partitions that still need a worker, drops to
// zero when the release is operator-paused, cancelled or BUILT, and never looks at
// throttle_paused (the controller that clears it runs inside the workers).
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { startWorkerService } from '@genfill/builder';
import { claimablePartitionsQuery, releaseWorkers } from '@genfill/kubernetes';
import { createLogger } from '@genfill/observability';
import { createRedis } from '@genfill/queue';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { createExampleSchema, dailyRelease, seedOrders, workspace, writeRelease } from './support/fixtures.ts';
import { build, type Obj } from './support/kustomize.ts';
import { checkInstallation, checkWorkload, validate } from './support/manifests.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';
import { waitFor } from './support/wait.ts';

const BASE = fileURLToPath(new URL('../deploy/base', import.meta.url));
const db = await createTestDatabase('deploy_render');
const queues = createTestQueues('deploy-render');
const env = { DATABASE_URL: db.url, REDIS_URL, GENFILL_QUEUE_PREFIX: queues.prefix, GENFILL_LOG_LEVEL: 'silent' };
const cli = (...args: string[]) => runCli(args, env);
// The scaler's own login: a member of genfill_reader, as deploy/base/scaler-auth.yaml asks.
const SCALER = `gf_scaler_${randomBytes(4).toString('hex')}`;
let scaler: pg.Client;

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
/** What KEDA sees: the query of the generic worker (no release) or of one release's workers. */
const claimable = async (release?: string) => Number((await scaler.query(claimablePartitionsQuery(release))).rows[0].count);

async function submit(id: string, dataset: string, days: number, workers = 2): Promise<void> {
  const spec = dailyRelease(id, dataset, days);
  spec.budget = { ...spec.budget, workers };
  expect((await cli('release', 'submit', writeRelease(workspace(), spec))).code).toBe(0);
}

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
  await seedOrders(db.pool, { perDay: 30, days: 4 });
  await db.pool.query(`CREATE ROLE ${SCALER} LOGIN IN ROLE genfill_reader`);
  scaler = new pg.Client({ connectionString: urlAs(db, SCALER) });
  await scaler.connect();
});
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(queues);
});
afterAll(async () => {
  await scaler?.end();
  await db.pool.query(`DROP ROLE IF EXISTS ${SCALER}`);
});

describe('genfill deploy render', () => {
  it('prints the workers of one release — GENFILL_RELEASE pinned, maxReplicaCount = budget.workers — valid against the schemas', async () => {
    await submit('render@1', 'orders_render', 3, 3);
    const res = await cli('deploy', 'render', 'render@1', '--image', 'registry.example.com/genfill:1.2.3', '--namespace', 'backfills');
    expect(res.code, res.stderr).toBe(0);
    const docs = parseAllDocuments(res.stdout).map((d) => d.toJS() as Obj);
    for (const d of docs) validate(d, 'deploy render');
    expect(docs).toEqual(releaseWorkers({ release: 'render@1', workers: 3, image: 'registry.example.com/genfill:1.2.3', namespace: 'backfills' }));
    const [deployment, scaled] = docs as [Obj, Obj];
    expect(deployment.metadata).toMatchObject({ namespace: 'backfills', annotations: { 'genfill/release': 'render@1' } });
    expect(deployment.metadata.name).toMatch(/^genfill-worker-render-1-[0-9a-f]{8}$/);
    const container = deployment.spec.template.spec.containers[0];
    expect(container.image).toBe('registry.example.com/genfill:1.2.3');
    expect(container.env).toContainEqual({ name: 'GENFILL_RELEASE', value: 'render@1' });
    checkWorkload(deployment, { GENFILL_METRICS_PORT: '9464' });
    expect(scaled.spec).toMatchObject({ scaleTargetRef: { name: deployment.metadata.name }, minReplicaCount: 0, maxReplicaCount: 3 });
    expect(scaled.spec.triggers[0].metadata.query).toBe(claimablePartitionsQuery('render@1'));

    // Beside deploy/base, only without the generic worker (components/per-release-workers).
    const base = build(BASE);
    const strip = (o: Obj) => ({ ...o, metadata: { ...o.metadata, namespace: undefined } });
    expect(() => checkInstallation([...base, ...docs.map(strip)])).toThrow(/generic worker serves every open release/);
    const generic = (o: Obj) => (o.kind === 'Deployment' || o.kind === 'ScaledObject') && o.metadata.name === 'genfill-worker';
    checkInstallation([...base.filter((o) => !generic(o)), ...docs.map(strip)].map((o) => JSON.parse(JSON.stringify(o))));
  });

  it('refuses a release it does not know (exit 3) and a namespace Kubernetes would not take (exit 2)', async () => {
    const unknown = await cli('deploy', 'render', 'nope@1');
    expect(unknown.code).toBe(3);
    expect(unknown.stderr).toMatch(/release nope@1 does not exist/);
    expect((await cli('deploy', 'render', 'render@1', '--namespace', 'Back_Fills')).code).toBe(2);
  });
});

describe('the KEDA scaler query', { timeout: 90_000 }, () => {
  it('counts pending and running partitions of BUILDING releases; zero when operator-paused, cancelled or built; blind to throttle_paused', async () => {
    await submit('scale-a@1', 'orders_scale_a', 4);
    await submit('scale-b@1', 'orders_scale_b', 2);
    // Submitted, not planned: nothing to build yet.
    expect(await claimable()).toBe(0);
    expect((await cli('plan', 'scale-a@1')).code).toBe(0);
    expect((await cli('plan', 'scale-b@1')).code).toBe(0);
    expect([await claimable(), await claimable('scale-a@1'), await claimable('scale-b@1')]).toEqual([6, 4, 2]);

    // The operator's pause: a paused release's workers go to zero, the others' stay.
    expect((await cli('pause', 'scale-a@1')).code).toBe(0);
    expect([await claimable(), await claimable('scale-a@1')]).toEqual([2, 0]);
    expect((await cli('resume', 'scale-a@1')).code).toBe(0);
    expect(await claimable('scale-a@1')).toBe(4);

    // The throttle's pause is the workers' business: scaling them to zero would strand it.
    await db.pool.query(`UPDATE genfill.releases SET throttle_paused = true WHERE id = 'scale-a@1'`);
    expect(await claimable('scale-a@1')).toBe(4);
    await db.pool.query(`UPDATE genfill.releases SET throttle_paused = false WHERE id = 'scale-a@1'`);

    // In flight still needs its worker; a final failure waits for the operator's plan.
    const [p1, p2] = (await db.pool.query(`SELECT id FROM genfill.partitions WHERE release = 'scale-b@1' ORDER BY seq`)).rows.map((r) => r.id as string);
    await db.pool.query(`UPDATE genfill.partitions SET status = 'RUNNING', attempt = 1, lease_expires_at = now() + interval '1 minute' WHERE release = 'scale-b@1' AND id = $1`, [p1]);
    expect(await claimable('scale-b@1')).toBe(2);
    await db.pool.query(`UPDATE genfill.partitions SET status = 'FAILED', reason = 'JOIN_FANOUT' WHERE release = 'scale-b@1' AND id = $1`, [p2]);
    expect(await claimable('scale-b@1')).toBe(1);
    expect((await cli('cancel', 'scale-b@1')).code).toBe(0);
    expect(await claimable('scale-b@1')).toBe(0);

    // Built: every partition has its receipt, nothing is left to claim.
    const connection = createRedis(REDIS_URL);
    const service = await startWorkerService({ db: db.pool, connection, prefix: queues.prefix, log: createLogger('worker', 'silent'), releases: ['scale-a@1'], concurrency: 2 });
    try {
      await waitFor('scale-a@1 BUILT', async () => (await one(`SELECT state FROM genfill.releases WHERE id = 'scale-a@1'`)).state === 'BUILT', 60_000);
    } finally {
      await service.close();
      await connection.quit();
    }
    expect([await claimable(), await claimable('scale-a@1')]).toEqual([0, 0]);
  });

  it('quotes the release id as a literal', () => {
    expect(claimablePartitionsQuery("it's@1")).toMatch(/AND r\.id = 'it''s@1'$/);
    expect(claimablePartitionsQuery()).not.toMatch(/AND r\.id =/);
  });
});
