// Least privilege for every service, tested (issue 28, finding 3; SPEC "Identity and roles":
// every service runs as a plain login of its role — never a superuser, never the owner — with
// one documented owner connection for retention and capture install). Plain logins made for the
// purpose: the fleet (genfill_service), the API (genfill_api), an operator and two approvers
// mapped to two persons, and the reconciler's owner connection (a member of genfill_owner, the
// only one). The planner, a worker, the projector, the reconciler and the API run as the genfill
// binary under those logins and each does its job end to end: plan → build → catch up →
// reconcile → approve (two persons: one login, one token) → a cutover request the projector
// serves switches the active pointer → the projector applies a live batch to the new
// generation → the reconciler retires the replaced generation and drops its table.
// The admin pool plays the owner for setup only: migrate, seed, adopt with capture install.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createPool } from '@genfill/registry';
import { seedAdopted } from '../packages/reconcile/test/fixtures.ts';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { exampleRelease, workspace, writeRelease } from './support/fixtures.ts';
import { burnXids, narrowLogPartitions } from './support/retention.ts';
import { login, mapPerson, token } from './support/persons.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';
import { exited, waitFor } from './support/wait.ts';

const BIN = fileURLToPath(new URL('../apps/cli/bin/genfill.js', import.meta.url));
const tdb = await createTestDatabase('trust_fleet');
const queues = createTestQueues('trust-fleet');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'trust-fleet-test', 4);
const DS = 'orders_enriched';
const FROM = '2025-07-01T00:00:00Z';
const TO = '2025-07-03T00:00:00Z';
const REL = 'fleet@1';
const APPROVER_TOKEN = 'h6-fleet-approver-token-0123456789';

/** Plain logins (cluster-wide, created idempotently), each in exactly one genfill role. */
const LOGINS = {
  genfill_h6_svc: 'genfill_service',
  genfill_h6_api: 'genfill_api',
  genfill_h6_op: 'genfill_operator',
  genfill_h6_ap1: 'genfill_approver',
  genfill_h6_own: 'genfill_owner',
} as const;
type Login = keyof typeof LOGINS;

const envAs = (who: Login, extra: Record<string, string> = {}) => ({
  DATABASE_URL: urlAs(tdb, who),
  REDIS_URL,
  GENFILL_QUEUE_PREFIX: queues.prefix,
  GENFILL_LOG_LEVEL: 'warn',
  ...extra,
});
const cliAs = (who: Login, ...args: string[]) => runCli(args, envAs(who));

const children = new Map<ChildProcess, { name: string; err: string }>();
/** A service as the genfill binary under a login; its stderr is kept for the failure message. */
function service(who: Login, extra: Record<string, string>, ...args: string[]): ChildProcess {
  const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...envAs(who, extra) }, stdio: ['ignore', 'ignore', 'pipe'] });
  const info = { name: `${args[0]} as ${who}`, err: '' };
  child.stderr!.on('data', (d) => (info.err = (info.err + String(d)).slice(-8000)));
  children.set(child, info);
  return child;
}
/** What the services wrote to stderr: a permission error in it names the grant that is missing. */
const serviceErrors = () => [...children.values()].filter((c) => c.err.trim() !== '').map((c) => `${c.name}: ${c.err}`);
const noPermissionErrors = () => expect(serviceErrors().filter((e) => /permission denied|must be owner|42501/.test(e))).toEqual([]);

const one = async <T = Record<string, unknown>>(q: string, v: unknown[] = []) => (await tdb.pool.query(q, v)).rows[0] as T;
const stateOf = async (id: string) => (await one<{ state: string }>('SELECT state FROM genfill.releases WHERE id = $1', [id])).state;
const activeOf = async () => (await one<{ a: string }>('SELECT active_generation AS a FROM genfill.datasets WHERE name = $1', [DS])).a;

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const { port } = s.address() as { port: number };
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

beforeAll(async () => {
  // Setup the owner does: migrate, the application's tables, adopt with capture install.
  await seedAdopted(tdb, db, { from: FROM, days: 2, perDay: 48 });
  for (const [name, role] of Object.entries(LOGINS)) {
    await tdb.pool.query(`DO $$ BEGIN CREATE ROLE ${name} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
    await tdb.pool.query(`GRANT ${role} TO ${name}`);
  }
  // What an install grants beside genfill's own roles (README "Roles"): the fleet reads the
  // sources, operators read them to validate a release.
  await tdb.pool.query(`GRANT USAGE ON SCHEMA public TO genfill_service, genfill_operator;
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO genfill_service, genfill_operator`);
  // The persons: the operator who submits, an approver by login, another by API token.
  await mapPerson(tdb.pool, 'h6-olive', login('genfill_h6_op'));
  await mapPerson(tdb.pool, 'h6-ada', login('genfill_h6_ap1'));
  await mapPerson(tdb.pool, 'h6-bea', token('h6-bea'));
  // Captured writes of the application, then the change log split into narrow partitions (as
  // test/prune.test.ts does): those events land in its DEFAULT partition, which the reconciler
  // prunes once the horizon passes them.
  await tdb.pool.query('UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id <= 5');
  await burnXids(tdb.pool, 1100);
  await narrowLogPartitions(tdb.pool, 1000, 80);
  expect(await one(`SELECT count(*)::int AS n FROM genfill.change_log_default`)).toEqual({ n: 5 });
});
beforeEach(() => {
  keepOnFailure(tdb);
  keepQueuesOnFailure(queues);
});
afterAll(async () => {
  for (const c of children.keys()) c.kill('SIGKILL');
  await db.end();
});

describe('every service as a plain login', { timeout: 240_000 }, () => {
  it('runs no service login as a superuser, the owner, or a member of another genfill role', async () => {
    const { rows } = await tdb.pool.query<{ login: string; superuser: boolean; owner: boolean; roles: string[] }>(
      `SELECT r.rolname AS login, r.rolsuper AS superuser, pg_has_role(r.oid, 'genfill_owner', 'MEMBER') AS owner,
              ARRAY(SELECT g.rolname FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = r.oid ORDER BY 1)::text[] AS roles
         FROM pg_roles r WHERE r.rolname IN ('genfill_h6_svc', 'genfill_h6_api') ORDER BY 1`,
    );
    expect(rows).toEqual([
      { login: 'genfill_h6_api', superuser: false, owner: false, roles: ['genfill_api'] },
      { login: 'genfill_h6_svc', superuser: false, owner: false, roles: ['genfill_service'] },
    ]);
  });

  it('plans, builds, catches up, reconciles, approves as two persons, cuts over, projects and retires, each by its service', async () => {
    const apiPort = await freePort();
    const planner = service('genfill_h6_svc', {}, 'planner', '--interval', '1');
    const worker = service('genfill_h6_svc', {}, 'worker', '--no-throttle');
    const projector = service('genfill_h6_svc', {}, 'projector', '--poll', '50');
    // The one owner connection: retention detaches and drops the replaced generation's table.
    const reconciler = service('genfill_h6_svc', { GENFILL_OWNER_DATABASE_URL: urlAs(tdb, 'genfill_h6_own') }, 'reconciler', '--interval', '1');
    const api = service('genfill_h6_api', { GENFILL_API_PORT: String(apiPort), GENFILL_API_TOKENS: `h6-bea:approver:${APPROVER_TOKEN}` }, 'api');
    const base = `http://127.0.0.1:${apiPort}`;
    await waitFor('the API to answer', async () => (await fetch(`${base}/healthz`)).ok, 60_000, { ignoreErrors: true });

    // Every session each service opened is its plain login.
    const sessions = await waitFor('every service connected', async () => {
      const { rows } = await tdb.pool.query<{ usename: string }>(
        `SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = current_database() AND usename LIKE 'genfill_h6_%'`,
      );
      const names = rows.map((r) => r.usename).sort();
      return names.includes('genfill_h6_svc') && names.includes('genfill_h6_api') ? names : null;
    });
    expect(sessions).toEqual(['genfill_h6_api', 'genfill_h6_svc']);

    // The operator submits; the planner service plans by request; the worker builds.
    const r = exampleRelease();
    r.release = REL;
    r.target.generation = 'g3';
    r.target.expectedActive = 'g2';
    r.range = { from: FROM, to: TO };
    r.partition = { every: 'P1D' };
    r.approvals = 2;
    r.rollbackWindow = 'PT1S';
    const submit = await cliAs('genfill_h6_op', 'release', 'submit', writeRelease(workspace(), r));
    expect(submit.stderr).toBe('');
    expect(submit.code).toBe(0);
    const plan = await cliAs('genfill_h6_op', 'plan', REL);
    expect({ code: plan.code, stderr: plan.stderr }).toEqual({ code: 0, stderr: expect.stringMatching(/waiting for the planner service/) });
    await waitFor(`${REL} BUILT`, async () => (await stateOf(REL)) === 'BUILT', 120_000);
    // One receipt per partition, each written by the worker's plain login.
    expect(await one(`SELECT (SELECT count(*)::int FROM genfill.partitions WHERE release = $1) = count(*)::int AS each, array_agg(DISTINCT principal) AS who
                        FROM genfill.receipts WHERE release = $1`, [REL])).toEqual({ each: true, who: ['genfill_h6_svc'] });

    // The projector serves the catch-up; the reconciler serves the reconciliation.
    const catchup = await cliAs('genfill_h6_op', 'catchup', REL);
    expect({ code: catchup.code, stderr: catchup.stderr }).toEqual({ code: 0, stderr: expect.stringMatching(/waiting for the projector service/) });
    const rec = await cliAs('genfill_h6_op', 'reconcile', REL, '--json');
    expect({ code: rec.code, stderr: rec.stderr }).toEqual({ code: 0, stderr: expect.stringMatching(/waiting for the reconciler service/) });
    expect(await stateOf(REL)).toBe('RECONCILED');

    // Two persons approve: one by login over the CLI, one by token through the API.
    const first = await cliAs('genfill_h6_ap1', 'approve', REL);
    expect({ code: first.code, stderr: first.stderr }).toEqual({ code: 0, stderr: '' });
    expect(first.stdout).toMatch(/1\/2 approvals/);
    const { id: recId } = await one<{ id: string }>(`SELECT id::text FROM genfill.reconciliations WHERE release = $1 ORDER BY id DESC LIMIT 1`, [REL]);
    const second = await fetch(`${base}/releases/${encodeURIComponent(REL)}/approve`, {
      method: 'POST',
      headers: { authorization: `Bearer ${APPROVER_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ reconciliation: Number(recId) }),
    });
    expect(second.status).toBe(200);
    expect(await second.json()).toMatchObject({ outcome: 'approved', principal: 'h6-bea', approvals: 2, state: 'APPROVED' });
    expect((await tdb.pool.query(`SELECT principal, principal_kind, person FROM genfill.approvals WHERE release = $1 ORDER BY id`, [REL])).rows).toEqual([
      { principal: 'genfill_h6_ap1', principal_kind: 'login', person: 'h6-ada' },
      { principal: 'h6-bea', principal_kind: 'token', person: 'h6-bea' },
    ]);

    // The cutover is a request the projector service runs: the active pointer moves to g3.
    expect(await activeOf()).toBe('g2');
    const cut = await cliAs('genfill_h6_op', 'cutover', REL, '--json');
    expect({ code: cut.code, stderr: cut.stderr, services: serviceErrors() }).toEqual({
      code: 0,
      stderr: expect.stringMatching(/waiting for the projector service/),
      services: serviceErrors(),
    });
    expect(JSON.parse(cut.stdout)).toMatchObject({ ok: true, from: 'g2', to: 'g3' });
    expect(await activeOf()).toBe('g3');
    expect(await stateOf(REL)).toBe('ACTIVE');
    expect(await one(`SELECT c.state, q.claimed_by FROM genfill.cutovers c JOIN genfill.requests q ON q.id = c.request WHERE c.release = $1`, [REL])).toEqual({
      state: 'DONE',
      claimed_by: expect.stringMatching(/^projector:/),
    });

    // The application writes; the projector service applies the batch to the new generation.
    const frontier = await one<{ s: string }>(`SELECT snapshot::text AS s FROM genfill.frontiers WHERE dataset = $1 AND generation = 'g3'`, [DS]);
    await tdb.pool.query(`INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents) VALUES (900001, 1, 'north', $1, 12345)`, [
      '2025-07-01T12:00:00Z',
    ]);
    const row = await waitFor('the live order in the view', async () => (await tdb.pool.query(`SELECT generation FROM genfill_data.${DS} WHERE order_id = 900001`)).rows[0], 60_000);
    expect(row).toEqual({ generation: 'g3' });
    expect((await one<{ n: number }>(`SELECT count(*)::int AS n FROM public.${DS} WHERE order_id = 900001`)).n).toBe(1);
    expect(await one<{ s: string }>(`SELECT snapshot::text AS s FROM genfill.frontiers WHERE dataset = $1 AND generation = 'g3'`, [DS])).not.toEqual(frontier);

    // Past the rollback window the reconciler retires g2 and drops its table on its owner connection.
    await waitFor('g2 retired and dropped', async () => {
      const g = await one<{ state: string; present: boolean }>(
        `SELECT (SELECT state FROM genfill.generations WHERE dataset = $1 AND generation = 'g2') AS state,
                to_regclass($2) IS NOT NULL AS present`,
        [DS, `genfill_data.${DS}__g2`],
      );
      return g.state === 'RETIRED' && !g.present ? g : null;
    }, 90_000);
    expect((await tdb.pool.query(`SELECT action, principal FROM genfill.dataset_log WHERE generation = 'g2' AND action IN ('retire', 'generation-dropped') ORDER BY id`)).rows).toEqual([
      { action: 'retire', principal: 'genfill_h6_svc' },
      { action: 'generation-dropped', principal: expect.stringMatching(/^genfill_h6_(svc|own)$/) },
    ]);

    // And it prunes the change log below the horizon: the DEFAULT partition's early events.
    await waitFor('the early events pruned', async () => (await one<{ n: number }>(`SELECT count(*)::int AS n FROM genfill.change_log_default`)).n === 0, 60_000);
    expect(await one(`SELECT sum(rows)::int AS n FROM genfill.change_log_prunes WHERE what = 'default-rows'`)).toEqual({ n: 5 });

    noPermissionErrors();
    for (const child of [planner, worker, projector, reconciler, api]) child.kill('SIGTERM');
    for (const child of [planner, worker, projector, reconciler, api]) expect({ service: children.get(child)!.name, code: await exited(child) }).toEqual({ service: children.get(child)!.name, code: 0 });
  });
});
