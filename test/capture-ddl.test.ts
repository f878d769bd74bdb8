// The DDL guard on captured tables (SPEC "Capture rules"; migration 0010): every statement that
// would let a write go unlogged is refused and changes nothing — run by the table's owner, a
// plain login, not a superuser — while harmless DDL goes through, a new partition gets the
// capture triggers, and DDL on other tables by logins that know nothing of genfill is untouched.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs as urlOf } from './support/db.ts';

const db = await createTestDatabase('capture_ddl');
const OWNER = 'genfill_capture_owner';
const STRANGER = 'genfill_capture_stranger';

const urlAs = (login: string) => urlOf(db, login);
const clients: pg.Client[] = [];
async function connectAs(login: string | null): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: login ? urlAs(login) : db.url });
  c.on('error', () => undefined);
  await c.connect();
  clients.push(c);
  return c;
}
let owner: pg.Client;

const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
/** What would let a write go unlogged, per the capture row (none while the guard holds). */
const problems = async (table: string) =>
  (await one('SELECT genfill.capture_problems(relid, source_table, key_columns) AS p FROM genfill.captures WHERE source_table = $1', [table])).p as string[];
const triggersOn = async (table: string) =>
  (await db.pool.query(`SELECT tgname::text AS name, tgenabled AS enabled FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname LIKE 'genfill\\_capture\\_%' ORDER BY 1`, [table]))
    .rows;
const ALL_ALWAYS = ['delete', 'insert', 'truncate', 'update'].map((e) => ({ name: `genfill_capture_${e}`, enabled: 'A' }));

/** As the owner: the statement fails with the guard's refusal and leaves the capture whole. */
async function refused(sql: string, pattern: RegExp, table = 'public.items'): Promise<void> {
  await expect(owner.query(sql)).rejects.toThrow(pattern);
  expect(await problems(table)).toEqual([]);
}

beforeAll(async () => {
  expect((await runCli(['migrate'], { DATABASE_URL: db.url })).code).toBe(0);
  for (const login of [OWNER, STRANGER]) {
    await db.pool.query(`DO $$ BEGIN CREATE ROLE ${login} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
  }
  await db.pool.query(`GRANT genfill_service TO ${OWNER}; GRANT CREATE ON SCHEMA public TO ${OWNER}, ${STRANGER}`);
  owner = await connectAs(OWNER);
  await owner.query(`
    CREATE TABLE public.items (id int PRIMARY KEY, sku text NOT NULL UNIQUE, qty int);
    CREATE TABLE public.events (id bigint NOT NULL, day date NOT NULL, body text, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
    CREATE TABLE public.events_2025 PARTITION OF public.events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
    CREATE TABLE public.events_2026 PARTITION OF public.events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
    INSERT INTO public.items VALUES (1, 'a', 1);
    INSERT INTO public.events VALUES (1, '2025-03-01', 'x');`);
  for (const table of ['public.items', 'public.events']) {
    const res = await runCli(['capture', 'install', table], { DATABASE_URL: urlAs(OWNER) });
    expect(res.code, res.stderr).toBe(0);
  }
});
beforeEach(() => keepOnFailure(db));
afterAll(async () => {
  await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
});

describe('refused on a captured table, as its owner', () => {
  it('refuses DISABLE TRIGGER, and ENABLE without ALWAYS, on the table or one partition', async () => {
    await refused('ALTER TABLE public.items DISABLE TRIGGER genfill_capture_insert', /refused: ALTER TABLE on public\.items .*genfill_capture_insert on public\.items is disabled/);
    await refused('ALTER TABLE public.items DISABLE TRIGGER ALL', /refused: .*is disabled/);
    await refused('ALTER TABLE public.items DISABLE TRIGGER USER', /refused: .*is disabled/);
    await refused('ALTER TABLE public.items ENABLE TRIGGER genfill_capture_update', /enabled for origin sessions only, not ENABLE ALWAYS/);
    await refused('ALTER TABLE public.items ENABLE REPLICA TRIGGER genfill_capture_delete', /enabled for replica sessions only/);
    await refused('ALTER TABLE public.events_2026 DISABLE TRIGGER genfill_capture_delete', /genfill_capture_delete on public\.events_2026 is disabled/, 'public.events');
    expect(await triggersOn('public.events_2026')).toEqual(ALL_ALWAYS);
  });

  it('refuses DROP TRIGGER and a CREATE OR REPLACE that changes or demotes a capture trigger', async () => {
    await refused('DROP TRIGGER genfill_capture_delete ON public.items', /refused: DROP TRIGGER .*genfill_capture_delete is missing on public\.items/);
    await refused('DROP TRIGGER genfill_capture_truncate ON public.events_2025', /missing on public\.events_2025/, 'public.events');
    const id = (await one(`SELECT 'public.items'::regclass::oid::text AS id`)).id as string;
    await refused(
      `CREATE OR REPLACE TRIGGER genfill_capture_insert AFTER INSERT ON public.items REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION genfill.capture_${id}_insert()`,
      /would leave it enabled for origin sessions only/,
    );
    await refused(
      'CREATE OR REPLACE TRIGGER genfill_capture_insert AFTER INSERT ON public.items FOR EACH STATEMENT EXECUTE FUNCTION genfill.capture_refuse_truncate()',
      /is named as genfill's capture trigger but is not it/,
    );
    expect(await triggersOn('public.items')).toEqual(ALL_ALWAYS);
  });

  it('refuses dropping the key, making it deferrable, or letting a unique key column hold NULL', async () => {
    await refused('ALTER TABLE public.items DROP CONSTRAINT items_pkey', /no PRIMARY KEY or UNIQUE constraint on exactly \(id\)/);
    await refused('ALTER TABLE public.items DROP CONSTRAINT items_pkey, ADD PRIMARY KEY (id) DEFERRABLE', /items_pkey on \(id\) is DEFERRABLE/);
    await refused('ALTER TABLE public.items DROP COLUMN id CASCADE', /no PRIMARY KEY/);
    await refused('ALTER TABLE public.events DROP CONSTRAINT events_pkey', /no PRIMARY KEY or UNIQUE constraint on exactly \(id, day\)/, 'public.events');
    await owner.query('CREATE TABLE public.codes (code text NOT NULL UNIQUE, v int)');
    expect((await runCli(['capture', 'install', 'public.codes'], { DATABASE_URL: urlAs(OWNER) })).code).toBe(0);
    await refused('ALTER TABLE public.codes ALTER COLUMN code DROP NOT NULL', /codes_code_key allows NULL in code/, 'public.codes');
  });

  it('refuses ATTACH of a partition holding rows, DETACH, and dropping a partition or the table', async () => {
    await owner.query(`CREATE TABLE public.events_2024 (id bigint NOT NULL, day date NOT NULL, body text);
      INSERT INTO public.events_2024 VALUES (7, '2024-05-05', 'old')`);
    await refused(
      `ALTER TABLE public.events ATTACH PARTITION public.events_2024 FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')`,
      /refused: public\.events_2024 joins the partition tree of public\.events, which is captured, with rows that never reached the change log/,
      'public.events',
    );
    await refused('ALTER TABLE public.events DETACH PARTITION public.events_2026', /public\.events_2026 left the partition tree of public\.events \(DETACH PARTITION\)/, 'public.events');
    // Refused before its first transaction commits the pending detach.
    await refused('ALTER TABLE public.events DETACH PARTITION public.events_2026 CONCURRENTLY', /DETACH PARTITION … CONCURRENTLY on public\.events, which is captured/, 'public.events');
    expect((await one(`SELECT count(*)::int AS n FROM pg_inherits WHERE inhparent = 'public.events'::regclass AND inhdetachpending`)).n).toBe(0);
    await refused('DROP TABLE public.events_2026', /public\.events_2026, a partition of a captured table, was dropped/, 'public.events');
    await refused('DROP TABLE public.events', /public\.events was dropped/, 'public.events');
    await refused('DROP TABLE public.items', /public\.items was dropped/);
    expect((await one(`SELECT count(*)::int AS n FROM pg_inherits WHERE inhparent = 'public.events'::regclass`)).n).toBe(2);
  });

  it('refuses TRUNCATE of the table and of a partition', async () => {
    await refused('TRUNCATE public.items', /refused: TRUNCATE of public\.items is not captured by genfill/);
    await refused('TRUNCATE public.events', /refused: TRUNCATE of public\.(events|events_2025) is not captured/, 'public.events');
    await refused('TRUNCATE public.events_2025', /refused: TRUNCATE of public\.events_2025/, 'public.events');
    expect((await one('SELECT count(*)::int AS n FROM public.events')).n).toBe(1);
  });

  it('refuses renaming the table or its schema, row-level security, inheriting, and revoking what the triggers read with', async () => {
    await refused('ALTER TABLE public.items RENAME TO things', /public\.items was renamed to public\.things/);
    await refused('ALTER TABLE public.items ENABLE ROW LEVEL SECURITY', /row-level security enabled/);
    await owner.query('CREATE TABLE public.base_items (id int)');
    await refused('ALTER TABLE public.items INHERIT public.base_items', /public\.items inherits from public\.base_items/);
    await refused('REVOKE SELECT ON public.items FROM genfill_owner', /REVOKE would stop genfill_owner reading public\.items/);
    // Renaming a schema needs CREATE on the database besides owning it.
    await db.pool.query(`CREATE SCHEMA shop AUTHORIZATION ${OWNER}; GRANT USAGE ON SCHEMA shop TO genfill_owner; GRANT CREATE ON DATABASE "${db.name}" TO ${OWNER}`);
    await owner.query('CREATE TABLE shop.carts (id int PRIMARY KEY)');
    expect((await runCli(['capture', 'install', 'shop.carts'], { DATABASE_URL: urlAs(OWNER) })).code).toBe(0);
    await refused('ALTER SCHEMA shop RENAME TO store', /shop\.carts was renamed to store\.carts/, 'shop.carts');
    await refused('DROP SCHEMA shop CASCADE', /refused: DROP SCHEMA on shop\.carts .*shop\.carts was dropped/, 'shop.carts');
  });

  it('refuses the same from a superuser session in replica mode', async () => {
    const su = await connectAs(null);
    await su.query('SET session_replication_role = replica');
    await expect(su.query('ALTER TABLE public.items DISABLE TRIGGER genfill_capture_insert')).rejects.toThrow(/is disabled/);
    await expect(su.query('TRUNCATE public.items')).rejects.toThrow(/TRUNCATE of public\.items/);
    expect(await problems('public.items')).toEqual([]);
  });
});

describe('let through', () => {
  it('lets harmless DDL through: CREATE INDEX, GRANT, comments, storage options, a renamed partition, a re-install', async () => {
    for (const sql of [
      'CREATE INDEX items_qty_idx ON public.items (qty)',
      'GRANT SELECT ON public.items TO genfill_reader',
      `COMMENT ON TABLE public.items IS 'captured'`,
      'ALTER TABLE public.items SET (fillfactor = 90)',
      'ALTER TABLE public.items ALTER COLUMN qty SET DEFAULT 0',
      'CREATE INDEX events_body_idx ON public.events (body)',
      'ALTER TABLE public.events_2025 RENAME TO events_y2025',
    ]) {
      await owner.query(sql);
    }
    const again = await runCli(['capture', 'install', 'public.items', '--json'], { DATABASE_URL: urlAs(OWNER) });
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout).status).toBe('unchanged');
    expect(await problems('public.items')).toEqual([]);
    expect(await problems('public.events')).toEqual([]);
  });

  it('puts the triggers on a new partition, created or attached empty, and captures writes naming it', async () => {
    await owner.query(`CREATE TABLE public.events_2027 PARTITION OF public.events FOR VALUES FROM ('2027-01-01') TO ('2028-01-01')`);
    await owner.query(`CREATE TABLE public.events_2023 (id bigint NOT NULL, day date NOT NULL, body text);
      ALTER TABLE public.events ATTACH PARTITION public.events_2023 FOR VALUES FROM ('2023-01-01') TO ('2024-01-01')`);
    for (const leaf of ['public.events_2027', 'public.events_2023']) expect(await triggersOn(leaf)).toEqual(ALL_ALWAYS);
    await owner.query(`INSERT INTO public.events_2027 VALUES (9, '2027-02-02', 'new'); INSERT INTO public.events_2023 VALUES (3, '2023-03-03', 'early')`);
    const { rows } = await db.pool.query(`SELECT key, op FROM genfill.change_log WHERE source_table = 'public.events' ORDER BY event_id DESC LIMIT 2`);
    expect(rows).toEqual([
      { key: { id: 3, day: '2023-03-03' }, op: 'upsert' },
      { key: { id: 9, day: '2027-02-02' }, op: 'upsert' },
    ]);
    expect(await problems('public.events')).toEqual([]);
  });

  it('leaves DDL on tables that are not captured alone, for a login with no genfill privilege', async () => {
    const stranger = await connectAs(STRANGER);
    await stranger.query(`CREATE TABLE public.scratch (a int, b text);
      ALTER TABLE public.scratch ADD PRIMARY KEY (a);
      CREATE TRIGGER t AFTER INSERT ON public.scratch FOR EACH STATEMENT EXECUTE FUNCTION suppress_redundant_updates_trigger();
      ALTER TABLE public.scratch DISABLE TRIGGER t;
      DROP TRIGGER t ON public.scratch;
      GRANT SELECT ON public.scratch TO PUBLIC;
      REVOKE SELECT ON public.scratch FROM PUBLIC;
      TRUNCATE public.scratch;
      DROP TABLE public.scratch`);
  });
});
