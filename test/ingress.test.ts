// Ingress through `genfill ingest` (SPEC "Ingress", invariant 5; seed 003's version-aware merge
// drill): a source outside the database sends {key, revision, op, row} events; genfill's mirror
// keeps the highest revision per key, a delete leaves a tombstone that outlives late older
// events, "" is a value, and only the winners reach the change log. Equal revision with
// another payload refuses the whole file and blocks the open release; a malformed file, a busy
// dataset and a file over the bound write nothing; a plain operator ingests through the verb
// and cannot write the mirror.
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { installIngressMirror } from '@genfill/capture';
import { DATASET_ACTIONS, RELEASE_ACTIONS } from '@genfill/registry';
import { runCli } from './support/cli.ts';
import { createTestDatabase, keepOnFailure } from './support/db.ts';
import { createExampleSchema, dailyRelease, registryCounts, workspace, writeRelease } from './support/fixtures.ts';
import { del, ingressCounts, keyState, loggedEvents, mirrorDdl, mirrorRow, upsert, writeEvents } from './support/ingress.ts';
import { REDIS_URL } from './support/redis.ts';

const db = await createTestDatabase('ingress');
const MIRROR = 'public.ext_orders';
const DATASET = 'ext_enriched';
const RELEASE = 'ext-enriched@1';
const LATER = 'ext-enriched@2';
const OTHER = 'other-orders@1';
const env = { DATABASE_URL: db.url, REDIS_URL, GENFILL_LOG_LEVEL: 'silent' };
const cli = (...args: string[]) => runCli(args, env);
const dir = workspace();
let fileNo = 0;
const file = (...lines: Parameters<typeof writeEvents>[2]) => writeEvents(dir, `events-${++fileNo}.ndjson`, lines);

async function ingest(path: string) {
  const r = await runCli(['ingest', DATASET, path, '--json'], env);
  return { ...r, result: r.code === 0 ? JSON.parse(r.stdout) : null };
}
/** The owner's settings, as an operator sets them: `genfill migrate` (as the owner) with the variables set. */
async function ownerSets(vars: Record<string, string>) {
  expect((await runCli(['migrate'], { ...env, ...vars })).code).toBe(0);
}
const one = async (sql: string, values: unknown[] = []) => (await db.pool.query(sql, values)).rows[0];
const clients: pg.Client[] = [];

beforeAll(async () => {
  expect((await cli('migrate')).code).toBe(0);
  await createExampleSchema(db.pool);
  await db.pool.query(mirrorDdl(MIRROR));
  // Someone could write it before it became a mirror; afterwards only genfill does.
  await db.pool.query(`GRANT INSERT, UPDATE ON ${MIRROR} TO genfill_alice; GRANT UPDATE (note) ON ${MIRROR} TO genfill_bob`);
  await db.pool.query(`INSERT INTO ${MIRROR} VALUES (900, 1, 'east', '2025-07-02T00:00:00Z', 500, 'loaded before the install')`);
  const spec = dailyRelease(RELEASE, DATASET, 3);
  spec.source.table = MIRROR;
  expect((await cli('release', 'submit', writeRelease(workspace(), spec))).code).toBe(0);
});
beforeEach(() => keepOnFailure(db));
afterAll(async () => {
  await Promise.all(clients.map((c) => c.end().catch(() => undefined)));
});

describe('genfill capture install <table> --ingress (installIngressMirror)', () => {
  it('hands the table to genfill_owner, revokes every other write, records mode ingress and installs no trigger; again is unchanged', async () => {
    expect(await installIngressMirror(db.pool, MIRROR)).toEqual({ table: MIRROR, key: ['order_id'], status: 'installed' });
    expect(await installIngressMirror(db.pool, 'public.ext_orders')).toEqual({ table: MIRROR, key: ['order_id'], status: 'unchanged' });
    expect(await one(`SELECT pg_get_userbyid(relowner) AS owner FROM pg_class WHERE oid = $1::regclass`, [MIRROR])).toEqual({ owner: 'genfill_owner' });
    expect(await one(`SELECT mode, key_columns FROM genfill.captures WHERE source_table = $1`, [MIRROR])).toEqual({ mode: 'ingress', key_columns: ['order_id'] });
    expect((await one(`SELECT count(*)::int AS n FROM pg_trigger WHERE tgrelid = $1::regclass`, [MIRROR])).n).toBe(0);
    for (const role of ['public', 'genfill_alice', 'genfill_operator', 'genfill_service', 'genfill_api']) {
      for (const priv of ['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) {
        const can = await one(`SELECT has_table_privilege($1, $2, $3) AS ok`, [role, MIRROR, priv]);
        expect({ role, priv, ...can }).toEqual({ role, priv, ok: false });
      }
    }
    expect((await one(`SELECT has_column_privilege('genfill_bob', $1, 'note', 'UPDATE') AS ok`, [MIRROR])).ok).toBe(false);
    expect((await one(`SELECT has_table_privilege('genfill_service', $1, 'SELECT') AS ok`, [MIRROR])).ok).toBe(true);
    // The row already there is "as of the install": revision 0, which any event supersedes.
    expect(await keyState(db.pool, MIRROR, 900)).toEqual({ revision: 0, deleted: false });
  });

  it('refuses a table captured by triggers, and one with a trigger of its own', async () => {
    await db.pool.query(`INSERT INTO genfill.captures (source_table, relid, mode, key_columns) VALUES ('public.orders', 'public.orders'::regclass, 'trigger', '{order_id}')`);
    await expect(installIngressMirror(db.pool, 'public.orders')).rejects.toThrow(/captured by triggers: run `genfill capture remove public.orders`/);
    await db.pool.query(`DELETE FROM genfill.captures WHERE source_table = 'public.orders'`);
    await db.pool.query(`CREATE TABLE public.trig (id int PRIMARY KEY);
      CREATE FUNCTION public.noop() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END';
      CREATE TRIGGER t AFTER INSERT ON public.trig FOR EACH STATEMENT EXECUTE FUNCTION public.noop()`);
    await expect(installIngressMirror(db.pool, 'public.trig')).rejects.toThrow(/has triggers \(t\): a mirror has none/);
    // Refused in one transaction: the table was not handed over.
    expect(await one(`SELECT pg_get_userbyid(relowner) AS owner FROM pg_class WHERE oid = 'public.trig'::regclass`)).toEqual({ owner: 'postgres' });
  });
});

describe("seed 003's drill through genfill ingest", () => {
  it('v3 delete, v2 "", v1 "a" delivered in reverse order and twice: the key ends deleted, only the delete is logged', async () => {
    const v3 = file(del(1, 3));
    const v2 = file(upsert(1, 2, ''));
    const v1 = file(upsert(1, 1, 'a'));
    const applied: number[] = [];
    for (const f of [v3, v3, v2, v2, v1, v1]) {
      const r = await ingest(f);
      expect(r.code, r.stderr).toBe(0);
      applied.push(r.result.applied);
    }
    expect(applied).toEqual([1, 0, 0, 0, 0, 0]);
    expect(await mirrorRow(db.pool, MIRROR, 1)).toBeNull();
    expect(await keyState(db.pool, MIRROR, 1)).toEqual({ revision: 3, deleted: true });
    expect(await loggedEvents(db.pool, MIRROR, 1)).toEqual([['delete', 3, undefined]]);
  });

  it('in order and twice: each newer revision wins once, the tombstone last; repeats change and log nothing', async () => {
    const files = [file(upsert(2, 1, 'a')), file(upsert(2, 2, '')), file(del(2, 3))];
    const applied: number[] = [];
    for (const f of files.flatMap((f) => [f, f])) applied.push((await ingest(f)).result.applied);
    expect(applied).toEqual([1, 0, 1, 0, 1, 0]);
    expect(await mirrorRow(db.pool, MIRROR, 2)).toBeNull();
    // The delete logs the row it removed (the last image, "" included).
    expect(await loggedEvents(db.pool, MIRROR, 2)).toEqual([
      ['upsert', 1, 'a'],
      ['upsert', 2, ''],
      ['delete', 3, ''],
    ]);
  });

  it('one file holding the three in reverse order, twice over, applies and logs only the winner', async () => {
    const f = file(del(3, 3), upsert(3, 2, ''), upsert(3, 1, 'a'), del(3, 3), upsert(3, 2, ''), upsert(3, 1, 'a'));
    const first = await ingest(f);
    expect(first.result).toMatchObject({ events: 6, applied: 1, deletes: 1, upserts: 0, stale: 5, refused: 0 });
    const again = await ingest(f);
    expect(again.result).toMatchObject({ events: 6, applied: 0, stale: 6 });
    expect(await mirrorRow(db.pool, MIRROR, 3)).toBeNull();
    expect(await loggedEvents(db.pool, MIRROR, 3)).toEqual([['delete', 3, undefined]]);
  });

  it('a late v1 (or v2) does not resurrect a deleted key and is not logged; a newer revision does bring it back', async () => {
    for (const f of [file(upsert(1, 1, 'a')), file(upsert(1, 2, 'late'))]) {
      expect((await ingest(f)).result).toMatchObject({ applied: 0, stale: 1 });
    }
    expect(await mirrorRow(db.pool, MIRROR, 1)).toBeNull();
    expect(await loggedEvents(db.pool, MIRROR, 1)).toEqual([['delete', 3, undefined]]);
    expect((await ingest(file(upsert(1, 4, 'back')))).result).toMatchObject({ applied: 1 });
    expect(await mirrorRow(db.pool, MIRROR, 1)).toMatchObject({ note: 'back' });
    expect(await loggedEvents(db.pool, MIRROR, 1)).toEqual([
      ['delete', 3, undefined],
      ['upsert', 4, 'back'],
    ]);
  });

  it('keeps "" as a value, distinct from NULL, in the mirror and the log', async () => {
    expect((await ingest(file(upsert(4, 1, ''), upsert(5, 1, null)))).result).toMatchObject({ applied: 2 });
    expect(await mirrorRow(db.pool, MIRROR, 4)).toMatchObject({ note: '' });
    expect(await mirrorRow(db.pool, MIRROR, 5)).toMatchObject({ note: null });
    expect(await loggedEvents(db.pool, MIRROR, 4)).toEqual([['upsert', 1, '']]);
    expect(await loggedEvents(db.pool, MIRROR, 5)).toEqual([['upsert', 1, null]]);
  });

  it('takes a revision as a number in any JSON spelling or as a string of digits beyond 2^53', async () => {
    const r = await ingest(file('{"key": {"order_id": 6}, "revision": 1.0, "op": "delete"}', '{"key": {"order_id": 7}, "revision": "9007199254740993", "op": "delete"}'));
    expect(r.code, r.stderr).toBe(0);
    expect(await keyState(db.pool, MIRROR, 6)).toEqual({ revision: 1, deleted: true });
    const big = await one(`SELECT revision::text FROM genfill.ingress_keys WHERE key = '{"order_id": 7}'`);
    expect(big).toEqual({ revision: '9007199254740993' });
    const unsafe = await ingest(file('{"key": {"order_id": 8}, "revision": 9007199254740993, "op": "delete"}'));
    expect(unsafe.code).toBe(2);
    expect(unsafe.stderr).toMatch(/line 1: revision: .*beyond 2\^53/);
  });

  it('supersedes a row loaded before the install (revision 0) with any event, and records the ingest with its principal', async () => {
    expect((await ingest(file(upsert(900, 1, 'from the source')))).result).toMatchObject({ applied: 1 });
    expect(await mirrorRow(db.pool, MIRROR, 900)).toMatchObject({ note: 'from the source' });
    const log = await one(`SELECT action, principal, detail FROM genfill.dataset_log WHERE dataset = $1 ORDER BY id DESC LIMIT 1`, [DATASET]);
    expect(log).toMatchObject({ action: DATASET_ACTIONS.ingest, principal: 'postgres', detail: { events: 1, applied: 1, sourceTable: MIRROR } });
  });
});

describe('lines as the source sends them (COPY into the staging table)', () => {
  it("keeps a line's backslashes, escaped quotes, tabs and CRs exactly; blank lines keep the numbers of the lines after them", async () => {
    const note = 'back\\slash "quoted" tab\there \\N \\. end';
    // JSON whitespace between the tokens: a tab and a CR.
    const line = JSON.stringify(upsert(70, 1, note)).replace(',"revision"', ',\t"revision"').replace(',"op"', ',\r"op"');
    const r = await ingest(file(line, '', upsert(71, 1, 'after a blank line')));
    expect(r.code, r.stderr).toBe(0);
    expect(r.result).toMatchObject({ events: 2, applied: 2 });
    expect(await mirrorRow(db.pool, MIRROR, 70)).toMatchObject({ note });
    expect(await loggedEvents(db.pool, MIRROR, 70)).toEqual([['upsert', 1, note]]);

    const before = await ingressCounts(db.pool, MIRROR);
    const typed = await ingest(file(upsert(72, 1, 'ok'), '', '', { ...upsert(73, 1, 'x'), row: { ...upsert(73, 1, 'x').row, created_at: 'not a date' } }));
    expect(typed.code).toBe(2);
    expect(typed.stderr).toMatch(/line 4: invalid input syntax for type timestamp with time zone: "not a date"/);
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);
  });

  it('a line PostgreSQL cannot hold as jsonb (a lone surrogate) is exit 2 naming its line, and writes nothing', async () => {
    const before = await ingressCounts(db.pool, MIRROR);
    const lone = JSON.stringify(upsert(75, 1, 'x')).replace('"note":"x"', '"note":"\\ud800"');
    const r = await ingest(file(upsert(74, 1, 'ok'), '', '', lone, upsert(76, 1, 'ok')));
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/line 4: invalid input syntax for type json \(Unicode low surrogate must follow a high surrogate\.\)/);
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);
    expect(await mirrorRow(db.pool, MIRROR, 74)).toBeNull();
  });

  it('a file of new keys and held ones is applied key by key: the new inserted, the newer revision applied, the stale one a no-op', async () => {
    const r = await ingest(file(upsert(77, 1, 'new'), upsert(4, 2, 'newer'), upsert(5, 1, null)));
    expect(r.result).toMatchObject({ events: 3, applied: 2, upserts: 2, stale: 1 });
    expect(await mirrorRow(db.pool, MIRROR, 77)).toMatchObject({ note: 'new' });
    expect(await mirrorRow(db.pool, MIRROR, 4)).toMatchObject({ note: 'newer' });
    expect(await loggedEvents(db.pool, MIRROR, 4)).toEqual([
      ['upsert', 1, ''],
      ['upsert', 2, 'newer'],
    ]);
    expect(await loggedEvents(db.pool, MIRROR, 5)).toEqual([['upsert', 1, null]]);
  });

  it('the verb checks every staged event itself, whatever the client sent: each line that does not fit is named (GFI01), nothing written', async () => {
    const before = await ingressCounts(db.pool, MIRROR);
    const row = (id: number) => upsert(id, 1, 'x').row!;
    const events: [number, unknown][] = [
      [1, [1]],
      [2, { key: { order_id: 80 }, revision: 1, op: 'upsert2', row: row(80) }],
      [3, { key: { order_id: 80 }, revision: 0, op: 'upsert', row: row(80) }],
      [4, { key: { order_id: 80 }, revision: 1.5, op: 'upsert', row: row(80) }],
      [5, { key: { order_id: 81, x: 1 }, revision: 1, op: 'upsert', row: row(81) }],
      [6, { key: { order_id: null }, revision: 1, op: 'delete' }],
      [7, { key: { order_id: 82 }, revision: 1, op: 'upsert' }],
      [8, { key: { order_id: 83 }, revision: 1, op: 'upsert', row: { ...row(83), colour: 'red' } }],
      [9, { key: { order_id: 84 }, revision: 1, op: 'upsert', row: { ...row(84), note: undefined } }],
      [10, { key: { order_id: 85 }, revision: 1, op: 'upsert', row: row(99) }],
      [11, { key: { order_id: 86 }, revision: '12a', op: 'delete' }],
      [12, upsert(87, 1, 'fits')],
      [13, null],
    ];
    const c = await db.pool.connect();
    try {
      await c.query('BEGIN');
      await c.query('CREATE TEMPORARY TABLE ingress_events (line integer, event jsonb) ON COMMIT DROP');
      await c.query('GRANT SELECT ON pg_temp.ingress_events TO genfill_owner');
      await c.query('INSERT INTO ingress_events SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(line integer, event jsonb)', [
        JSON.stringify(events.map(([line, event]) => ({ line, event }))),
      ]);
      const err = await c.query(`SELECT * FROM genfill.ingest_apply($1)`, [DATASET]).then(
        () => null,
        (e: { code?: string; detail?: string }) => e,
      );
      expect(err?.code).toBe('GFI01');
      expect(JSON.parse(err!.detail!)).toEqual([
        { line: 1, message: 'an event is a JSON object {key, revision, op, row}' },
        { line: 2, message: 'op must be "upsert" or "delete"' },
        { line: 3, message: 'revision must be an integer > 0' },
        { line: 4, message: 'revision must be an integer > 0' },
        { line: 5, message: 'key must be an object with exactly the key columns (order_id)' },
        { line: 6, message: 'a key column is null' },
        { line: 7, message: 'an upsert carries row, the full row as an object' },
        { line: 8, message: `row has columns ${MIRROR} does not: colour` },
        { line: 9, message: `row lacks columns of ${MIRROR}: note (send the full row; null is a value)` },
        { line: 10, message: 'the key columns of row differ from key' },
        { line: 11, message: 'revision must be an integer > 0' },
      ]);
    } finally {
      await c.query('ROLLBACK');
      c.release();
    }
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);
  });
});

describe('what ingest refuses', () => {
  it('equal revision with another payload: exit 3 naming the key, nothing applied, the conflict recorded, the open release moved to RECONCILIATION_REQUIRED', async () => {
    expect((await ingest(file(upsert(10, 1, 'x')))).code).toBe(0);
    // The same revision and payload again is harmless.
    expect((await ingest(file(upsert(10, 1, 'x')))).result).toMatchObject({ applied: 0, stale: 1 });
    await db.pool.query(`UPDATE genfill.releases SET state = 'SNAPSHOT_PINNED' WHERE id = $1`, [RELEASE]);
    // A second open release of the dataset, still a draft; and one of a dataset with another source.
    const later = dailyRelease(LATER, DATASET, 2);
    later.source.table = MIRROR;
    later.range = { from: '2025-07-10T00:00:00Z', to: '2025-07-12T00:00:00Z' };
    expect((await cli('release', 'submit', writeRelease(workspace(), later))).code).toBe(0);
    expect((await cli('release', 'submit', writeRelease(workspace(), dailyRelease(OTHER, 'other_orders', 2)))).code).toBe(0);
    const before = await ingressCounts(db.pool, MIRROR);

    const r = await ingest(file(upsert(11, 1, 'fresh'), upsert(10, 1, 'y'), del(1, 9)));
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/refused: conflict in dataset ext_enriched: equal revision with another payload for key \{"order_id":10\} at revision 1/);
    expect(r.stderr).toMatch(new RegExp(`moved to RECONCILIATION_REQUIRED: ${RELEASE}, ${LATER}`));
    // Nothing of the file was applied: not the conflicting line, not the others.
    expect(await mirrorRow(db.pool, MIRROR, 10)).toMatchObject({ note: 'x' });
    expect(await mirrorRow(db.pool, MIRROR, 11)).toBeNull();
    expect(await mirrorRow(db.pool, MIRROR, 1)).toMatchObject({ note: 'back' });
    const after = await ingressCounts(db.pool, MIRROR);
    expect(after).toEqual({ ...before, conflicts: before.conflicts + 1, dataset_log: before.dataset_log + 1, release_log: before.release_log + 2 });

    const conflict = await one(`SELECT dataset, key, revision::int, incoming, stored, releases, principal FROM genfill.ingress_conflicts ORDER BY id DESC LIMIT 1`);
    expect(conflict).toMatchObject({
      dataset: DATASET,
      key: { order_id: 10 },
      revision: 1,
      incoming: [{ line: 2, op: 'upsert', row: { note: 'y' } }],
      stored: { op: 'upsert', row: { note: 'x' } },
      releases: [RELEASE, LATER],
      principal: 'postgres',
    });
    const states = await db.pool.query(`SELECT id, state FROM genfill.releases WHERE id = ANY($1) ORDER BY id`, [[RELEASE, LATER, OTHER]]);
    expect(Object.fromEntries(states.rows.map((x) => [x.id, x.state]))).toEqual({
      [RELEASE]: 'RECONCILIATION_REQUIRED',
      [LATER]: 'RECONCILIATION_REQUIRED',
      [OTHER]: 'DRAFT',
    });
    expect(await one(`SELECT action, from_state, to_state, principal FROM genfill.release_log WHERE release = $1 ORDER BY id DESC LIMIT 1`, [RELEASE])).toEqual({
      action: RELEASE_ACTIONS.ingressConflict,
      from_state: 'SNAPSHOT_PINNED',
      to_state: 'RECONCILIATION_REQUIRED',
      principal: 'postgres',
    });
    expect(await one(`SELECT action FROM genfill.dataset_log WHERE dataset = $1 ORDER BY id DESC LIMIT 1`, [DATASET])).toEqual({ action: DATASET_ACTIONS.ingestConflict });
  });

  it('two lines of one file at one revision with other payloads, and a delete against a live row at its revision, are conflicts too', async () => {
    const inFile = await ingest(file(upsert(12, 1, 'a'), upsert(12, 1, 'b')));
    expect(inFile.code).toBe(3);
    expect(inFile.stderr).toMatch(/key \{"order_id":12\} at revision 1 \(two lines of the file disagree\)/);
    expect(await one(`SELECT stored, jsonb_array_length(incoming) AS n FROM genfill.ingress_conflicts ORDER BY id DESC LIMIT 1`)).toEqual({ stored: null, n: 2 });
    const deleteAtEqual = await ingest(file(del(10, 1)));
    expect(deleteAtEqual.code).toBe(3);
    expect(await mirrorRow(db.pool, MIRROR, 10)).toMatchObject({ note: 'x' });
    expect(await mirrorRow(db.pool, MIRROR, 12)).toBeNull();
  });

  it('a malformed file (two bad lines) is exit 2 naming both line numbers, and writes nothing', async () => {
    const before = { ingress: await ingressCounts(db.pool, MIRROR), registry: await registryCounts(db.pool) };
    const good = upsert(20, 1, 'ok');
    const r = await ingest(file(good, '{"key": {"order_id": 21}, "revision": 1, "op": "upsert", "row": ', upsert(22, 1, 'ok'), { ...upsert(23, 1, 'x'), revision: 0 }, upsert(24, 1, 'ok')));
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/invalid: 2 problems, nothing was written/);
    expect(r.stderr).toMatch(/line 2: not JSON/);
    expect(r.stderr).toMatch(/line 4: revision: /);
    expect(r.stderr).not.toMatch(/line [135]/);
    expect({ ingress: await ingressCounts(db.pool, MIRROR), registry: await registryCounts(db.pool) }).toEqual(before);
    expect(await mirrorRow(db.pool, MIRROR, 20)).toBeNull();
  });

  it('checks each line against the mirror: key columns, the full row, and values the column types accept (exit 2 with line numbers)', async () => {
    const before = await ingressCounts(db.pool, MIRROR);
    const noKey = { key: { id: 25 }, revision: 1, op: 'upsert', row: upsert(25, 1, 'x').row };
    const extra = { ...upsert(26, 1, 'x'), row: { ...upsert(26, 1, 'x').row, colour: 'red' } };
    const otherKey = { ...upsert(27, 1, 'x'), key: { order_id: 28 } };
    const shape = await ingest(file(JSON.stringify(noKey), JSON.stringify(extra), JSON.stringify(otherKey), { key: { order_id: 29 }, revision: 1, op: 'upsert' }));
    expect(shape.code).toBe(2);
    expect(shape.stderr).toMatch(/line 1: key must name exactly the key columns \(order_id\)/);
    expect(shape.stderr).toMatch(/line 2: row has columns the mirror does not: colour/);
    expect(shape.stderr).toMatch(/line 3: row.order_id differs from key.order_id/);
    expect(shape.stderr).toMatch(/line 4: an upsert carries row/);

    const typed = await ingest(file(upsert(30, 1, 'ok'), { ...upsert(31, 1, 'x'), row: { ...upsert(31, 1, 'x').row, created_at: 'not a date' } }, { ...upsert(32, 1, 'x'), row: { ...upsert(32, 1, 'x').row, amount_cents: 'lots' } }));
    expect(typed.code).toBe(2);
    expect(typed.stderr).toMatch(/line 2: invalid input syntax for type timestamp with time zone: "not a date"/);
    expect(typed.stderr).toMatch(/line 3: invalid input syntax for type bigint: "lots"/);
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);
  });

  it('busy at the pending bound: exit 3 and nothing written; a file larger than the bound alone is exit 2; a frontier makes room', async () => {
    const pending = (await one(`SELECT count(*)::int AS n FROM genfill.change_log WHERE source_table = $1`, [MIRROR])).n;
    expect(pending).toBeGreaterThan(0);
    const before = await ingressCounts(db.pool, MIRROR);
    const two = file(upsert(40, 1, 'a'), upsert(41, 1, 'b'));

    await ownerSets({ GENFILL_MAX_PENDING_EVENTS: String(pending + 1) });
    const busy = await ingest(two);
    expect(busy.code).toBe(3);
    expect(busy.stderr).toMatch(new RegExp(`dataset ${DATASET} is busy: ${pending} events are pending and 2 more would pass GENFILL_MAX_PENDING_EVENTS \\(${pending + 1}\\); nothing was written — retry in \\d+s`));
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);

    await ownerSets({ GENFILL_MAX_PENDING_EVENTS: '1' });
    const tooBig = await ingest(two);
    expect(tooBig.code).toBe(2);
    expect(tooBig.stderr).toMatch(/2 events in one file, more than GENFILL_MAX_PENDING_EVENTS \(1\): split the file/);
    expect(await ingressCounts(db.pool, MIRROR)).toEqual(before);

    // Up to the bound exactly is fine.
    await ownerSets({ GENFILL_MAX_PENDING_EVENTS: String(pending + 2) });
    expect((await ingest(two)).result).toMatchObject({ applied: 2 });

    // What the active generation's frontier has consumed is no longer pending.
    await db.pool.query(`INSERT INTO genfill.generations (dataset, generation, state) VALUES ($1, 'g0', 'ACTIVE');
                         UPDATE genfill.datasets SET active_generation = 'g0' WHERE name = $1;
                         INSERT INTO genfill.frontiers (dataset, generation, snapshot) VALUES ($1, 'g0', pg_current_snapshot())`.replaceAll('$1', `'${DATASET}'`));
    try {
      await ownerSets({ GENFILL_MAX_PENDING_EVENTS: '2' });
      expect((await ingest(file(upsert(42, 1, 'a'), upsert(43, 1, 'b')))).result).toMatchObject({ applied: 2 });
      expect((await ingest(file(upsert(44, 1, 'a')))).code).toBe(3);
    } finally {
      await db.pool.query(`DELETE FROM genfill.frontiers WHERE dataset = $1`, [DATASET]);
      await db.pool.query(`UPDATE genfill.datasets SET active_generation = NULL WHERE name = $1`, [DATASET]);
      await ownerSets({ GENFILL_MAX_PENDING_EVENTS: '1000000' });
    }
  });

  it('a dataset whose source is not an ingress mirror is exit 3 naming `genfill capture install <table> --ingress`', async () => {
    expect((await cli('release', 'submit', writeRelease(workspace(), dailyRelease('plain@1', 'plain_orders', 2)))).code).toBe(0);
    const r = await runCli(['ingest', 'plain_orders', file(upsert(1, 1, 'a'))], env);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/the source of dataset plain_orders, public.orders, is not an ingress mirror: run `genfill capture install public.orders --ingress` first/);
    const missing = await runCli(['ingest', 'no_such', file(upsert(1, 1, 'a'))], env);
    expect(missing.code).toBe(3);
    expect(missing.stderr).toMatch(/dataset no_such does not exist/);
  });
});

describe('concurrent ingests', () => {
  it('race over the same keys: each key ends at its highest revision, and its log never goes back in revision', async () => {
    const ids = Array.from({ length: 3_000 }, (_, i) => 100_000 + i);
    // One file sends revision 2 for even keys and 1 for odd ones, the other the reverse.
    const a = file(...ids.map((id) => upsert(id, id % 2 === 0 ? 2 : 1, `a${id}`)));
    const b = file(...ids.map((id) => upsert(id, id % 2 === 0 ? 1 : 2, `b${id}`)));
    const [ra, rb] = await Promise.all([ingest(a), ingest(b)]);
    expect([ra.code, rb.code], ra.stderr + rb.stderr).toEqual([0, 0]);
    expect(ra.result.applied + rb.result.applied).toBeGreaterThanOrEqual(ids.length);
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS keys,
              count(*) FILTER (WHERE m.note = CASE WHEN m.order_id % 2 = 0 THEN 'a' ELSE 'b' END || m.order_id)::int AS right_payload,
              count(*) FILTER (WHERE k.revision = 2)::int AS at_two
         FROM ${MIRROR} m JOIN genfill.ingress_keys k ON k.source_table = $1 AND k.key = jsonb_build_object('order_id', m.order_id)
        WHERE m.order_id >= 100000`,
      [MIRROR],
    );
    expect(rows[0]).toEqual({ keys: ids.length, right_payload: ids.length, at_two: ids.length });
    const backwards = await one(
      `SELECT count(*)::int AS n FROM (
         SELECT revision < lag(revision) OVER (PARTITION BY key ORDER BY event_id) AS back
           FROM genfill.change_log WHERE source_table = $1 AND (key ->> 'order_id')::bigint >= 100000) s
        WHERE back`,
      [MIRROR],
    );
    expect(backwards.n).toBe(0);
  });
});

describe('a plain operator login', () => {
  it('ingests through the verb, recorded as its login, and cannot write the mirror or genfill\'s tables directly (42501)', async () => {
    await db.pool.query(`DO $$ BEGIN CREATE ROLE genfill_ivan LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
    await db.pool.query(`GRANT genfill_operator TO genfill_ivan; GRANT USAGE ON SCHEMA public TO genfill_operator`);
    const u = new URL(db.url);
    u.username = 'genfill_ivan';
    const asIvan = { ...env, DATABASE_URL: u.toString() };

    const r = await runCli(['ingest', DATASET, file(upsert(50, 1, 'by ivan'), del(51, 2)), '--json'], asIvan);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ events: 2, applied: 2 });
    expect(await mirrorRow(db.pool, MIRROR, 50)).toMatchObject({ note: 'by ivan' });
    expect(await one(`SELECT action, principal FROM genfill.dataset_log WHERE dataset = $1 ORDER BY id DESC LIMIT 1`, [DATASET])).toEqual({
      action: DATASET_ACTIONS.ingest,
      principal: 'genfill_ivan',
    });

    const c = new pg.Client({ connectionString: u.toString() });
    c.on('error', () => undefined);
    await c.connect();
    clients.push(c);
    const attempts: [string, string][] = [
      ['insert into the mirror', `INSERT INTO ${MIRROR} VALUES (52, 1, 'north', now(), 1, 'direct')`],
      ['update the mirror', `UPDATE ${MIRROR} SET note = 'direct' WHERE order_id = 50`],
      ['delete from the mirror', `DELETE FROM ${MIRROR} WHERE order_id = 50`],
      ['truncate the mirror', `TRUNCATE ${MIRROR}`],
      ['write the change log', `INSERT INTO genfill.change_log (source_table, key, op, revision) VALUES ('${MIRROR}', '{"order_id": 50}', 'delete', 99)`],
      ['forge a revision', `UPDATE genfill.ingress_keys SET revision = 0`],
      ['make a mirror', `SELECT * FROM genfill.ingress_install('public.orders', NULL)`],
    ];
    for (const [what, sql] of attempts) {
      const err = await c.query(sql).then(
        () => null,
        (e: { code?: string }) => e,
      );
      expect({ what, code: err?.code ?? 'succeeded' }).toEqual({ what, code: '42501' });
    }
    // The verb reads only a plain table of the caller's own session: not a view that could run
    // the caller's code as genfill_owner.
    await c.query('BEGIN');
    await c.query(`CREATE TEMPORARY VIEW ingress_events AS SELECT 1 AS line, '{"order_id": 50}'::jsonb AS key, 9::bigint AS revision, 'delete'::text AS op, NULL::jsonb AS row`);
    await expect(c.query(`SELECT * FROM genfill.ingest_apply($1)`, [DATASET])).rejects.toMatchObject({ code: 'GFR01', message: /stage the events first/ });
    await c.query('ROLLBACK');
    expect(await mirrorRow(db.pool, MIRROR, 50)).toMatchObject({ note: 'by ivan' });
  });
});

// Last: compaction raises the mirror's watermark, which refuses low revisions of unseen keys.
describe('tombstone retention', () => {
  it('compacts tombstones older than GENFILL_TOMBSTONE_RETENTION that a later delete passed; an event at or below a compacted revision is refused, not applied', async () => {
    expect((await ingest(file(upsert(60, 1, 'a'), del(60, 5)))).result).toMatchObject({ applied: 1 });
    expect(await keyState(db.pool, MIRROR, 60)).toEqual({ revision: 5, deleted: true });
    // A day-old tombstone outlives a 2-day retention; an 8-day-old one does not — once a later
    // delete has reached its revision (those of keys 7 and 8 above, at 9007199254740993): one
    // event alone never raises the watermark (test/trust-bounded-verbs.test.ts).
    await db.pool.query(`UPDATE genfill.ingress_keys SET changed_at = now() - interval '1 day' WHERE key = '{"order_id": 60}'`);
    await ownerSets({ GENFILL_TOMBSTONE_RETENTION: '2d' });
    expect((await ingest(file(upsert(61, 10, 'n')))).result).toMatchObject({ applied: 1, compactedTombstones: 0 });
    await ownerSets({ GENFILL_TOMBSTONE_RETENTION: '7d' });
    await db.pool.query(`UPDATE genfill.ingress_keys SET changed_at = now() - interval '8 days' WHERE key = '{"order_id": 60}'`);
    expect((await ingest(file(upsert(62, 10, 'n')))).result).toMatchObject({ applied: 1, compactedTombstones: 1 });
    expect(await keyState(db.pool, MIRROR, 60)).toBeNull();
    expect(await one(`SELECT compacted_revision::int AS r, compacted_keys::int AS n FROM genfill.ingress_mirrors WHERE source_table = $1`, [MIRROR])).toEqual({ r: 5, n: 1 });

    const late = await ingest(file(upsert(60, 4, 'zombie'), upsert(63, 11, 'new')));
    expect(late.result).toMatchObject({ events: 2, applied: 1, refused: 1, refusedKeys: [{ order_id: 60 }] });
    expect(late.stderr).toMatch(/warning: 1 events not applied: at or below a compacted tombstone's revision/);
    expect(await mirrorRow(db.pool, MIRROR, 60)).toBeNull();
    expect(await loggedEvents(db.pool, MIRROR, 60)).toEqual([['delete', 5, undefined]]);
    // Above the watermark the key is new again.
    expect((await ingest(file(upsert(60, 6, 'reborn')))).result).toMatchObject({ applied: 1 });
    expect(await mirrorRow(db.pool, MIRROR, 60)).toMatchObject({ note: 'reborn' });
  });
});
