// Bounded verbs (issue 28, findings 4 and 5): a verb's bound or retention is the owner's
// (genfill.settings, migration 0026), never its caller's. Each finding is tried as the plain
// login that found it — an operator, the API's login, two readers — and shown refused with
// nothing changed: the ingest bound a NULL used to skip, the conflict recorder people could
// call with forged JSON, the compaction watermark one event at revision 9e18 raised for good,
// junk requests queued without end in front of a real cutover, a reader renewing another's
// lease (or its own forever), and quarantine of any key with events.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { installIngressMirror } from '@genfill/capture';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure, urlAs } from './support/db.ts';
import { createExampleSchema, dailyRelease, workspace, writeRelease } from './support/fixtures.ts';
import { del, ingressCounts, mirrorDdl, upsert, type IngressEventLine } from './support/ingress.ts';
import { REDIS_URL } from './support/redis.ts';

const db = await createTestDatabase('trust_bounded_verbs');
const MIRROR = 'public.h3_orders';
const DATASET = 'h3_ingress';
const RELEASE = 'h3-ingress@1';
const LEASED = 'h3_pairs';
const env = { DATABASE_URL: db.url, REDIS_URL, GENFILL_LOG_LEVEL: 'silent' };

/** Plain logins (cluster-wide, created idempotently, never dropped). */
const LOGINS = {
  genfill_h3_oper: 'genfill_operator',
  genfill_h3_appr: 'genfill_approver',
  genfill_h3_reader_a: 'genfill_reader',
  genfill_h3_reader_b: 'genfill_reader',
  genfill_h3_api: 'genfill_api',
} as const;
type Login = keyof typeof LOGINS;

const clients: pg.Client[] = [];
async function as(login: Login): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: urlAs(db, login) });
  c.on('error', () => undefined);
  await c.connect();
  clients.push(c);
  return c;
}
const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
const count = async (table: string) => (await one(`SELECT count(*)::int AS n FROM ${table}`)).n as number;
/** What a statement raised (its SQLSTATE and message), or 'succeeded'. */
async function refusal(c: pg.Client, sql: string, values: unknown[] = []): Promise<{ code: string; message: string }> {
  return c.query(sql, values).then(
    () => ({ code: 'succeeded', message: '' }),
    (e: { code?: string; message: string }) => ({ code: e.code ?? '?', message: e.message }),
  );
}
/** The owner writes a setting (the test's superuser stands in for genfill_owner). */
const setSetting = (name: string, value: string) => db.pool.query('UPDATE genfill.settings SET value = $2 WHERE name = $1', [name, value]);

/** Stage events in the login's session and call the verb, in one transaction; rolled back on error. */
async function stageAndApply(c: pg.Client, events: IngressEventLine[], call = 'SELECT * FROM genfill.ingest_apply($1)') {
  await c.query('BEGIN');
  try {
    await c.query('CREATE TEMPORARY TABLE ingress_events (line integer, event jsonb) ON COMMIT DROP');
    await c.query('GRANT SELECT ON pg_temp.ingress_events TO genfill_owner');
    await c.query(`INSERT INTO pg_temp.ingress_events SELECT i::int, e FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS x(e, i)`, [JSON.stringify(events)]);
    const { rows } = await c.query(call, [DATASET]);
    await c.query('COMMIT');
    return { ok: true as const, row: rows[0] };
  } catch (e) {
    await c.query('ROLLBACK');
    const err = e as { code?: string; message: string };
    return { ok: false as const, code: err.code ?? '?', message: err.message };
  }
}
const pendingEvents = async () => (await one(`SELECT count(*)::int AS n FROM genfill.change_log WHERE source_table = $1`, [MIRROR])).n as number;
const watermark = async () => (await one(`SELECT compacted_revision::text AS r FROM genfill.ingress_mirrors WHERE source_table = $1`, [MIRROR])).r as string;
const stateOf = async (id: string) => (await one('SELECT state FROM genfill.releases WHERE id = $1', [id])).state as string;

beforeAll(async () => {
  expect((await runCli(['migrate'], env)).code).toBe(0);
  for (const [login, role] of Object.entries(LOGINS)) {
    await db.pool.query(`DO $$ BEGIN CREATE ROLE ${login} LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
    await db.pool.query(`GRANT ${role} TO ${login}`);
  }
  await createExampleSchema(db.pool);
  await db.pool.query(mirrorDdl(MIRROR));
  await installIngressMirror(db.pool, MIRROR);
  const spec = dailyRelease(RELEASE, DATASET, 3);
  spec.source.table = MIRROR;
  expect((await runCli(['release', 'submit', writeRelease(workspace(), spec)], env)).code).toBe(0);
  // A readable generation for the reader leases, built by hand (no release made it).
  await db.pool.query(`CREATE TABLE public.h3_pairs_shape (region text NOT NULL, seq bigint NOT NULL, note text);
    INSERT INTO genfill.datasets (name, target_table, source_table, key_columns, time_column) VALUES ('${LEASED}', 'public.h3_pairs', 'public.h3_pairs_src', '{region,seq}', 'seq');
    INSERT INTO genfill.generations (dataset, generation, state) VALUES ('${LEASED}', 'p1', 'ACTIVE');
    UPDATE genfill.datasets SET active_generation = 'p1' WHERE name = '${LEASED}';
    SELECT genfill.create_parent('${LEASED}', 'public.h3_pairs_shape'::regclass, '{region,seq}');
    SELECT genfill.add_generation('${LEASED}', 'p1');`);
});
beforeEach(() => keepOnFailure(db));
afterAll(async () => {
  await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
});

describe('ingest: the pending bound is the owner’s', () => {
  it('refuses an operator past a bound of 5 whether or not it passes NULL: busy, nothing written, pending unchanged', async () => {
    const oper = await as('genfill_h3_oper');
    await setSetting('ingest.max_pending_events', '5');
    expect(await stageAndApply(oper, [upsert(1, 1, 'a'), upsert(2, 1, 'b'), upsert(3, 1, 'c')])).toMatchObject({ ok: true, row: { applied: '3' } });
    const before = await ingressCounts(db.pool, MIRROR);
    expect(await pendingEvents()).toBe(3);

    // The NULL that skipped the bound has nowhere to go: the caller's bound is not an argument.
    const withNull = await stageAndApply(oper, [upsert(4, 1, 'd'), upsert(5, 1, 'e'), upsert(6, 1, 'f')], 'SELECT * FROM genfill.ingest_apply($1, NULL)');
    expect(withNull).toMatchObject({ ok: false, code: '42883' });
    // 3 pending + 3 more pass 5: busy.
    const busy = await stageAndApply(oper, [upsert(4, 1, 'd'), upsert(5, 1, 'e'), upsert(6, 1, 'f')]);
    expect(busy).toMatchObject({ ok: false, code: 'GFB01', message: expect.stringMatching(/has 3 pending events; 3 more would pass GENFILL_MAX_PENDING_EVENTS \(5\)/) });
    // 20 events in one file: more than the bound alone.
    const twenty = await stageAndApply(oper, Array.from({ length: 20 }, (_, i) => upsert(100 + i, 1, 'x')));
    expect(twenty).toMatchObject({ ok: false, code: 'GFI01', message: expect.stringMatching(/20 events in one file, more than GENFILL_MAX_PENDING_EVENTS \(5\)/) });

    expect(await pendingEvents()).toBe(3);
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);
    await setSetting('ingest.max_pending_events', '1000000');
  });

  it('refuses people a write to the settings: operator, approver, reader and the API login', async () => {
    for (const login of ['genfill_h3_oper', 'genfill_h3_appr', 'genfill_h3_reader_a', 'genfill_h3_api'] as const) {
      const c = await as(login);
      const r = await refusal(c, `UPDATE genfill.settings SET value = '999999999' WHERE name = 'ingest.max_pending_events'`);
      expect({ login, code: r.code }).toEqual({ login, code: '42501' });
      expect((await c.query(`SELECT genfill.setting('ingest.max_pending_events') AS v`)).rows[0].v).toBe('1000000');
    }
  });
});

describe('ingress conflicts are recorded by ingest alone', () => {
  it('refuses ingress_record_conflict to an operator and to the API login: permission denied, release state and conflicts unchanged', async () => {
    const state = await stateOf(RELEASE);
    // The forged conflict could have moved it: the transition table allows the move.
    expect((await one(`SELECT count(*)::int AS n FROM genfill.release_transitions WHERE from_state = $1 AND to_state = 'RECONCILIATION_REQUIRED'`, [state])).n).toBe(1);
    const forged = JSON.stringify([{ key: { order_id: 1 }, revision: 999, incoming: [{ line: 1, op: 'upsert', row: {} }], stored: null }]);
    const conflicts = await count('genfill.ingress_conflicts');
    for (const login of ['genfill_h3_oper', 'genfill_h3_api'] as const) {
      const c = await as(login);
      const r = await refusal(c, 'SELECT * FROM genfill.ingress_record_conflict($1, $2)', [DATASET, forged]);
      expect({ login, code: r.code }).toEqual({ login, code: '42501' });
    }
    expect(await stateOf(RELEASE)).toBe(state);
    expect(await count('genfill.ingress_conflicts')).toBe(conflicts);
    expect((await one(`SELECT count(*)::int AS n FROM pg_proc p WHERE p.oid = 'genfill.ingress_record_conflict(text, jsonb)'::regprocedure
                         AND (has_function_privilege('genfill_service', p.oid, 'EXECUTE') OR has_function_privilege('genfill_api', p.oid, 'EXECUTE')
                              OR has_function_privilege('genfill_operator', p.oid, 'EXECUTE'))`)).n).toBe(0);
  });
});

describe('tombstone compaction: one event cannot raise the watermark', () => {
  it('keeps accepting new keys after compaction with a revision-9e18 delete, even at a retention of 0', async () => {
    const oper = await as('genfill_h3_oper');
    expect(await stageAndApply(oper, [del(50, 9e18)])).toMatchObject({ ok: true, row: { deletes: '1' } });
    // An ordinary later delete: it has not reached 9e18, so it is no evidence for it.
    expect(await stageAndApply(oper, [upsert(51, 10, 'a'), del(51, 11)])).toMatchObject({ ok: true });
    await db.pool.query(`UPDATE genfill.ingress_keys SET changed_at = now() - interval '30 days' WHERE source_table = $1 AND key = '{"order_id": 50}'`, [MIRROR]);
    const before = await watermark();

    // The retention is not the caller's any more.
    expect(await refusal(oper, `SELECT genfill.ingress_compact_tombstones($1, interval '0 seconds')`, [DATASET])).toMatchObject({ code: '42883' });
    await setSetting('ingress.tombstone_retention', '0 seconds');
    const { rows } = await oper.query('SELECT genfill.ingress_compact_tombstones($1) AS n', [DATASET]);
    expect(rows[0].n).toBe('0');
    expect(await watermark()).toBe(before);
    expect(await one(`SELECT revision::text AS r, deleted FROM genfill.ingress_keys WHERE source_table = $1 AND key = '{"order_id": 50}'`, [MIRROR])).toEqual({
      r: '9000000000000000000',
      deleted: true,
    });

    // A new key at a low revision is still accepted.
    expect(await stageAndApply(oper, [upsert(52, 5, 'new')])).toMatchObject({ ok: true, row: { applied: '1', refused: '0' } });
    await setSetting('ingress.tombstone_retention', '7 days');
  });
});

describe('requests are bounded: one open per kind and release, a cap per principal, arguments checked in the verb', () => {
  const open = async () => (await one(`SELECT count(*)::int AS n FROM genfill.requests WHERE state IN ('PENDING', 'RUNNING')`)).n as number;
  const closeAll = () => db.pool.query(`UPDATE genfill.requests SET state = 'FAILED', finished_at = now() WHERE state IN ('PENDING', 'RUNNING')`);

  it('does not queue a second open request of the same kind and release: the same arguments get the open id, others are refused', async () => {
    await closeAll();
    const oper = await as('genfill_h3_oper');
    const first = (await oper.query(`SELECT genfill.request('catchup', $1, '{}')::text AS id`, [RELEASE])).rows[0].id;
    const again = (await oper.query(`SELECT genfill.request('catchup', $1, '{}')::text AS id`, [RELEASE])).rows[0].id;
    expect(again).toBe(first);
    const api = await as('genfill_h3_api');
    await api.query('BEGIN');
    await api.query(`SET LOCAL genfill.principal = 'someone-else'`);
    expect((await api.query(`SELECT genfill.request('catchup', $1, NULL)::text AS id`, [RELEASE])).rows[0].id).toBe(first);
    await api.query('COMMIT');
    expect(await open()).toBe(1);

    await oper.query(`SELECT genfill.request('cutover', $1, '{"dryRun": true}')`, [RELEASE]);
    const other = await refusal(oper, `SELECT genfill.request('cutover', $1, '{}')`, [RELEASE]);
    expect(other).toMatchObject({ code: 'GFQ01', message: expect.stringMatching(/a cutover request for release h3-ingress@1 is open already/) });
    expect(await open()).toBe(2);
  });

  it('refuses a principal past the owner’s cap of open requests, and queues nothing', async () => {
    await closeAll();
    await setSetting('request.max_open_per_principal', '2');
    const oper = await as('genfill_h3_oper');
    await oper.query(`SELECT genfill.request('catchup', $1, '{}')`, [RELEASE]);
    await oper.query(`SELECT genfill.request('seal', $1, '{}')`, [RELEASE]);
    const before = await count('genfill.requests');
    const third = await refusal(oper, `SELECT genfill.request('reconcile', $1, '{}')`, [RELEASE]);
    expect(third).toMatchObject({ code: 'GFQ02', message: expect.stringMatching(/genfill_h3_oper has 2 open requests/) });
    expect(await count('genfill.requests')).toBe(before);
    await setSetting('request.max_open_per_principal', '20');
  });

  it('refuses arguments that do not fit the kind’s schema (an unknown key, a waitMs of 10^12) with nothing inserted', async () => {
    await closeAll();
    const oper = await as('genfill_h3_oper');
    const before = await count('genfill.requests');
    const cases: [string, string, RegExp][] = [
      ['catchup', '{"junk": 1}', /args\.junk: unknown key/],
      ['seal', '{"waitMs": 1000000000000}', /args\.waitMs: at most 1800000/],
      ['seal', '{"waitMs": "soon"}', /args\.waitMs: expected an integer, not string/],
      ['seal', '{"waitMs": 1.5}', /args\.waitMs: expected an integer/],
      ['unseal', '{}', /args\.reason: required/],
      ['repair', '{"partitions": [""]}', /args\.partitions\.0: at least 1 characters/],
      ['cutover', '{"maxFreezeMs": 0}', /args\.maxFreezeMs: at least above 0/],
    ];
    for (const [kind, args, message] of cases) {
      const r = await refusal(oper, 'SELECT genfill.request($1, $2, $3)', [kind, RELEASE, args]);
      expect({ kind, args, code: r.code }).toEqual({ kind, args, code: 'GFQ03' });
      expect(r.message).toMatch(message);
    }
    expect(await count('genfill.requests')).toBe(before);
    // Arguments that fit are queued.
    await oper.query(`SELECT genfill.request('seal', $1, '{"waitMs": 1800000}')`, [RELEASE]);
    expect(await count('genfill.requests')).toBe(before + 1);
    await closeAll();
  });
});

describe('reader leases are their principal’s, and end', () => {
  const lease = (holder: string) =>
    one(`SELECT principal, taken_at, expires_at FROM genfill.reader_leases WHERE dataset = $1 AND generation = 'p1' AND holder = $2`, [LEASED, holder]);

  it('refuses reader B renewing or releasing reader A’s lease: the lease stays A’s, with its expiry', async () => {
    const a = await as('genfill_h3_reader_a');
    const b = await as('genfill_h3_reader_b');
    await a.query(`SELECT genfill.reader_lease($1, 'p1', 'report', 60000)`, [LEASED]);
    const before = await lease('report');
    expect(before.principal).toBe('genfill_h3_reader_a');

    const renew = await refusal(b, `SELECT genfill.reader_lease($1, 'p1', 'report', 86400000)`, [LEASED]);
    expect(renew).toMatchObject({ code: 'GFQ04', message: expect.stringMatching(/held by another principal: a principal renews only its own lease/) });
    expect((await b.query(`SELECT genfill.reader_lease_release($1, 'p1', 'report') AS released`, [LEASED])).rows[0].released).toBe(false);
    expect(await lease('report')).toEqual(before);
  });

  it('does not extend a lease past the owner’s maximum lifetime counted from its first grant, and refuses it once it has run out', async () => {
    await setSetting('reader_lease.max_lifetime', '1 hour');
    const a = await as('genfill_h3_reader_a');
    await a.query(`SELECT genfill.reader_lease($1, 'p1', 'long', 60000)`, [LEASED]);
    // Granted two hours ago, renewed ever since: now at its cap.
    await db.pool.query(
      `UPDATE genfill.reader_leases SET taken_at = now() - interval '2 hours', expires_at = now() + interval '1 minute' WHERE dataset = $1 AND holder = 'long'`,
      [LEASED],
    );
    const capped = await lease('long');
    await a.query(`SELECT genfill.reader_lease($1, 'p1', 'long', 86400000)`, [LEASED]);
    expect(await lease('long')).toEqual(capped);

    // Its cap passed half an hour ago: not granted again under that holder (until its row is
    // dropped, an hour after it expired).
    await db.pool.query(
      `UPDATE genfill.reader_leases SET taken_at = now() - interval '90 minutes', expires_at = now() - interval '30 minutes' WHERE dataset = $1 AND holder = 'long'`,
      [LEASED],
    );
    const ran = await lease('long');
    const again = await refusal(a, `SELECT genfill.reader_lease($1, 'p1', 'long', 60000)`, [LEASED]);
    expect(again).toMatchObject({ code: 'GFQ05', message: expect.stringMatching(/may not outlive reader_lease\.max_lifetime/) });
    expect(await lease('long')).toEqual(ran);

    // A fresh lease lasts at most the lifetime, whatever TTL it asks for.
    const expires = (await a.query(`SELECT genfill.reader_lease($1, 'p1', 'fresh', 86400000) AS e`, [LEASED])).rows[0].e as Date;
    const fresh = await lease('fresh');
    expect(expires.getTime() - fresh.taken_at.getTime()).toBeLessThanOrEqual(3600_000);
    await setSetting('reader_lease.max_lifetime', '24 hours');
  });
});

describe('quarantine is only for a key that was named', () => {
  it('refuses an operator quarantining an arbitrary key with events; the key the projector stopped on is quarantined', async () => {
    const oper = await as('genfill_h3_oper');
    expect((await one(`SELECT count(*)::int AS n FROM genfill.change_log WHERE source_table = $1 AND key = '{"order_id": 2}'`, [MIRROR])).n).toBeGreaterThan(0);
    await db.pool.query(
      `INSERT INTO genfill.projector_stops (dataset, generation, key, event_id, revision, error) VALUES ($1, 'g1', '{"order_id": 1}', 1, 1, 'poison')`,
      [DATASET],
    );
    const before = await count('genfill.quarantined_keys');
    const arbitrary = await refusal(oper, `SELECT * FROM genfill.quarantine_key($1, '{"order_id": 2}', 'hide it')`, [DATASET]);
    expect(arbitrary).toMatchObject({ code: 'GFQ06', message: expect.stringMatching(/neither the key its projector stopped on \(\{"order_id": 1\}\) nor one a reconciliation named/) });
    expect(await count('genfill.quarantined_keys')).toBe(before);
    expect(await count('genfill.projector_stops')).toBe(1);

    await oper.query(`SELECT * FROM genfill.quarantine_key($1, '{"order_id": 1}', 'poison event')`, [DATASET]);
    expect(await count('genfill.quarantined_keys')).toBe(before + 1);
    expect(await count('genfill.projector_stops')).toBe(0);
  });
});
