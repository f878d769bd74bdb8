// The registry guards itself (SPEC "Identity and roles", issue: people change it only through
// verbs). Plain logins in genfill_operator and genfill_approver try every bypass a reviewer
// found — each is refused and changes nothing — and still do their jobs through the CLI and
// the API, with plan and reconcile executed as requests by services logged in as a member of
// genfill_service. The fleet itself is held to the transition table, the append-only logs and
// the principal trigger.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApi, type ApiServer } from '@genfill/api';
import { loadConfig, RELEASE_STATES, TRANSITIONS } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs as urlOf } from './support/db.ts';
import { createExampleSchema, dailyRelease, registryCounts, seedOrders, workspace, writeRelease } from './support/fixtures.ts';
import { login, mapPerson, token } from './support/persons.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';
import { exited, waitFor } from './support/wait.ts';

const BIN = fileURLToPath(new URL('../apps/cli/bin/genfill.js', import.meta.url));
const db = await createTestDatabase('privileges');
const queues = createTestQueues('privileges');

/** Logins (cluster-wide, created idempotently): two people, the fleet, and the API. */
const LOGINS = {
  genfill_carol: 'genfill_operator',
  genfill_dave: 'genfill_approver',
  genfill_svc: 'genfill_service',
  genfill_apisvc: 'genfill_api',
} as const;
type Login = keyof typeof LOGINS;

const urlAs = (login: Login) => urlOf(db, login);
const envAs = (login: Login) => ({
  DATABASE_URL: urlAs(login),
  REDIS_URL,
  GENFILL_QUEUE_PREFIX: queues.prefix,
  GENFILL_LOG_LEVEL: 'warn',
});
const cliAs = (login: Login, ...args: string[]) => runCli(args, envAs(login));
const admin = (...args: string[]) => runCli(args, { ...envAs('genfill_svc'), DATABASE_URL: db.url });

const clients: pg.Client[] = [];
async function connectAs(login: Login): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: urlAs(login) });
  c.on('error', () => undefined);
  await c.connect();
  clients.push(c);
  return c;
}

const children = new Set<ChildProcess>();
function service(login: Login, ...args: string[]): ChildProcess {
  const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...envAs(login) }, stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  child.stderr!.on('data', (d) => (err = (err + String(d)).slice(-4000)));
  child.on('exit', (code) => {
    children.delete(child);
    if (code !== 0 && code !== null) process.stderr.write(`genfill ${args.join(' ')} exited ${code}: ${err}\n`);
  });
  children.add(child);
  return child;
}

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
const stateOf = async (id: string) => (await one('SELECT state FROM genfill.releases WHERE id = $1', [id])).state as string;
const lastLog = async (id: string) =>
  one('SELECT action, from_state, to_state, principal, detail FROM genfill.release_log WHERE release = $1 ORDER BY id DESC LIMIT 1', [id]);

const OPEN = 'priv-open@1'; // DRAFT: the target of every bypass attempt
const BUILT = 'priv-built@1'; // planned by request, built by a service worker, reconciled by request

beforeAll(async () => {
  expect((await admin('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
  await seedOrders(db.pool, { perDay: 20, days: 6 });
  for (const [login, role] of Object.entries(LOGINS)) {
    await db.pool.query(`DO $$ BEGIN CREATE ROLE ${login} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
    await db.pool.query(`GRANT ${role} TO ${login}`);
  }
  // Approvals count persons (migration 0028): the owner maps who submits and who approves.
  await mapPerson(db.pool, 'carol', login('genfill_carol'));
  await mapPerson(db.pool, 'dave', login('genfill_dave'));
  await mapPerson(db.pool, 'abe', token('abe'));
  // What an install grants beside genfill's own roles (README "Roles"): the fleet reads the
  // sources, operators read them to validate a release, and genfill_owner may create the
  // first generation's view in public.
  await db.pool.query(`GRANT USAGE ON SCHEMA public TO genfill_service, genfill_operator;
    GRANT SELECT ON ALL TABLES IN SCHEMA public TO genfill_service, genfill_operator;
    GRANT CREATE ON SCHEMA public TO genfill_owner`);
  const open = dailyRelease(OPEN, 'priv_open', 3);
  expect((await cliAs('genfill_carol', 'release', 'submit', writeRelease(workspace(), open))).code).toBe(0);
});
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(queues);
});
afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
});

describe('a plain operator or approver login cannot bypass the verbs', () => {
  const bypasses: [string, string][] = [
    ['set any state', `UPDATE genfill.releases SET state = 'APPROVED' WHERE id = '${OPEN}'`],
    ['set its own pause flag', `UPDATE genfill.releases SET operator_paused = true WHERE id = '${OPEN}'`],
    ['point readers at a candidate', `UPDATE genfill.datasets SET active_generation = 'g1' WHERE name = 'priv_open'`],
    ['rewrite the submitter', `UPDATE genfill.releases SET submitted_by = 'someone-else' WHERE id = '${OPEN}'`],
    [
      'insert a passing reconciliation',
      `INSERT INTO genfill.reconciliations (release, snapshot, from_state, release_digest, state, summary, findings_count)
       SELECT id, pg_current_snapshot(), state, digest, 'RECONCILED', '{}', 0 FROM genfill.releases WHERE id = '${OPEN}'`,
    ],
    ['change a transform under its digest', `UPDATE genfill.transforms SET sql = 'SELECT 1'`],
    ['write a log row', `INSERT INTO genfill.release_log (release, action, principal) VALUES ('${OPEN}', 'approve', 'genfill_bob')`],
    [
      'forge a throttle decision',
      `INSERT INTO genfill.throttle_decisions (release, token, holder, signals, binding, action, concurrency, rows_per_second, live_workers, worker_rows_per_second, throttle_paused)
       VALUES ('${OPEN}', 1, 'me', '{}', 'none', 'hold', 99, 1e9, 1, 1e9, false)`,
    ],
    ['take a throttle lease', `INSERT INTO genfill.throttle_leases (release, token, holder) VALUES ('${OPEN}', 1, 'me')`],
    ['insert an approval', `INSERT INTO genfill.approvals (release, reconciliation_id) VALUES ('${OPEN}', 1)`],
    ['add a generation table', `SELECT genfill.add_generation('priv_open', 'g7')`],
    ['create a table among the generations', `CREATE TABLE genfill_data.mine (a int)`],
    ['claim a request', `UPDATE genfill.requests SET state = 'DONE'`],
  ];

  for (const login of ['genfill_carol', 'genfill_dave'] as const) {
    it(`${login}: every direct write is refused with 42501 and changes nothing`, async () => {
      const c = await connectAs(login);
      const before = await registryCounts(db.pool);
      const rel = await one('SELECT state, operator_paused, submitted_by FROM genfill.releases WHERE id = $1', [OPEN]);
      for (const [what, sql] of bypasses) {
        const err = await c.query(sql).then(
          () => null,
          (e: { code?: string }) => e,
        );
        expect({ what, code: err?.code ?? 'succeeded' }).toEqual({ what, code: '42501' });
      }
      expect(await registryCounts(db.pool)).toEqual(before);
      expect(await one('SELECT state, operator_paused, submitted_by FROM genfill.releases WHERE id = $1', [OPEN])).toEqual(rel);
      expect((await one(`SELECT count(*)::int AS n FROM genfill.transforms WHERE digest <> 'sha256:' || encode(sha256(convert_to(sql, 'UTF8')), 'hex')`)).n).toBe(0);
    });
  }

  it('the operator may not approve and the approver may not operate: each refused by the function grants (exit 3)', async () => {
    const approve = await cliAs('genfill_carol', 'approve', OPEN, '--reconciliation', '1');
    expect(approve.code).toBe(3);
    expect(approve.stderr).toMatch(/may not do this .*genfill_approver/);
    const pause = await cliAs('genfill_dave', 'pause', OPEN);
    expect(pause.code).toBe(3);
    expect(pause.stderr).toMatch(/may not do this .*genfill_operator/);
    expect((await one('SELECT operator_paused FROM genfill.releases WHERE id = $1', [OPEN])).operator_paused).toBe(false);
  });

  it('names only itself as principal: a genfill.principal it sets is ignored, a principal it passes is overwritten', async () => {
    const c = await connectAs('genfill_carol');
    await c.query('BEGIN');
    await c.query(`SELECT set_config('genfill.principal', 'genfill_bob', true)`);
    const r = await c.query(`SELECT * FROM genfill.set_operator_pause($1, true, 'as someone else?', NULL)`, [OPEN]);
    await c.query('COMMIT');
    expect(r.rows[0]).toEqual({ state: 'DRAFT', changed: true });
    expect(await lastLog(OPEN)).toMatchObject({ action: 'pause', principal: 'genfill_carol' });
    expect((await cliAs('genfill_carol', 'resume', OPEN)).code).toBe(0);
    expect(await lastLog(OPEN)).toMatchObject({ action: 'resume', principal: 'genfill_carol' });
  });
});

describe('the fleet and the owner are held to the same rules', () => {
  it('a service login moves states only along the transition table, never to APPROVED, and cannot forge a principal', async () => {
    const svc = await connectAs('genfill_svc');
    await expect(svc.query(`UPDATE genfill.releases SET state = 'ACTIVE' WHERE id = $1`, [OPEN])).rejects.toMatchObject({ code: 'GFR01' });
    await expect(svc.query(`UPDATE genfill.releases SET operator_paused = true WHERE id = $1`, [OPEN])).rejects.toMatchObject({ code: '42501' });
    // A legal-looking move into APPROVED is reserved to genfill.approve.
    await expect(db.pool.query(`UPDATE genfill.releases SET state = 'APPROVED' WHERE id = $1`, [OPEN])).rejects.toMatchObject({ code: 'GFR01' });
    await svc.query(`INSERT INTO genfill.release_log (release, action, principal) VALUES ($1, 'note', 'genfill_bob')`, [OPEN]);
    expect(await lastLog(OPEN)).toMatchObject({ action: 'note', principal: 'genfill_svc' });
    expect(await stateOf(OPEN)).toBe('DRAFT');
  });

  it('even a superuser cannot change what a release was submitted with, or a stored transform', async () => {
    await expect(db.pool.query(`UPDATE genfill.releases SET submitted_by = 'x' WHERE id = $1`, [OPEN])).rejects.toThrow(/never changes/);
    await expect(db.pool.query(`UPDATE genfill.transforms SET sql = sql || ' '`)).rejects.toThrow(/append-only/);
    await expect(db.pool.query(`INSERT INTO genfill.transforms (digest, sql) VALUES ('sha256:' || repeat('0', 64), 'SELECT 1')`)).rejects.toMatchObject({
      code: '23514',
    });
  });

  it('counts a throttle decision only under the current lease token', async () => {
    await db.pool.query(`INSERT INTO genfill.throttle_leases (release, token, holder) VALUES ($1, 2, 'w2')`, [OPEN]);
    const decision = (token: number, holder: string) =>
      db.pool.query(
        `INSERT INTO genfill.throttle_decisions (release, token, holder, signals, binding, action, concurrency, rows_per_second, live_workers, worker_rows_per_second, throttle_paused)
         VALUES ($1, $2, $3, '{}', 'none', 'hold', 1, 10, 1, 10, false)`,
        [OPEN, token, holder],
      );
    await expect(decision(1, 'w1')).rejects.toMatchObject({ code: 'GFR01' });
    await expect(decision(2, 'w1')).rejects.toMatchObject({ code: 'GFR01' });
    await decision(2, 'w2');
    expect((await one('SELECT count(*)::int AS n FROM genfill.throttle_decisions WHERE release = $1', [OPEN])).n).toBe(1);
  });
});

describe('the database holds the rules', () => {
  it('has the transition table of packages/contracts/src/states.ts, row for row', async () => {
    const { rows } = await db.pool.query<{ from_state: string; to_state: string }>('SELECT from_state, to_state FROM genfill.release_transitions');
    const inDb = rows.map((r) => `${r.from_state}→${r.to_state}`).sort();
    const inCode = RELEASE_STATES.flatMap((f) => TRANSITIONS[f].map((t) => `${f}→${t}`)).sort();
    expect(inDb).toEqual(inCode);
  });

  it('every SECURITY DEFINER function belongs to genfill_owner, pins search_path and grants nothing to PUBLIC', async () => {
    const { rows } = await db.pool.query<{ fn: string; owner: string; config: string[] | null; public_exec: boolean }>(
      `SELECT p.oid::regprocedure::text AS fn, pg_get_userbyid(p.proowner) AS owner, p.proconfig AS config,
              coalesce(p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'), true) AS public_exec
         FROM pg_proc p WHERE p.pronamespace = 'genfill'::regnamespace AND p.prosecdef ORDER BY 1`,
    );
    expect(rows.map((r) => r.fn)).toEqual(
      expect.arrayContaining([
        'genfill.approve(text,bigint)',
        'genfill.cancel_release(text,text,jsonb)',
        'genfill.request(text,text,jsonb)',
        'genfill.set_operator_pause(text,boolean,text,jsonb)',
        'genfill.submit_release(jsonb,text,text)',
        'genfill.add_generation(text,text)',
      ]),
    );
    for (const r of rows) {
      expect({ fn: r.fn, owner: r.owner, publicExecute: r.public_exec }).toEqual({ fn: r.fn, owner: 'genfill_owner', publicExecute: false });
      expect(r.config ?? [], r.fn).toEqual(expect.arrayContaining([expect.stringMatching(/^search_path=pg_catalog, pg_temp$/)]));
    }
  });
});

describe('the same logins do their jobs through the CLI and the API', { timeout: 180_000 }, () => {
  let api: ApiServer;
  const TOKENS = { olga: 'olga-operator-token-0123456789', abe: 'abe-approver-token-0123456789' };

  beforeAll(async () => {
    api = await startApi({
      config: loadConfig({ ...envAs('genfill_apisvc'), GENFILL_API_TOKENS: `olga:operator:${TOKENS.olga},abe:approver:${TOKENS.abe}` }),
      log: createLogger('api', 'silent'),
      port: 0,
    });
  });
  afterAll(async () => {
    await api?.close();
  });

  const post = async (path: string, token: string, body: unknown = {}) => {
    const res = await fetch(`${api.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as any };
  };

  it('submit, plan by request, build, reconcile by request, approve by id from the CLI and the API; cancel', async () => {
    const planner = service('genfill_svc', 'planner', '--interval', '1');
    const reconciler = service('genfill_svc', 'reconciler', '--interval', '3600');
    const worker = service('genfill_svc', 'worker', '--no-throttle');

    // Two approvals required: one by CLI, one through the API.
    const spec = dailyRelease(BUILT, 'priv_built', 3, { approvals: 2 });
    const submit = await cliAs('genfill_carol', 'release', 'submit', writeRelease(workspace(), spec));
    expect(submit.code).toBe(0);
    expect(await one('SELECT submitted_by FROM genfill.releases WHERE id = $1', [BUILT])).toEqual({ submitted_by: 'genfill_carol' });

    const plan = await cliAs('genfill_carol', 'plan', BUILT);
    expect(plan.stderr).toMatch(/\(request #\d+\); waiting for the planner service/);
    expect(plan.code).toBe(0);
    expect(plan.stdout).toMatch(new RegExp(`planned: ${BUILT} is BUILDING`));
    const planned = await one(`SELECT principal FROM genfill.release_log WHERE release = $1 AND action = 'plan'`, [BUILT]);
    expect(planned).toEqual({ principal: 'genfill_carol' });
    const req = await one(`SELECT kind, principal, state, claimed_by FROM genfill.requests WHERE release = $1 AND kind = 'plan'`, [BUILT]);
    expect(req).toMatchObject({ kind: 'plan', principal: 'genfill_carol', state: 'DONE', claimed_by: expect.stringMatching(/^planner:/) });

    // Operators pause and resume through the API; the token's subject is the principal.
    const paused = await post(`/releases/${BUILT}/pause`, TOKENS.olga, { reason: 'look first' });
    expect(paused.status).toBe(200);
    expect(await lastLog(BUILT)).toMatchObject({ action: 'pause', principal: 'olga' });
    expect((await post(`/releases/${BUILT}/resume`, TOKENS.olga)).status).toBe(200);
    expect(await lastLog(BUILT)).toMatchObject({ action: 'resume', principal: 'olga' });

    await waitFor(`${BUILT} BUILT`, async () => (await stateOf(BUILT)) === 'BUILT', 120_000);
    worker.kill('SIGTERM');
    expect(await exited(worker)).toBe(0);
    expect((await one('SELECT count(*)::int AS n FROM genfill.receipts WHERE release = $1', [BUILT])).n).toBe(3);

    const rec = await cliAs('genfill_carol', 'reconcile', BUILT);
    expect(rec.stderr).toMatch(/waiting for the reconciler service/);
    expect(rec.code).toBe(0);
    expect(await stateOf(BUILT)).toBe('RECONCILED');
    const stored = await one(`SELECT id::text, principal FROM genfill.reconciliations WHERE release = $1 ORDER BY id DESC LIMIT 1`, [BUILT]);
    expect(stored.principal).toBe('genfill_carol');
    // The reconciler's service login analyzed the fresh candidate through genfill.analyze_generation.
    const analyzed = await one(`SELECT last_analyze IS NOT NULL AS ok FROM pg_stat_user_tables WHERE schemaname = 'genfill_data' AND relname = 'priv_built__g1'`);
    expect(analyzed).toEqual({ ok: true });

    // The submitter cannot approve even holding the role; a stale id is refused; dave approves by id.
    const notLatest = await cliAs('genfill_dave', 'approve', BUILT, '--reconciliation', String(Number(stored.id) + 1));
    expect(notLatest.code).toBe(3);
    expect(notLatest.stderr).toMatch(/is not the latest of release/);
    const dave = await cliAs('genfill_dave', 'approve', BUILT);
    expect(dave.code).toBe(0);
    expect(dave.stdout).toMatch(new RegExp(`latest reconciliation of ${BUILT}: #${stored.id}, RECONCILED`));
    expect(dave.stdout).toMatch(/approval recorded: genfill_dave approved reconciliation #\d+ .* 1\/2 approvals/);

    const badBody = await post(`/releases/${BUILT}/approve`, TOKENS.abe, {});
    expect(badBody.status).toBe(400);
    const byOperator = await post(`/releases/${BUILT}/approve`, TOKENS.olga, { reconciliation: stored.id });
    expect(byOperator.status).toBe(403);
    const abe = await post(`/releases/${BUILT}/approve`, TOKENS.abe, { reconciliation: Number(stored.id) });
    expect(abe).toMatchObject({ status: 200, body: { outcome: 'approved', principal: 'abe', approvals: 2, required: 2, state: 'APPROVED' } });
    expect(await lastLog(BUILT)).toMatchObject({ action: 'approve', to_state: 'APPROVED', principal: 'abe' });

    const cancel = await cliAs('genfill_carol', 'cancel', OPEN);
    expect(cancel.code).toBe(0);
    expect(await lastLog(OPEN)).toMatchObject({ action: 'cancel', to_state: 'CANCELLED', principal: 'genfill_carol' });

    planner.kill('SIGTERM');
    reconciler.kill('SIGTERM');
    expect(await exited(planner)).toBe(0);
    expect(await exited(reconciler)).toBe(0);
  });
});
