// Prepared transactions hold consumption back until they finish, and `genfill status` shows
// the oldest (SPEC "Capture rules"). The machine's server runs with max_prepared_transactions
// = 0 (changing it needs a restart under everyone's tests), so this file starts a cluster of
// its own that allows them (test/support/cluster.ts).
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeBatch, parseSnapshot, visibleIn } from '@genfill/capture';
import { runCli } from './support/cli.ts';
import { startCluster, type Cluster } from './support/cluster.ts';
import { createExampleSchema, firstGenerationRelease, workspace, writeRelease } from './support/fixtures.ts';

let cluster: Cluster;
let pool: pg.Pool;
let env: Record<string, string>;
const RELEASE = 'orders-g1@1';
const SOURCE = 'public.accounts';

beforeAll(async () => {
  cluster = await startCluster({ max_prepared_transactions: 4 });
  const admin = new pg.Client({ connectionString: cluster.url() });
  await admin.connect();
  await admin.query('CREATE DATABASE genfill');
  await admin.end();
  env = { DATABASE_URL: cluster.url('genfill') };
  pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 6 });
  const migrated = await runCli(['migrate'], env);
  expect(migrated.code).toBe(0);
  await createExampleSchema(pool);
  await pool.query('CREATE TABLE public.accounts (id int PRIMARY KEY, balance bigint NOT NULL)');
  const submitted = await runCli(['release', 'submit', writeRelease(workspace(), firstGenerationRelease())], env);
  expect(submitted.stderr).toBe('');
}, 120_000);
afterAll(async () => {
  await pool?.end();
  cluster?.stop();
});

/** Write a row and log it (as the capture trigger would), then PREPARE TRANSACTION gid. */
async function prepare(gid: string, id: number): Promise<{ eventId: string; xid: bigint }> {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await c.query('INSERT INTO public.accounts VALUES ($1, $2)', [id, id * 10]);
    const { rows } = await c.query<{ e: string; x: string }>(
      `INSERT INTO genfill.change_log (event_id, source_table, key, op, row, revision)
       SELECT n, $1, jsonb_build_object('id', $2::int), 'upsert', jsonb_build_object('id', $2::int, 'balance', $2::int * 10), n
         FROM (SELECT nextval('genfill.change_log_event_seq') AS n) s
       RETURNING event_id::text AS e, txid::text AS x`,
      [SOURCE, id],
    );
    await c.query(`PREPARE TRANSACTION '${gid}'`);
    return { eventId: rows[0]!.e, xid: BigInt(rows[0]!.x) };
  } finally {
    c.release();
  }
}

/** One consumer batch from `from`: S and the event ids it consumed. */
async function consume(from: string): Promise<{ s: string; ids: string[] }> {
  const c = await pool.connect();
  try {
    await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    const b = await consumeBatch(c, { sourceTable: SOURCE, from, order: 'event' });
    await c.query('COMMIT');
    return { s: b.snapshot, ids: b.events.map((e) => e.eventId.toString()) };
  } finally {
    c.release();
  }
}

async function status(): Promise<{ text: string; json: any; list: string }> {
  const text = await runCli(['status', RELEASE], env);
  const json = await runCli(['status', RELEASE, '--json'], env);
  const list = await runCli(['status'], env);
  expect([text.code, json.code, list.code]).toEqual([0, 0, 0]);
  return { text: text.stdout, json: JSON.parse(json.stdout), list: list.stdout };
}

describe('prepared transactions', () => {
  it('hold their events back from consumers until COMMIT PREPARED, and status names the oldest meanwhile', async () => {
    const none = await status();
    expect(none.text).not.toMatch(/^prepared/m);
    expect(none.json.preparedTransactions).toBeNull();

    let f = (await pool.query<{ s: string }>(`SELECT pg_current_snapshot()::text AS s`)).rows[0]!.s;
    const first = await prepare('gf-first', 1);
    await pool.query('INSERT INTO public.accounts VALUES (99, 0)'); // a later transaction, committed
    const second = await prepare('gf-second', 2);

    const held = await consume(f);
    expect(held.ids).toEqual([]);
    // Both in progress in S (the first below xmax(S), in xip; the second the newest xid).
    expect(parseSnapshot(held.s).xip).toContain(first.xid);
    expect([first.xid, second.xid].map((x) => visibleIn(x, parseSnapshot(held.s)))).toEqual([false, false]);
    f = held.s;

    const both = await status();
    expect(both.json.preparedTransactions).toMatchObject({
      count: 2,
      oldest: { gid: 'gf-first', xid: Number(first.xid), database: 'genfill', owner: 'postgres', preparedAt: expect.any(String) },
    });
    expect(both.json.preparedTransactions.oldest.ageSeconds).toBeGreaterThanOrEqual(0);
    const line = /^prepared\s+'gf-first' \(xid \d+, database genfill, owner postgres\) prepared at \S+, \d+s ago: it holds change-log consumption back until COMMIT PREPARED or ROLLBACK PREPARED 'gf-first'; 2 prepared transactions in all$/m;
    expect(both.text).toMatch(line);
    expect(both.list).toMatch(line);

    await pool.query(`COMMIT PREPARED 'gf-first'`);
    const released = await consume(f);
    expect(released.ids).toEqual([first.eventId]);
    f = released.s;
    const one = await status();
    expect(one.json.preparedTransactions).toMatchObject({ count: 1, oldest: { gid: 'gf-second', xid: Number(second.xid) } });
    expect(one.text).toMatch(/^prepared\s+'gf-second' .* ROLLBACK PREPARED 'gf-second'$/m);

    await pool.query(`ROLLBACK PREPARED 'gf-second'`);
    expect((await consume(f)).ids).toEqual([]);
    const after = await status();
    expect(after.json.preparedTransactions).toBeNull();
    expect(after.text).not.toMatch(/^prepared/m);
    // What the log holds: the committed one's event, never the rolled-back one's.
    const logged = await pool.query<{ e: string }>(`SELECT event_id::text AS e FROM genfill.change_log WHERE source_table = $1`, [SOURCE]);
    expect(logged.rows.map((r) => r.e)).toEqual([first.eventId]);
  });
});
