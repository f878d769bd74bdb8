// The change log and the ingress tables are private (issue 28, finding 2, and finding 5's
// log_horizon_transactions; migration 0025). Plain logins of each people role — with no SELECT
// on the captured source — try to read row images and keys where genfill keeps them: the log,
// every partition of it (those made after the test starts too), the ingress keys and conflicts,
// the projector's tombstones; each is refused. A login that may read the source reads its events
// and conflicts through genfill.source_events / source_conflicts; the API's login may not. The
// horizon's session details stay the service's. And the status people rely on — `genfill status
// --json`, `status --dataset`, `capture status`, the API's /releases and status page — still
// answers as those plain logins, with the same counts.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApi, type ApiServer } from '@genfill/api';
import { installIngressMirror } from '@genfill/capture';
import { loadConfig } from '@genfill/contracts';
import { createLogger } from '@genfill/observability';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { createExampleSchema, dailyRelease, seedOrders, workspace, writeRelease } from './support/fixtures.ts';
import { mirrorDdl, upsert, writeEvents } from './support/ingress.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';

const db = await createTestDatabase('trust_private_log');
const queues = createTestQueues('trust-private-log');

/** Logins (cluster-wide, created idempotently). `granted` is a reader who may read public.orders. */
const LOGINS = {
  genfill_h2_reader: 'genfill_reader',
  genfill_h2_operator: 'genfill_operator',
  genfill_h2_approver: 'genfill_approver',
  genfill_h2_svc: 'genfill_service',
  genfill_h2_api: 'genfill_api',
  genfill_h2_granted: 'genfill_reader',
} as const;
type Login = keyof typeof LOGINS;
const PEOPLE: Login[] = ['genfill_h2_reader', 'genfill_h2_operator', 'genfill_h2_approver'];

const DATASET = 'h2_orders';
const RELEASE = 'h2-orders@1';
const MIRROR = 'public.h2_ext_mirror';
const MIRROR_DATASET = 'h2_ext';
const TOKENS = { olga: 'h2-operator-token-0123456789', vera: 'h2-viewer-token-0123456789' };

const envAs = (login: Login | null) => ({
  DATABASE_URL: login ? urlAs(db, login) : db.url,
  REDIS_URL,
  GENFILL_QUEUE_PREFIX: queues.prefix,
  GENFILL_LOG_LEVEL: 'silent',
});
const cliAs = (login: Login | null, ...args: string[]) => runCli(args, envAs(login));

const clients = new Map<Login, pg.Client>();
async function as(login: Login): Promise<pg.Client> {
  let c = clients.get(login);
  if (!c) {
    c = new pg.Client({ connectionString: urlAs(db, login) });
    c.on('error', () => undefined);
    await c.connect();
    clients.set(login, c);
  }
  return c;
}
const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
/** What a query as `login` did: its rows, or the error's SQLSTATE and message. */
async function attempt(login: Login, sql: string, values: unknown[] = []): Promise<{ rows?: any[]; code?: string; message?: string }> {
  try {
    return { rows: (await (await as(login)).query(sql, values)).rows };
  } catch (e) {
    return { code: (e as { code?: string }).code, message: (e as Error).message };
  }
}
/** Every partition of genfill.change_log now, from the catalogue. */
const partitions = async (): Promise<string[]> =>
  (await db.pool.query(`SELECT inhrelid::regclass::text AS p FROM pg_inherits WHERE inhparent = 'genfill.change_log'::regclass ORDER BY 1`)).rows.map((r) => r.p);

/** The events written after the frontier: 3 updates and 1 delete of public.orders. */
const PENDING = 4;

beforeAll(async () => {
  expect((await cliAs(null, 'migrate')).code).toBe(0);
  // public.tax_rates stays uncaptured: the refusal below names it (nothing here is planned).
  await createExampleSchema(db.pool, { captureDependencies: false });
  await seedOrders(db.pool, { perDay: 4, days: 3 });
  for (const [login, role] of Object.entries(LOGINS)) {
    await db.pool.query(`DO $$ BEGIN CREATE ROLE ${login} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
    await db.pool.query(`GRANT ${role} TO ${login}`);
  }
  await db.pool.query(`GRANT SELECT ON public.orders TO genfill_h2_granted, genfill_service`);

  // A trigger-captured source with a dataset whose active generation has a frontier, then
  // changes after it: pending events, a deleted row's last image among them.
  expect((await cliAs(null, 'capture', 'install', 'public.orders')).code).toBe(0);
  expect((await cliAs(null, 'release', 'submit', writeRelease(workspace(), dailyRelease(RELEASE, DATASET, 3)))).code).toBe(0);
  await db.pool.query(`BEGIN;
    INSERT INTO genfill.generations (dataset, generation, state) VALUES ('${DATASET}', 'g0', 'ACTIVE');
    UPDATE genfill.datasets SET active_generation = 'g0' WHERE name = '${DATASET}';
    INSERT INTO genfill.frontiers (dataset, generation, snapshot) VALUES ('${DATASET}', 'g0', pg_current_snapshot());
    COMMIT`);
  await db.pool.query(`UPDATE public.orders SET amount_cents = amount_cents + 1 WHERE order_id IN (SELECT order_id FROM public.orders ORDER BY order_id LIMIT 3)`);
  await db.pool.query(`DELETE FROM public.orders WHERE order_id = (SELECT max(order_id) FROM public.orders)`);

  // An ingress mirror with a key and a conflict (equal revision, other payload). ingress_install
  // grants SELECT on the mirror to every people role (another workstream's file); this test
  // takes it back so that a login without SELECT on the mirror exists.
  await db.pool.query(mirrorDdl(MIRROR));
  await installIngressMirror(db.pool, MIRROR);
  await db.pool.query(`REVOKE SELECT ON ${MIRROR} FROM genfill_operator, genfill_approver, genfill_reader; GRANT SELECT ON ${MIRROR} TO genfill_h2_granted`);
  const spec = dailyRelease('h2-ext@1', MIRROR_DATASET, 3);
  spec.source.table = MIRROR;
  const submitted = await cliAs(null, 'release', 'submit', writeRelease(workspace(), spec));
  expect(submitted.code, submitted.stderr).toBe(0);
  const dir = workspace();
  expect((await cliAs(null, 'ingest', MIRROR_DATASET, writeEvents(dir, 'a.ndjson', [upsert(1, 1, 'secret a')]))).code).toBe(0);
  expect((await cliAs(null, 'ingest', MIRROR_DATASET, writeEvents(dir, 'b.ndjson', [upsert(1, 1, 'secret b')]))).code).toBe(3);

  // Each relation holds what a reader must not see, so a refusal below is not an empty table's.
  for (const t of ['genfill.change_log', 'genfill.ingress_keys', 'genfill.ingress_conflicts']) {
    expect((await one(`SELECT count(*)::int AS n FROM ${t}`)).n, t).toBeGreaterThan(0);
  }
});
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(queues);
});
afterAll(async () => {
  await Promise.all([...clients.values()].map((c) => c.end().catch(() => undefined)));
});

describe('people read no row image or source key directly', () => {
  it('refuses a plain reader, operator and approver login the change log, every partition of it, the ingress keys and conflicts, and the projector tombstones', async () => {
    const parts = await partitions();
    expect(parts.length).toBeGreaterThan(1);
    const relations = ['genfill.change_log', ...parts, 'genfill.ingress_keys', 'genfill.ingress_conflicts', 'genfill.projector_tombstones'];
    for (const login of PEOPLE) {
      for (const rel of relations) {
        const r = await attempt(login, `SELECT * FROM ${rel} LIMIT 1`);
        expect({ login, rel, code: r.code }).toEqual({ login, rel, code: '42501' });
      }
    }
  });

  it('a partition the service makes after the migration is not readable by people either, nor through the API role or PUBLIC', async () => {
    const before = await partitions();
    const made = await attempt('genfill_h2_svc', 'SELECT genfill.change_log_add_partitions(24) AS n');
    expect(made.rows?.[0]?.n).toBeGreaterThan(0);
    const after = await partitions();
    const fresh = after.filter((p) => !before.includes(p));
    expect(fresh.length).toBe(made.rows![0].n);
    // The service's own write lands in a fresh partition's range only later; what matters is
    // that nobody of the people can read any of them, whoever made them.
    for (const login of PEOPLE) {
      for (const rel of after) {
        const r = await attempt(login, `SELECT * FROM ${rel} LIMIT 1`);
        expect({ login, rel, code: r.code }).toEqual({ login, rel, code: '42501' });
      }
    }
    for (const role of ['genfill_reader', 'genfill_operator', 'genfill_approver', 'genfill_api', 'public']) {
      const { rows } = await db.pool.query(
        `SELECT p FROM unnest($1::text[]) AS p WHERE has_table_privilege($2, p, 'SELECT') OR has_table_privilege($2, p, 'INSERT')`,
        [after, role],
      );
      expect({ role, readable: rows.map((r) => r.p) }).toEqual({ role, readable: [] });
    }
  });

  it('people read what the conflicts were — ids, revision, releases, who — through a view with no key or image', async () => {
    for (const login of PEOPLE) {
      const r = await attempt(login, `SELECT * FROM genfill.ingress_conflict_log WHERE dataset = $1`, [MIRROR_DATASET]);
      expect(r.rows, r.message).toHaveLength(1);
      expect(Object.keys(r.rows![0]).sort()).toEqual(['at', 'dataset', 'id', 'incoming_lines', 'principal', 'releases', 'revision', 'source_table', 'stored_differs']);
      expect(JSON.stringify(r.rows)).not.toMatch(/secret/);
    }
  });
});

describe('genfill.source_events and genfill.source_conflicts', () => {
  it('refuse a login without SELECT on the source with a named error, and return the events — the deleted row too — to one that has it', async () => {
    for (const login of PEOPLE) {
      const r = await attempt(login, `SELECT * FROM genfill.source_events('public.orders', 0, 100)`);
      expect({ login, code: r.code }).toEqual({ login, code: 'GFP01' });
      expect(r.message).toMatch(new RegExp(`refused: ${login} may not read public.orders, so not its events either .*GRANT SELECT ON public.orders TO ${login}`));
      const c = await attempt(login, `SELECT * FROM genfill.source_conflicts($1, 0, 10)`, [MIRROR_DATASET]);
      expect({ login, code: c.code }).toEqual({ login, code: 'GFP01' });
    }
    const events = await attempt('genfill_h2_granted', `SELECT event_id, op, "row" FROM genfill.source_events('public.orders', 0, 100)`);
    expect(events.code, events.message).toBeUndefined();
    expect(events.rows).toHaveLength(PENDING);
    expect(events.rows!.map((e) => e.op)).toEqual(['upsert', 'upsert', 'upsert', 'delete']);
    expect(events.rows![3].row).toMatchObject({ order_id: expect.anything(), amount_cents: expect.anything() });
    // Pages: after the second event, at most one.
    const page = await attempt('genfill_h2_granted', `SELECT event_id FROM genfill.source_events('public.orders', $1, 1)`, [events.rows![1].event_id]);
    expect(page.rows).toEqual([{ event_id: events.rows![2].event_id }]);
    const conflicts = await attempt('genfill_h2_granted', `SELECT key, revision::int, incoming, stored FROM genfill.source_conflicts($1, 0, 10)`, [MIRROR_DATASET]);
    expect(conflicts.rows).toEqual([
      { key: { order_id: 1 }, revision: 1, incoming: [expect.objectContaining({ row: expect.objectContaining({ note: 'secret b' }) })], stored: expect.objectContaining({ row: expect.objectContaining({ note: 'secret a' }) }) },
    ]);
  });

  it("refuse the API's login even when it holds SELECT on the source: its privileges are not its token subjects'", async () => {
    await db.pool.query('GRANT SELECT ON public.orders TO genfill_h2_api');
    try {
      const r = await attempt('genfill_h2_api', `SELECT * FROM genfill.source_events('public.orders', 0, 100)`);
      expect(r.code).toBe('GFP01');
      expect(r.message).toMatch(/genfill_h2_api is the API's login, which reads no events of public.orders on a token subject's behalf/);
    } finally {
      await db.pool.query('REVOKE SELECT ON public.orders FROM genfill_h2_api');
    }
  });

  it('refuse a login with SELECT on a captured table but no USAGE on its schema, and one with SELECT on some of its columns only', async () => {
    await db.pool.query(`CREATE SCHEMA h2_hidden; CREATE TABLE h2_hidden.notes (id int PRIMARY KEY, body text, secret text);
      GRANT USAGE ON SCHEMA h2_hidden TO genfill_owner; GRANT SELECT ON h2_hidden.notes TO genfill_owner, genfill_h2_granted;
      GRANT SELECT (id, body) ON h2_hidden.notes TO genfill_h2_reader`);
    expect((await cliAs(null, 'capture', 'install', 'h2_hidden.notes')).code).toBe(0);
    await db.pool.query(`INSERT INTO h2_hidden.notes VALUES (1, 'hello', 'the secret')`);
    // By name, PostgreSQL refuses to resolve it; by oid, the function refuses.
    expect((await attempt('genfill_h2_granted', `SELECT * FROM genfill.source_events('h2_hidden.notes', 0, 10)`)).code).toBe('42501');
    const oid = (await one(`SELECT 'h2_hidden.notes'::regclass::oid::text AS oid`)).oid;
    const noUsage = await attempt('genfill_h2_granted', `SELECT * FROM genfill.source_events($1::oid::regclass, 0, 10)`, [oid]);
    expect(noUsage.code).toBe('GFP01');
    expect(noUsage.message).toMatch(/refused: genfill_h2_granted may not read h2_hidden.notes/);
    await db.pool.query('GRANT USAGE ON SCHEMA h2_hidden TO genfill_h2_reader');
    const someColumns = await attempt('genfill_h2_reader', `SELECT * FROM genfill.source_events('h2_hidden.notes', 0, 10)`);
    expect(someColumns.code).toBe('GFP01');
    // With USAGE, the login that holds SELECT on the whole table reads the event, every column in it.
    await db.pool.query('GRANT USAGE ON SCHEMA h2_hidden TO genfill_h2_granted');
    const granted = await attempt('genfill_h2_granted', `SELECT "row" FROM genfill.source_events('h2_hidden.notes', 0, 10)`);
    expect(granted.rows).toEqual([{ row: { id: 1, body: 'hello', secret: 'the secret' } }]);
  });

  it('refuse a table that is not captured, and a page size out of bounds', async () => {
    const r = await attempt('genfill_h2_granted', `SELECT * FROM genfill.source_events('public.tax_rates', 0, 10)`);
    expect(r.code).toBe('GFN01');
    expect(r.message).toMatch(/public.tax_rates is not a captured source/);
    expect((await attempt('genfill_h2_granted', `SELECT * FROM genfill.source_events('public.orders', 0, 100000)`)).code).toBe('22023');
  });

  it('refuse a login that may read the mirror when row-level security hides rows of it', async () => {
    // A trigger-captured table refuses row-level security (its capture reads every row); a
    // mirror's owner, genfill_owner, could still turn it on.
    const ok = await attempt('genfill_h2_granted', `SELECT count(*)::int AS n FROM genfill.source_events($1::regclass, 0, 10)`, [MIRROR]);
    expect(ok.rows).toEqual([{ n: 1 }]);
    await db.pool.query(`ALTER TABLE ${MIRROR} ENABLE ROW LEVEL SECURITY; CREATE POLICY h2_some ON ${MIRROR} FOR SELECT USING (region = 'south')`);
    try {
      const events = await attempt('genfill_h2_granted', `SELECT * FROM genfill.source_events($1::regclass, 0, 10)`, [MIRROR]);
      const conflicts = await attempt('genfill_h2_granted', `SELECT * FROM genfill.source_conflicts($1, 0, 10)`, [MIRROR_DATASET]);
      for (const r of [events, conflicts]) {
        expect(r.code).toBe('GFP01');
        expect(r.message).toMatch(/h2_ext_mirror has row-level security/);
      }
    } finally {
      await db.pool.query(`DROP POLICY h2_some ON ${MIRROR}; ALTER TABLE ${MIRROR} DISABLE ROW LEVEL SECURITY`);
    }
  });
});

describe("the horizon's sessions are the service's", () => {
  it('refuses people log_horizon_transactions and log_horizon_blockers, gives them kind, xid and start only, and the service keeps the detail', async () => {
    // A transaction holding an xid while the horizon is taken: the service sees its session.
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    const frontier = (await one(`SELECT snapshot::text AS s FROM genfill.frontiers WHERE dataset = $1`, [DATASET])).s;
    try {
      await holder.query(`BEGIN; SET LOCAL application_name = 'h2-long-writer'`);
      const xid = String(BigInt((await holder.query('SELECT pg_current_xact_id()::text AS x')).rows[0].x) % 2n ** 32n);
      // A later transaction ends, so a snapshot's xmax passes the holder's xid (which is then in its
      // xip); a frontier taken now waits for the holder, and so does the horizon.
      await db.pool.query('SELECT pg_current_xact_id()');
      await db.pool.query(`UPDATE genfill.frontiers SET snapshot = pg_current_snapshot() WHERE dataset = $1`, [DATASET]);
      for (const login of PEOPLE) {
        for (const sql of ['SELECT * FROM genfill.log_horizon_transactions(pg_current_snapshot())', `SELECT * FROM genfill.log_horizon_blockers('infinity')`]) {
          const r = await attempt(login, sql);
          expect({ login, sql, code: r.code }).toEqual({ login, sql, code: '42501' });
        }
        const w = await attempt(login, 'SELECT kind, xid FROM genfill.log_horizon_waits()');
        expect(w.rows, w.message).toEqual(expect.arrayContaining([{ kind: 'backend', xid }]));
        const cols = (await (await as(login)).query('SELECT * FROM genfill.log_horizon_waits() LIMIT 0')).fields.map((f) => f.name);
        expect(cols).toEqual(['kind', 'xid', 'gid', 'started']);
      }
      // `status --dataset` as a reader says what the log waits for, without the session.
      const text = await cliAs('genfill_h2_reader', 'status', '--dataset', DATASET);
      expect(text.stdout).toMatch(new RegExp(`waits for transaction ${xid} running since .*: the log is kept from it on until it ends`));
      expect(text.stdout).not.toMatch(/h2-long-writer|pid /);
      const svc = await attempt('genfill_h2_svc', 'SELECT xid, pid, role, application FROM genfill.log_horizon_transactions(pg_current_snapshot())');
      expect(svc.rows).toEqual(expect.arrayContaining([{ xid, pid: expect.any(Number), role: 'postgres', application: 'h2-long-writer' }]));
    } finally {
      await holder.query('ROLLBACK').catch(() => undefined);
      await holder.end();
      await db.pool.query(`UPDATE genfill.frontiers SET snapshot = $2::pg_snapshot WHERE dataset = $1`, [DATASET, frontier]);
    }
  });
});

describe('status as plain logins', { timeout: 120_000 }, () => {
  let api: ApiServer;
  beforeAll(async () => {
    api = await startApi({
      config: loadConfig({ ...envAs('genfill_h2_api'), GENFILL_API_TOKENS: `olga:operator:${TOKENS.olga},vera:viewer:${TOKENS.vera}` }),
      log: createLogger('api', 'silent'),
      port: 0,
    });
  });
  afterAll(async () => {
    await api?.close();
  });

  it('genfill status --json, status --dataset and capture status answer as a plain operator and reader, with the pending events counted', async () => {
    for (const login of ['genfill_h2_operator', 'genfill_h2_reader'] as const) {
      const all = await cliAs(login, 'status', '--json');
      expect(all.code, all.stderr).toBe(0);
      const one = await cliAs(login, 'status', RELEASE, '--json');
      expect(one.code, one.stderr).toBe(0);
      expect(JSON.parse(one.stdout)).toMatchObject({ release: RELEASE });

      const ds = await cliAs(login, 'status', '--dataset', DATASET, '--json');
      expect(ds.code, ds.stderr).toBe(0);
      const s = JSON.parse(ds.stdout);
      expect(s).toMatchObject({ dataset: DATASET, generation: 'g0', pendingEvents: PENDING, pendingCapped: false });
      expect(s.oldestPendingAt).not.toBeNull();
      expect(s.logHorizon).toMatchObject({ horizon: expect.any(String) });
      const text = await cliAs(login, 'status', '--dataset', DATASET);
      expect(text.code, text.stderr).toBe(0);
      expect(text.stdout).toMatch(new RegExp(`pending ${PENDING} events`));
      expect(text.stdout).toMatch(/log horizon /);

      const cap = await cliAs(login, 'capture', 'status', 'public.orders', '--json');
      expect(cap.code, cap.stderr).toBe(0);
      expect(JSON.parse(cap.stdout)).toEqual([
        expect.objectContaining({ table: 'public.orders', log: { events: PENDING, bytes: expect.any(Number) }, oldestPending: expect.objectContaining({ basis: 'frontier' }) }),
      ]);
    }
    // The same counts the service sees.
    const svc = await cliAs('genfill_h2_svc', 'status', '--dataset', DATASET, '--json');
    expect(JSON.parse(svc.stdout)).toMatchObject({ pendingEvents: PENDING });
  });

  it("the API, logged in as a plain genfill_api login, answers GET /releases and the status page with the projector lag", async () => {
    for (const token of [TOKENS.vera, TOKENS.olga]) {
      const releases = await fetch(`${api.url}/releases`, { headers: { authorization: `Bearer ${token}`, accept: 'application/json' } });
      expect(releases.status).toBe(200);
      expect(JSON.stringify(await releases.json())).toContain(RELEASE);
      const page = await fetch(`${api.url}/`, { headers: { authorization: `Bearer ${token}` } });
      expect(page.status).toBe(200);
      // The status page's dataset row: the projector lag, counted for the API's login.
      expect(await page.text()).toMatch(new RegExp(`${PENDING} events pending, oldest \\d`));
    }
  });
});
