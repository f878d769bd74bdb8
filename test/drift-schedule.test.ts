// The drift check runs by itself (issue 29; SPEC "Drift check"): the reconciler service, the
// genfill binary under a plain genfill_service login, checks every live dataset against the
// transform map of its source every GENFILL_DRIFT_CHECK_EVERY and records each verdict in
// genfill.drift_checks. A clean adopted dataset records 0 drifted rows; a row changed by hand in
// the live generation is found and its key named — in the verdict, in genfill_dataset_drift_rows
// and in `status --dataset`. And a cutover's new generation is checked at once: with the
// schedule at an hour, the verdict on the new generation arrives while the test runs.
// No sleeps: every wait is on a recorded verdict (the test runner's timeout is the only clock).
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApi } from '@genfill/api';
import { loadConfig } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { projectDataset } from '@genfill/projector';
import { createPool, type Db } from '@genfill/registry';
import { cutoverRelease } from '@genfill/switch';
import { builtRelease, candidate, seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';
import { exited, waitFor } from './support/wait.ts';

const BIN = fileURLToPath(new URL('../apps/cli/bin/genfill.js', import.meta.url));
const tdb = await createTestDatabase('drift_schedule');
const queues = createTestQueues('drift-schedule');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'drift-schedule-test', 4);
const log = createLogger('drift-schedule-test', 'silent');
const DS = 'orders_enriched';
const FROM = '2025-07-01T00:00:00Z';
const SVC = 'genfill_k4_svc';
const API = 'genfill_k4_api';
const READER = 'genfill_k4_reader';
const VIEWER = 'viewer-token-drift-0123456789';
const FOREVER = Number.POSITIVE_INFINITY;
let bob: Db;

interface Verdict {
  id: number;
  generation: string;
  reason: string;
  rows_checked: number;
  missing_rows: number;
  extra_rows: number;
  drifted_rows: number;
  drifted_keys: number;
  key_sample: Record<string, unknown>[];
  principal: string;
}
const verdicts = async (): Promise<Verdict[]> =>
  (
    await tdb.pool.query<Verdict>(
      `SELECT id::int, generation, reason, rows_checked::int, missing_rows::int, extra_rows::int, drifted_rows::int, drifted_keys::int, key_sample, principal
         FROM genfill.drift_checks WHERE dataset = $1 ORDER BY id`,
      [DS],
    )
  ).rows;
/** The first verdict after `after` (an id) that satisfies `ok`. */
const verdictAfter = (what: string, after: number, ok: (v: Verdict) => boolean) =>
  waitFor(what, async () => (await verdicts()).find((v) => v.id > after && ok(v)), FOREVER);

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const { port } = s.address() as { port: number };
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

const env = (extra: Record<string, string> = {}) => ({
  DATABASE_URL: urlAs(tdb, SVC),
  REDIS_URL,
  GENFILL_QUEUE_PREFIX: queues.prefix,
  GENFILL_LOG_LEVEL: 'warn',
  ...extra,
});
const children: { child: ChildProcess; err: string }[] = [];
/** `genfill reconciler` as the plain service login; stderr is kept for the failure message. */
function reconciler(every: string, metricsPort: number): { child: ChildProcess; err: () => string } {
  const child = spawn(process.execPath, [BIN, 'reconciler', '--interval', '1s'], {
    env: { ...process.env, ...env({ GENFILL_DRIFT_CHECK_EVERY: every, GENFILL_METRICS_PORT: String(metricsPort) }) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const info = { child, err: '' };
  child.stderr!.on('data', (d) => (info.err = (info.err + String(d)).slice(-8000)));
  children.push(info);
  return { child, err: () => info.err };
}
async function stop(child: ChildProcess): Promise<void> {
  child.kill('SIGTERM');
  expect(await exited(child)).toBe(0);
}
const driftMetric = async (port: number): Promise<string | undefined> => {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return /^genfill_dataset_drift_rows\{dataset="orders_enriched"[^}]*\} (\S+)$/m.exec(text)?.[1];
};

beforeAll(async () => {
  await seedAdopted(tdb, db, { from: FROM, days: 2, perDay: 48 });
  for (const [login, role] of [[SVC, 'genfill_service'], [API, 'genfill_api'], [READER, 'genfill_reader']]) {
    await tdb.pool.query(`DO $$ BEGIN CREATE ROLE ${login} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
    await tdb.pool.query(`GRANT ${role} TO ${login}`);
  }
  // What an install grants the fleet beside genfill's roles (README "Roles"): it reads the sources.
  await tdb.pool.query(`GRANT USAGE ON SCHEMA public TO genfill_service; GRANT SELECT ON ALL TABLES IN SCHEMA public TO genfill_service`);
  await tdb.pool.query('GRANT genfill_approver TO genfill_bob');
  bob = createPool({ DATABASE_URL: urlAs(tdb, 'genfill_bob') } as never, 'bob', 2);
});
beforeEach(() => {
  keepOnFailure(tdb);
  keepQueuesOnFailure(queues);
});
afterAll(async () => {
  for (const c of children) c.child.kill('SIGKILL');
  await bob.end();
  await db.end();
});

describe('the scheduled drift check', { timeout: 240_000 }, () => {
  it('records 0 drifted rows for a clean adopted dataset, then names the key of a row changed by hand in the live generation — in its verdict, the metric, status --dataset and the status page', async () => {
    const port = await freePort();
    const svc = reconciler('1s', port);

    const clean = await verdictAfter('a first verdict', 0, () => true);
    expect(clean).toMatchObject({ generation: 'g2', reason: 'schedule', rows_checked: 96, drifted_rows: 0, drifted_keys: 0, key_sample: [], principal: SVC });
    expect(await waitFor('the metric at 0', async () => (await driftMetric(port)) === '0', FOREVER, { ignoreErrors: true })).toBe(true);

    // By hand, as the superuser, in the live generation: one row's tax.
    await tdb.pool.query(`UPDATE ${candidate('g2')} SET tax_cents = tax_cents + 1 WHERE order_id = 7`);
    const drifted = await verdictAfter('a verdict naming order 7', clean.id, (v) => v.drifted_rows > 0);
    // The row the transform gives is missing and the stored one is extra: one key, two rows.
    expect(drifted).toMatchObject({ generation: 'g2', reason: 'schedule', rows_checked: 96, missing_rows: 1, extra_rows: 1, drifted_rows: 2, drifted_keys: 1, key_sample: [{ order_id: 7 }] });
    expect(await waitFor('the metric at 2', async () => (await driftMetric(port)) === '2', FOREVER, { ignoreErrors: true })).toBe(true);

    // A person reads it: a plain genfill_reader login.
    const asReader = { ...env(), DATABASE_URL: urlAs(tdb, READER) };
    const status = await runCli(['status', '--dataset', DS], asReader);
    expect({ code: status.code, stderr: status.stderr }).toEqual({ code: 0, stderr: '' });
    expect(status.stdout).toMatch(/drift check #\d+ of g2 at .* \(schedule\): DRIFTED: 2 rows \(1 missing or different, 1 extra\), 1 keys/);
    expect(status.stdout).toContain('drifted key {"order_id":7}');
    const json = JSON.parse((await runCli(['status', '--dataset', DS, '--json'], asReader)).stdout);
    expect(json.lastDriftCheck).toMatchObject({ generation: 'g2', current: true, driftedRows: 2, driftedKeys: 1, keySample: [{ order_id: 7 }] });
    // The status page, served by the API under its own plain login, to a viewer.
    const api = await startApi({
      config: loadConfig({ DATABASE_URL: urlAs(tdb, API), REDIS_URL, GENFILL_QUEUE_PREFIX: queues.prefix, GENFILL_API_TOKENS: `vic:viewer:${VIEWER}` }),
      log: createLogger('api', 'silent'),
      port: 0,
    });
    try {
      const page = await (await fetch(`${api.url}/`, { headers: { accept: 'text/html', authorization: `Bearer ${VIEWER}` } })).text();
      const row = /<tr data-dataset="orders_enriched">.*?<\/tr>/s.exec(page)?.[0] ?? page;
      expect(row).toMatch(/<td class="drift"><span class="bad">DRIFTED: 2 rows<\/span> \(1 keys: <code>\{(&quot;|&#34;|")order_id(&quot;|&#34;|"):7\}<\/code>\)/);
    } finally {
      await api.close();
    }

    // Put back, the next verdict is clean again.
    await tdb.pool.query(`UPDATE ${candidate('g2')} SET tax_cents = tax_cents - 1 WHERE order_id = 7`);
    await verdictAfter('a clean verdict again', drifted.id, (v) => v.drifted_rows === 0);
    expect(await waitFor('the metric back at 0', async () => (await driftMetric(port)) === '0', FOREVER, { ignoreErrors: true })).toBe(true);
    await stop(svc.child);
    expect(svc.err()).not.toMatch(/permission denied|42501|drift check did not complete/);
  });

  it('checks a cutover\'s new generation at once, though the schedule is an hour', async () => {
    const before = (await verdicts()).at(-1)!;
    expect(before.generation).toBe('g2');
    const svc = reconciler('1h', await freePort());
    // The release is built here; the reconciler service reconciles it (it is BUILT), bob approves.
    await builtRelease(db, { id: 'drift-cut@1', generation: 'g3', from: FROM, to: '2025-07-03T00:00:00Z' });
    const reconciled = await waitFor(
      'the service to reconcile drift-cut@1',
      async () => (await tdb.pool.query(`SELECT id::text FROM genfill.reconciliations WHERE release = 'drift-cut@1' AND state = 'RECONCILED' ORDER BY id DESC LIMIT 1`)).rows[0]?.id as string | undefined,
      FOREVER,
    );
    await bob.query('SELECT * FROM genfill.approve($1, $2)', ['drift-cut@1', reconciled]);
    await projectDataset(DS, { db, log, untilIdle: true, id: 'drift-schedule-test', leaseMs: 60_000 });
    expect((await cutoverRelease(db, 'drift-cut@1')).ok).toBe(true);

    const after = await verdictAfter('a verdict on g3', before.id, (v) => v.generation === 'g3');
    expect(after).toMatchObject({ generation: 'g3', reason: 'generation_changed', rows_checked: 96, drifted_rows: 0, key_sample: [], principal: SVC });
    // Nothing else was checked meanwhile: the hour had not passed for g2.
    expect((await verdicts()).filter((v) => v.id > before.id).map((v) => v.generation)).toEqual(['g3']);
    await stop(svc.child);
    expect(svc.err()).not.toMatch(/permission denied|42501|drift check did not complete/);
  });
});
