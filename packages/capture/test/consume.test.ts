// The consumption primitive under long, aborted, savepoint and out-of-order transactions
// (SPEC invariant 6): a consumer that applies each batch to a copy of the table ends with the
// copy equal to the table, and every committed event lands in exactly one batch.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createPool, migrate } from '@genfill/registry';
import { ConsumeIsolationError, consumeBatch, consumeStatement, FrontierAheadError, GENESIS_SNAPSHOT, parseSnapshot } from '../src/index.ts';
import { begin, Harness, type Op } from './consume-harness.ts';
import { createTestDatabase, keepOnFailure } from '../../../test/support/db.ts';
import { waitFor } from '../../../test/support/wait.ts';

const tdb = await createTestDatabase('consume');
const db = createPool({ DATABASE_URL: tdb.url } as never, 'consume-test', 12);

beforeAll(async () => {
  await migrate(db);
}, 120_000);
beforeEach(() => keepOnFailure(tdb));
afterAll(() => db.end());

/** Every committed event consumed exactly once, and the copy equal to the table. */
async function expectExactlyOnceAndEqual(h: Harness): Promise<void> {
  const logged = await h.loggedEventIds();
  const seen = h.consumedIn();
  expect([...seen.keys()].sort((a, b) => (a < b ? -1 : 1))).toEqual(logged);
  expect([...seen.values()].filter((batches) => batches.length !== 1)).toEqual([]);
  // Each batch's answer is the highest event of each key among that batch's events.
  for (const b of h.batches) {
    const all = new Set(b.all);
    expect(b.latest.every((e) => all.has(e.eventId))).toBe(true);
    expect(new Set(b.latest.map((e) => JSON.stringify(e.key))).size).toBe(b.latest.length);
  }
  const { table, copy } = await h.tableAndCopy();
  expect(copy).toEqual(table);
}

describe('consumption by snapshots', () => {
  it('consumes a long transaction once, after it commits, across batches that run while it is open', async () => {
    const h = new Harness(db, 'long_tx');
    await h.setup();
    const long = await begin(db);
    const longIds = await h.write(long, [{ upsert: 1, balance: 10 }, { upsert: 2, balance: 20 }]);
    const longXid = await long.xid();
    const others: bigint[] = [];
    for (let i = 0; i < 3; i++) {
      const w = await begin(db);
      others.push(...(await h.write(w, [{ upsert: 100 + i, balance: i }, { upsert: 100 + i, balance: i + 1 }])));
      await w.query('COMMIT');
      w.release();
      const b = await h.consume();
      // The long transaction is in progress in every S: none of its events yet.
      expect(b.all.some((id) => longIds.includes(id))).toBe(false);
      expect(parseSnapshot(b.snapshot).xip).toContain(longXid);
    }
    longIds.push(...(await h.write(long, [{ upsert: 1, balance: 11 }, { delete: 2 }])));
    await long.query('COMMIT');
    long.release();
    const after = await h.consume();
    expect(after.all.filter((id) => longIds.includes(id))).toEqual(longIds);
    // Its xid is below xmax(F): only the `txid = ANY(xip(F))` branch of the query finds it.
    const f = parseSnapshot(after.from);
    expect(longXid < f.xmax && f.xip.includes(longXid)).toBe(true);
    expect(after.latest.map((e) => [e.key.id, e.op])).toEqual([
      [1, 'upsert'],
      [2, 'delete'],
    ]);
    expect((await h.consume()).all).toEqual([]);
    await expectExactlyOnceAndEqual(h);
  });

  it('never consumes an aborted transaction or a savepoint rolled back, and keeps what was released', async () => {
    const h = new Harness(db, 'aborts');
    await h.setup();
    const aborted = await begin(db);
    const abortedIds = await h.write(aborted, [{ upsert: 1, balance: 1 }, { upsert: 2, balance: 2 }]);
    await aborted.query('ROLLBACK');
    aborted.release();
    const sp = await begin(db);
    const kept = await h.write(sp, [{ upsert: 3, balance: 3 }]);
    await sp.query('SAVEPOINT a');
    const undone = await h.write(sp, [{ upsert: 4, balance: 4 }, { upsert: 3, balance: 33 }]);
    await sp.query('ROLLBACK TO SAVEPOINT a');
    await sp.query('SAVEPOINT b');
    kept.push(...(await h.write(sp, [{ upsert: 5, balance: 5 }])));
    await sp.query('RELEASE SAVEPOINT b');
    await sp.query('COMMIT');
    sp.release();
    const b = await h.consume();
    expect(b.all).toEqual(kept);
    expect(b.all.some((id) => [...abortedIds, ...undone].includes(id))).toBe(false);
    expect(b.latest.map((e) => [e.key.id, e.row?.balance])).toEqual([
      [3, 3],
      [5, 5],
    ]);
    await expectExactlyOnceAndEqual(h);
  });

  it('consumes a transaction that commits after a later one in the batch after', async () => {
    const h = new Harness(db, 'out_of_order');
    await h.setup();
    const early = await begin(db);
    const earlyIds = await h.write(early, [{ upsert: 1, balance: 1 }]);
    const late = await begin(db);
    const lateIds = await h.write(late, [{ upsert: 2, balance: 2 }]);
    expect(await early.xid()).toBeLessThan(await late.xid());
    await late.query('COMMIT');
    const first = await h.consume();
    await early.query('COMMIT');
    const second = await h.consume();
    early.release();
    late.release();
    expect(first.all).toEqual(lateIds);
    expect(second.all).toEqual(earlyIds);
    await expectExactlyOnceAndEqual(h);
  });

  it('rebuilds the table exactly from events consumed while racing writers commit, abort and roll back savepoints', async () => {
    const h = new Harness(db, 'race');
    await h.setup();
    const KEYS = 40;
    const WRITERS = 6;
    const TXS = 60;
    // mulberry32, seeded: the same mix of operations every run (the interleaving is the machine's).
    let seed = 42;
    const rnd = (n: number) => {
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return (((t ^ (t >>> 14)) >>> 0) / 4294967296) * n | 0;
    };
    const ops = (): Op[] =>
      Array.from({ length: 1 + rnd(4) }, () => (rnd(4) === 0 ? { delete: rnd(KEYS) } : { upsert: rnd(KEYS), balance: rnd(1_000_000), note: rnd(5) === 0 ? '' : `n${rnd(9)}` }));
    const outcome = { committed: 0, aborted: 0, savepoints: 0, deadlocks: 0 };
    const undone: bigint[] = [];
    let writing = true;

    const writer = async () => {
      for (let i = 0; i < TXS; i++) {
        const c = await begin(db);
        try {
          const kind = rnd(8);
          if (kind === 0) {
            undone.push(...(await h.write(c, ops())));
            await c.query('ROLLBACK');
            outcome.aborted++;
            continue;
          }
          await h.write(c, ops());
          if (kind === 1) {
            await c.query('SAVEPOINT s');
            undone.push(...(await h.write(c, ops())));
            await c.query('ROLLBACK TO SAVEPOINT s');
            await h.write(c, ops());
            outcome.savepoints++;
          }
          await c.query('COMMIT');
          outcome.committed++;
        } catch (err) {
          // Two writers locking the same keys in opposite orders: one is a deadlock victim.
          if ((err as { code?: string }).code !== '40P01') throw err;
          await c.query('ROLLBACK');
          outcome.deadlocks++;
        } finally {
          c.release();
        }
      }
    };
    // A long transaction on keys no one else writes, spanning at least three batches; and one
    // that spans them and then aborts.
    const long = async (commit: boolean, key: number) => {
      const c = await begin(db);
      const ids = await h.write(c, [{ upsert: key, balance: 1 }]);
      const xid = await c.xid();
      const openIn = () => h.batches.filter((b) => parseSnapshot(b.snapshot).xip.includes(xid)).length;
      await waitFor('three batches that see the long transaction in progress', async () => openIn() >= 3);
      ids.push(...(await h.write(c, [{ upsert: key, balance: 2 }, { upsert: key + 1, balance: 3 }])));
      await c.query(commit ? 'COMMIT' : 'ROLLBACK');
      c.release();
      if (!commit) undone.push(...ids);
      return { xid, ids };
    };
    const consumer = async () => {
      while (writing) await h.consume();
      await h.consume(); // the final batch, after every writer finished
    };

    const consuming = consumer();
    const longCommitted = long(true, 1000);
    await Promise.all([longCommitted, long(false, 2000), ...Array.from({ length: WRITERS }, writer)]).finally(() => (writing = false));
    await consuming;
    const committedLong = await longCommitted;

    await expectExactlyOnceAndEqual(h);
    const seen = h.consumedIn();
    expect(undone.filter((id) => seen.has(id))).toEqual([]);
    // The run exercised what it claims to: many batches, aborts, savepoints, and a long
    // transaction found through xip(F) after batches that ran while it was open.
    expect(h.batches.filter((b) => b.all.length > 0).length).toBeGreaterThan(5);
    expect(outcome.committed).toBeGreaterThan((WRITERS * TXS) / 2);
    expect(outcome.aborted).toBeGreaterThan(0);
    expect(outcome.savepoints).toBeGreaterThan(0);
    expect(undone.length).toBeGreaterThan(0);
    const where = seen.get(committedLong.ids[0]!)![0]!;
    expect(parseSnapshot(h.batches[where]!.from).xip).toContain(committedLong.xid);
    expect(outcome.committed + outcome.aborted + outcome.deadlocks).toBe(WRITERS * TXS);
  });
});

describe('the primitive’s contract', () => {
  it('refuses to consume outside REPEATABLE READ and reads nothing', async () => {
    const c = await db.connect();
    try {
      await c.query('BEGIN ISOLATION LEVEL READ COMMITTED');
      await expect(consumeBatch(c, { sourceTable: 'public.any', from: GENESIS_SNAPSHOT, order: 'event' })).rejects.toBeInstanceOf(ConsumeIsolationError);
      await c.query('ROLLBACK');
    } finally {
      c.release();
    }
  });

  it('refuses a frontier the current snapshot does not contain', async () => {
    const c = await db.connect();
    try {
      await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      const err = await consumeBatch(c, { sourceTable: 'public.any', from: '1:4000000000:', order: 'event' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(FrontierAheadError);
      expect((err as Error).message).toMatch(/not contained in the current snapshot/);
      await c.query('ROLLBACK');
    } finally {
      c.release();
    }
  });

  it('takes the latest event per key by event id for capture and by revision for ingress', async () => {
    const source = 'public.ingress_like';
    // Key 1: the higher revision was logged first; key 2: one event.
    await db.query(
      `INSERT INTO genfill.change_log (source_table, key, op, row, revision) VALUES
         ($1, '{"id": 1}', 'upsert', '{"v": "r9"}', 9), ($1, '{"id": 1}', 'upsert', '{"v": "r5"}', 5), ($1, '{"id": 2}', 'delete', '{"v": "x"}', 3)`,
      [source],
    );
    const now = (await db.query<{ s: string }>(`SELECT pg_current_snapshot()::text AS s`)).rows[0]!.s;
    const read = async (order: 'event' | 'revision') => {
      const q = consumeStatement({ sourceTable: source, from: GENESIS_SNAPSHOT, to: now, order });
      return (await db.query(q.text, q.values)).rows.map((r) => [r.key.id, r.op, r.revision]);
    };
    expect(await read('revision')).toEqual([
      [1, 'upsert', '9'],
      [2, 'delete', '3'],
    ]);
    expect(await read('event')).toEqual([
      [1, 'upsert', '5'],
      [2, 'delete', '3'],
    ]);
  });
});

describe('why the snapshot rule matters', () => {
  it('loses an event to an event-id high-water mark and to a watermark taken after a READ COMMITTED read, and not to consumeBatch', async () => {
    const h = new Harness(db, 'naive');
    const start = await h.setup();
    // Event ids are drawn at write time, transactions commit in another order.
    const slow = await begin(db);
    const slowIds = await h.write(slow, [{ upsert: 1, balance: 1 }]);
    const fast = await begin(db);
    const fastIds = await h.write(fast, [{ upsert: 2, balance: 2 }]);
    await fast.query('COMMIT');
    fast.release();
    expect(slowIds[0]!).toBeLessThan(fastIds[0]!);

    // (1) High-water mark: read ids above the mark, move the mark to the highest seen.
    const hwmSeen: bigint[] = [];
    let hwm = 0n;
    const hwmRead = async () => {
      const { rows } = await db.query<{ id: string }>(
        `SELECT event_id::text AS id FROM genfill.change_log WHERE source_table = $1 AND event_id > $2 ORDER BY event_id`,
        [h.sourceTable, hwm.toString()],
      );
      for (const r of rows) hwmSeen.push(BigInt(r.id));
      if (rows.length) hwm = BigInt(rows.at(-1)!.id);
    };
    // (2) READ COMMITTED: read what is committed and not in F, then take S in a later statement.
    const rcSeen: bigint[] = [];
    let rcFrontier = start;
    const rc = await db.connect();
    const rcRead = async (between?: () => Promise<void>) => {
      await rc.query('BEGIN ISOLATION LEVEL READ COMMITTED');
      const { rows } = await rc.query<{ id: string }>(
        `SELECT event_id::text AS id FROM genfill.change_log WHERE source_table = $1 AND NOT pg_visible_in_snapshot(txid, $2::pg_snapshot)`,
        [h.sourceTable, rcFrontier],
      );
      for (const r of rows) rcSeen.push(BigInt(r.id));
      await between?.();
      rcFrontier = (await rc.query<{ s: string }>(`SELECT pg_current_snapshot()::text AS s`)).rows[0]!.s;
      await rc.query('COMMIT');
    };

    await hwmRead();
    await h.consume();
    await rcRead(async () => {
      await slow.query('COMMIT'); // commits between the RC read and its watermark
    });
    slow.release();
    await hwmRead();
    await h.consume();
    await rcRead();
    rc.release();

    const all = [...slowIds, ...fastIds];
    expect(hwmSeen).toEqual(fastIds);
    expect(rcSeen).toEqual(fastIds);
    expect(h.batches.flatMap((b) => b.all).sort((a, b) => (a < b ? -1 : 1))).toEqual(all);
    await expectExactlyOnceAndEqual(h);
  });
});
