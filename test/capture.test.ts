// `genfill capture install|remove|status` (SPEC "Capture rules", issue 14): what install
// refuses without writing anything, who runs it, that writers need nothing of genfill (a
// session_replication_role = replica writer included), install twice changes nothing and
// repairs what was broken behind the guard, a column change blocks the open releases on the
// table, and remove is refused while one is open.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs as urlOf } from './support/db.ts';
import { createExampleSchema, dailyRelease, seedOrders, workspace, writeRelease } from './support/fixtures.ts';
import { createTestQueues, keepQueuesOnFailure, REDIS_URL } from './support/redis.ts';

const db = await createTestDatabase('capture');
const q = createTestQueues('capture');
const OWNER = 'genfill_capture_owner';
const WRITER = 'genfill_capture_writer';
const OUTSIDER = 'genfill_capture_outsider';
const OPERATOR = 'genfill_capture_operator';

const urlAs = (login: string) => urlOf(db, login);
const env = (login?: string) => ({
  DATABASE_URL: login ? urlAs(login) : db.url,
  REDIS_URL,
  GENFILL_QUEUE_PREFIX: q.prefix,
  GENFILL_LOG_LEVEL: 'silent',
});
const cli = (...args: string[]) => runCli(args, env());
const cliAs = (login: string, ...args: string[]) => runCli(args, env(login));
const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];

const clients: pg.Client[] = [];
async function connectAs(login: string | null): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: login ? urlAs(login) : db.url });
  c.on('error', () => undefined);
  await c.connect();
  clients.push(c);
  return c;
}

/** Everything an install could have written: captures rows, capture triggers, capture functions. */
async function footprint(): Promise<{ captures: number; triggers: number; functions: number }> {
  return one(`SELECT (SELECT count(*)::int FROM genfill.captures) AS captures,
                     (SELECT count(*)::int FROM pg_trigger WHERE tgname LIKE 'genfill\\_capture\\_%') AS triggers,
                     (SELECT count(*)::int FROM pg_proc WHERE pronamespace = 'genfill'::regnamespace AND proname ~ '^capture_\\d+_') AS functions`);
}

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  // Logins are cluster-wide and other test files use them at the same time: grant, never revoke.
  for (const login of [OWNER, WRITER, OUTSIDER, OPERATOR]) {
    await db.pool.query(`DO $$ BEGIN CREATE ROLE ${login} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
  }
  await db.pool.query(`GRANT genfill_service TO ${OWNER}, ${OUTSIDER}; GRANT genfill_operator TO ${OPERATOR}; GRANT CREATE ON SCHEMA public TO ${OWNER}`);
  await createExampleSchema(db.pool);
  await seedOrders(db.pool, { perDay: 4, days: 3 });
});
beforeEach(() => {
  keepOnFailure(db);
  keepQueuesOnFailure(q);
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
});

describe('genfill capture install refuses, writing nothing', () => {
  it('refuses a table without a suitable key: none, deferrable, on a NULL-able column', async () => {
    await db.pool.query(`
      CREATE TABLE public.no_key (a int, b text);
      CREATE TABLE public.deferrable_key (id int PRIMARY KEY DEFERRABLE INITIALLY IMMEDIATE, v text);
      CREATE TABLE public.nullable_key (code text UNIQUE, v text)`);
    const before = await footprint();
    const cases: [string, RegExp][] = [
      ['public.no_key', /refused: public\.no_key: has no PRIMARY KEY or UNIQUE constraint/],
      ['public.deferrable_key', /deferrable_key_pkey \(id\) is DEFERRABLE: .*inverts its order in the log/],
      ['public.nullable_key', /nullable_key_code_key allows NULL in code: make the key columns NOT NULL/],
    ];
    for (const [table, message] of cases) {
      const res = await cli('capture', 'install', table);
      expect(res.code, table).toBe(3);
      expect(res.stderr).toMatch(message);
    }
    expect(await footprint()).toEqual(before);
  });

  it('refuses a partition (naming its root), a table with row-level security, and one that does not exist', async () => {
    await db.pool.query(`
      CREATE TABLE public.parted (id int NOT NULL, part int NOT NULL, PRIMARY KEY (id, part)) PARTITION BY LIST (part);
      CREATE TABLE public.parted_0 PARTITION OF public.parted FOR VALUES IN (0);
      CREATE TABLE public.guarded (id int PRIMARY KEY);
      ALTER TABLE public.guarded ENABLE ROW LEVEL SECURITY`);
    const before = await footprint();
    const leaf = await cli('capture', 'install', 'public.parted_0');
    expect(leaf.code).toBe(3);
    expect(leaf.stderr).toMatch(/is a partition of public\.parted: .*capture public\.parted/);
    const rls = await cli('capture', 'install', 'public.guarded');
    expect(rls.code).toBe(3);
    expect(rls.stderr).toMatch(/row-level security enabled/);
    const missing = await cli('capture', 'install', 'public.nowhere');
    expect(missing.code).toBe(3);
    expect(missing.stderr).toMatch(/table public\.nowhere does not exist/);
    expect(await footprint()).toEqual(before);
  });

  it('refuses a table fed by logical replication, and a subscription that would start feeding a captured one', async () => {
    const publisher = `${db.name}_pub`;
    await db.pool.query(`CREATE DATABASE "${publisher}"`);
    const pub = new pg.Client({ connectionString: db.url.replace(`/${db.name}`, `/${publisher}`) });
    await pub.connect();
    try {
      await pub.query(`CREATE TABLE public.replicated (id int PRIMARY KEY); CREATE TABLE public.later (id int PRIMARY KEY);
        CREATE PUBLICATION p1 FOR TABLE public.replicated; CREATE PUBLICATION p2 FOR TABLE public.later`);
      await db.pool.query('CREATE TABLE public.replicated (id int PRIMARY KEY); CREATE TABLE public.later (id int PRIMARY KEY)');
      const conn = `host=127.0.0.1 port=${new URL(db.url).port || 5432} user=postgres dbname=${publisher}`;
      // Same cluster: no slot is created, and the subscription never runs; pg_subscription_rel lists the table.
      await db.pool.query(`CREATE SUBSCRIPTION s1 CONNECTION '${conn}' PUBLICATION p1 WITH (create_slot = false, enabled = false, slot_name = NONE)`);
      try {
        const before = await footprint();
        const res = await cli('capture', 'install', 'public.replicated');
        expect(res.code).toBe(3);
        expect(res.stderr).toMatch(/is fed by logical replication \(public\.replicated in pg_subscription_rel\): the apply worker fires no statement triggers/);
        expect(await footprint()).toEqual(before);

        expect((await cli('capture', 'install', 'public.later')).code).toBe(0);
        await expect(
          db.pool.query(`CREATE SUBSCRIPTION s2 CONNECTION '${conn}' PUBLICATION p2 WITH (create_slot = false, enabled = false, slot_name = NONE)`),
        ).rejects.toThrow(/refused: CREATE SUBSCRIPTION on public\.later .*public\.later is fed by logical replication/);
        expect((await one(`SELECT count(*)::int AS n FROM pg_subscription WHERE subname = 's2'`)).n).toBe(0);
        expect((await cli('capture', 'remove', 'public.later')).code).toBe(0);
      } finally {
        await db.pool.query('ALTER SUBSCRIPTION s1 SET (slot_name = NONE); DROP SUBSCRIPTION s1');
      }
    } finally {
      await pub.end();
      await db.pool.query(`DROP DATABASE "${publisher}" WITH (FORCE)`);
    }
  });

  it('refuses a login that does not own the table, or is not in genfill_service, naming the grant', async () => {
    await db.pool.query(`CREATE TABLE public.owned (id int PRIMARY KEY); ALTER TABLE public.owned OWNER TO ${OWNER}`);
    const before = await footprint();
    const outsider = await cliAs(OUTSIDER, 'capture', 'install', 'public.owned');
    expect(outsider.code).toBe(3);
    expect(outsider.stderr).toMatch(new RegExp(`${OUTSIDER} does not own public\\.owned \\(${OWNER} does\\): .*GRANT ${OWNER} TO ${OUTSIDER}`));
    // An owner who is an operator, not the fleet.
    await db.pool.query(`CREATE TABLE public.operated (id int PRIMARY KEY); ALTER TABLE public.operated OWNER TO ${OPERATOR}`);
    const notService = await cliAs(OPERATOR, 'capture', 'install', 'public.operated');
    expect(notService.code).toBe(3);
    expect(notService.stderr).toMatch(new RegExp(`it runs as a member of genfill_service \\(GRANT genfill_service TO ${OPERATOR}\\)`));
    expect(await footprint()).toEqual(before);
  });
});

describe('an installed capture', () => {
  beforeAll(async () => {
    await db.pool.query(`CREATE TABLE public.accounts (id int PRIMARY KEY, balance bigint NOT NULL);
      ALTER TABLE public.accounts OWNER TO ${OWNER};
      GRANT INSERT, UPDATE, DELETE, SELECT ON public.accounts TO ${WRITER}`);
  });

  it('is installed by the table owner in genfill_service, and captures a writer that holds no genfill privilege', async () => {
    const res = await cliAs(OWNER, 'capture', 'install', 'public.accounts');
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/granted SELECT ON public\.accounts TO genfill_owner/);
    expect(res.stdout).toMatch(/captured public\.accounts \(key id, PRIMARY KEY accounts_pkey\): triggers on 1 table/);
    expect(await one(`SELECT has_schema_privilege('${WRITER}', 'genfill', 'USAGE') AS usage`)).toEqual({ usage: false });
    // The trigger functions write the log as genfill_owner: SECURITY DEFINER, search_path and
    // the image settings pinned, no PUBLIC execute (the rule test/privileges.test.ts holds every
    // such function in genfill to).
    const fns = await db.pool.query(
      `SELECT p.proname::text AS name, pg_get_userbyid(p.proowner) AS owner, p.prosecdef AS definer, p.proconfig AS config,
              EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0) AS public_execute
         FROM pg_proc p WHERE p.pronamespace = 'genfill'::regnamespace AND p.proname ~ ('^capture_' || 'public.accounts'::regclass::oid || '_') ORDER BY 1`,
    );
    expect(fns.rows).toHaveLength(3);
    for (const f of fns.rows) {
      expect({ name: f.name, owner: f.owner, definer: f.definer, publicExecute: f.public_execute }).toEqual({
        name: f.name,
        owner: 'genfill_owner',
        definer: true,
        publicExecute: false,
      });
      expect(f.config).toEqual(
        expect.arrayContaining(['search_path=pg_catalog, pg_temp', 'extra_float_digits=1', 'DateStyle=ISO, MDY', 'IntervalStyle=postgres', 'TimeZone=UTC', 'lc_monetary=C', 'bytea_output=hex']),
      );
    }
    const w = await connectAs(WRITER);
    await w.query('INSERT INTO public.accounts VALUES (1, 100), (2, 200); UPDATE public.accounts SET balance = 150 WHERE id = 1; DELETE FROM public.accounts WHERE id = 2');
    const { rows } = await db.pool.query(`SELECT key, op, row FROM genfill.change_log WHERE source_table = 'public.accounts' ORDER BY event_id`);
    expect(rows).toEqual([
      { key: { id: 1 }, op: 'upsert', row: { id: 1, balance: 100 } },
      { key: { id: 2 }, op: 'upsert', row: { id: 2, balance: 200 } },
      { key: { id: 1 }, op: 'upsert', row: { id: 1, balance: 150 } },
      { key: { id: 2 }, op: 'delete', row: { id: 2, balance: 200 } },
    ]);
  });

  it('installs once when two installs race, the second finding it done', async () => {
    await db.pool.query(`CREATE TABLE public.raced (id int PRIMARY KEY); ALTER TABLE public.raced OWNER TO ${OWNER}`);
    const runs = await Promise.all([1, 2].map(() => cliAs(OWNER, 'capture', 'install', 'public.raced', '--json')));
    expect(runs.map((r) => r.code)).toEqual([0, 0]);
    expect(runs.map((r) => JSON.parse(r.stdout).status).sort()).toEqual(['installed', 'unchanged']);
    expect((await one(`SELECT count(*)::int AS n FROM pg_trigger WHERE tgrelid = 'public.raced'::regclass AND tgname LIKE 'genfill\\_capture\\_%'`)).n).toBe(4);
  });

  it('captures a writer with session_replication_role = replica', async () => {
    const su = await connectAs(null);
    await su.query(`SET session_replication_role = replica; INSERT INTO public.accounts VALUES (3, 300)`);
    expect(await one(`SELECT op, row FROM genfill.change_log WHERE source_table = 'public.accounts' ORDER BY event_id DESC LIMIT 1`)).toEqual({
      op: 'upsert',
      row: { id: 3, balance: 300 },
    });
  });

  it('changes nothing when installed again', async () => {
    const catalog = `SELECT (SELECT array_agg(xmin::text ORDER BY oid) FROM pg_trigger WHERE tgname LIKE 'genfill\\_capture\\_%') AS triggers,
                            (SELECT array_agg(xmin::text ORDER BY oid) FROM pg_proc WHERE proname ~ '^capture_\\d+_') AS functions,
                            (SELECT array_agg(xmin::text ORDER BY source_table) FROM genfill.captures) AS captures`;
    const before = await one(catalog);
    const res = await cliAs(OWNER, 'capture', 'install', 'public.accounts', '--json');
    expect(res.code, res.stderr).toBe(0);
    expect(JSON.parse(res.stdout)).toMatchObject({ table: 'public.accounts', status: 'unchanged', key: ['id'], changed: [], granted: [] });
    expect(await one(catalog)).toEqual(before);
  });

  it('shows its state in capture status, and install repairs what was broken behind the guard', async () => {
    const ok = await cli('capture', 'status', 'public.accounts', '--json');
    expect(ok.code).toBe(0);
    const [status] = JSON.parse(ok.stdout);
    expect(status).toMatchObject({
      table: 'public.accounts',
      mode: 'trigger',
      key: ['id'],
      healthy: true,
      problems: [],
      members: [{ table: 'public.accounts', triggers: { insert: 'A', update: 'A', delete: 'A', truncate: 'A' } }],
      log: { events: 5 },
      oldestPending: { basis: 'no-consumer' },
      openReleases: [],
    });
    expect(status.log.bytes).toBeGreaterThan(0);
    expect(status.oldestPending.eventId).toBe((await one(`SELECT min(event_id)::text AS e FROM genfill.change_log WHERE source_table = 'public.accounts'`)).e);

    // A superuser can switch the guard off; status then says what is wrong.
    await db.pool.query(`ALTER EVENT TRIGGER genfill_capture_ddl_end DISABLE;
      ALTER TABLE public.accounts DISABLE TRIGGER genfill_capture_update;
      ALTER EVENT TRIGGER genfill_capture_ddl_end ENABLE ALWAYS`);
    const broken = await cli('capture', 'status');
    expect(broken.stdout).toMatch(/public\.accounts {2}trigger {2}key \(id\) {2}BROKEN/);
    expect(broken.stdout).toMatch(/problem: trigger genfill_capture_update on public\.accounts is disabled, not ENABLE ALWAYS/);

    const repaired = await cliAs(OWNER, 'capture', 'install', 'public.accounts');
    expect(repaired.code, repaired.stderr).toBe(0);
    expect(repaired.stdout).toMatch(/repaired the capture of public\.accounts .*remade on public\.accounts/);
    expect(JSON.parse((await cli('capture', 'status', 'public.accounts', '--json')).stdout)[0].healthy).toBe(true);
  });
});

describe('the releases on a captured table', () => {
  const DRAFT = 'capture-draft@1';
  const BUILDING = 'capture-building@1';

  beforeAll(async () => {
    for (const [id, dataset] of [[DRAFT, 'orders_draft'], [BUILDING, 'orders_building']] as const) {
      const res = await cli('release', 'submit', writeRelease(workspace(), dailyRelease(id, dataset, 3)));
      expect(res.code, res.stderr).toBe(0);
    }
    const plan = await cli('plan', BUILDING);
    expect(plan.code, plan.stderr).toBe(0);
    const install = await cli('capture', 'install', 'public.orders');
    expect(install.code, install.stderr).toBe(0);
  });
  const stateOf = async (id: string) => (await one('SELECT state FROM genfill.releases WHERE id = $1', [id])).state as string;

  it('leave them open on harmless DDL and move every open one to RECONCILIATION_REQUIRED on a column change', async () => {
    await db.pool.query('CREATE INDEX orders_region_idx ON public.orders (region)');
    expect([await stateOf(DRAFT), await stateOf(BUILDING)]).toEqual(['DRAFT', 'BUILDING']);

    await db.pool.query('ALTER TABLE public.orders ADD COLUMN note text');
    expect([await stateOf(DRAFT), await stateOf(BUILDING)]).toEqual(['RECONCILIATION_REQUIRED', 'RECONCILIATION_REQUIRED']);
    const log = await one(
      `SELECT action, from_state, to_state, reason, principal, detail FROM genfill.release_log WHERE release = $1 ORDER BY id DESC LIMIT 1`,
      [BUILDING],
    );
    expect(log).toMatchObject({ action: 'source-changed', from_state: 'BUILDING', to_state: 'RECONCILIATION_REQUIRED', reason: 'SOURCE_CHANGED', principal: 'postgres' });
    expect(log.detail).toMatchObject({ table: 'public.orders', command: 'ALTER TABLE' });
    expect(log.detail.columnsAfter.at(-1)).toBe('6:note:text');
    expect(log.detail.columnsBefore).toHaveLength(5);

    // A second change is logged for a release already blocked, which stays blocked.
    await db.pool.query('ALTER TABLE public.orders ALTER COLUMN note TYPE varchar(200)');
    const again = await db.pool.query(`SELECT from_state, to_state FROM genfill.release_log WHERE release = $1 AND action = 'source-changed' ORDER BY id`, [DRAFT]);
    expect(again.rows).toEqual([
      { from_state: 'DRAFT', to_state: 'RECONCILIATION_REQUIRED' },
      { from_state: 'RECONCILIATION_REQUIRED', to_state: 'RECONCILIATION_REQUIRED' },
    ]);
  });

  it('refuses remove while one is open; after they end, remove drops triggers and functions and keeps the log', async () => {
    await db.pool.query(`INSERT INTO public.orders (order_id, customer_id, region, created_at, amount_cents) VALUES (900001, 1, 'north', '2025-07-01', 5)`);
    const refused = await cli('capture', 'remove', 'public.orders');
    expect(refused.code).toBe(3);
    expect(refused.stderr).toMatch(/is the source of open releases capture-building@1 \(RECONCILIATION_REQUIRED\), capture-draft@1 \(RECONCILIATION_REQUIRED\)/);
    expect((await one(`SELECT count(*)::int AS n FROM pg_trigger WHERE tgrelid = 'public.orders'::regclass AND tgname LIKE 'genfill\\_capture\\_%'`)).n).toBe(4);

    for (const id of [DRAFT, BUILDING]) expect((await cli('cancel', id)).code).toBe(0);
    const events = (await one(`SELECT count(*)::int AS n FROM genfill.change_log WHERE source_table = 'public.orders'`)).n as number;
    const removed = await cli('capture', 'remove', 'public.orders');
    expect(removed.code, removed.stderr).toBe(0);
    expect(removed.stdout).toMatch(new RegExp(`removed the capture of public\\.orders: dropped its triggers on 1 table; its ${events} events stay in the change log`));
    expect(
      await one(`SELECT (SELECT count(*)::int FROM pg_trigger WHERE tgrelid = 'public.orders'::regclass AND tgname LIKE 'genfill\\_capture\\_%') AS triggers,
                        (SELECT count(*)::int FROM pg_proc WHERE proname ~ ('^capture_' || 'public.orders'::regclass::oid || '_')) AS functions,
                        (SELECT count(*)::int FROM genfill.captures WHERE source_table = 'public.orders') AS captures`),
    ).toEqual({ triggers: 0, functions: 0, captures: 0 });
    // Uncaptured: writes and DDL are the table's own business again.
    await db.pool.query('ALTER TABLE public.orders DROP COLUMN note; TRUNCATE public.orders_enriched');
    expect((await one(`SELECT count(*)::int AS n FROM genfill.change_log WHERE source_table = 'public.orders'`)).n).toBe(events);
    const twice = await cli('capture', 'remove', 'public.orders');
    expect(twice.code).toBe(0);
    expect(twice.stdout).toMatch(/public\.orders is not captured: nothing to remove/);
  });
});
