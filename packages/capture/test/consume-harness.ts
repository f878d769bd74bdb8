// A captured-like table, its writers and a consumer that rebuilds a copy of it from the change
// log, for the consumption tests. Writers log each change themselves in the same transaction
// as the table write, the way the capture trigger does (AFTER the row lock is taken, so per key
// the event ids follow commit order; revision = event id; one row per changed key; a delete is
// logged only when a row went away). The consumer is a small projector: one REPEATABLE READ
// transaction per batch reads its frontier F, consumes, applies version-aware (invariant 5:
// newer revision wins, a delete leaves a tombstone) and stores S as F in the same commit.
import type pg from 'pg';
import { quoteIdent } from '@genfill/contracts';
import { consumeBatch, newEventsStatement, type ConsumedEvent } from '../src/index.ts';

export type Op = { upsert: number; balance: number; note?: string | null } | { delete: number };

export interface BatchRecord {
  from: string;
  snapshot: string;
  /** Every event id visible in S and not in F (superseded ones included). */
  all: bigint[];
  /** What consumeBatch returned: the latest event per key. */
  latest: ConsumedEvent[];
}

export class Harness {
  readonly sourceTable: string;
  readonly batches: BatchRecord[] = [];
  private readonly t: string;
  private readonly copy: string;

  constructor(
    private readonly pool: pg.Pool,
    readonly name: string,
  ) {
    this.sourceTable = `public.${name}`;
    this.t = `public.${quoteIdent(name)}`;
    this.copy = `public.${quoteIdent(`${name}_copy`)}`;
  }

  /** The tables, and the consumer's starting frontier: a snapshot taken before any write. */
  async setup(): Promise<string> {
    await this.pool.query(`
      CREATE TABLE ${this.t} (id int PRIMARY KEY, balance bigint NOT NULL, note text);
      CREATE TABLE ${this.copy} (id int PRIMARY KEY, balance bigint, note text, _rev bigint NOT NULL, _deleted boolean NOT NULL);
      CREATE TABLE IF NOT EXISTS public.test_frontiers (consumer text PRIMARY KEY, snapshot pg_snapshot NOT NULL);`);
    const { rows } = await this.pool.query<{ s: string }>(
      `INSERT INTO public.test_frontiers VALUES ($1, pg_current_snapshot()) RETURNING snapshot::text AS s`,
      [this.name],
    );
    return rows[0]!.s;
  }

  /** The ops in the caller's transaction, each logged like the trigger would: the event ids logged. */
  async write(conn: pg.ClientBase, ops: Op[]): Promise<bigint[]> {
    const ids: bigint[] = [];
    for (const op of ops) {
      const changed =
        'upsert' in op
          ? await conn.query(
              `INSERT INTO ${this.t} AS t VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance, note = EXCLUDED.note
               RETURNING t.id, to_jsonb(t) AS image`,
              [op.upsert, op.balance, op.note ?? null],
            )
          : await conn.query(`DELETE FROM ${this.t} AS t WHERE id = $1 RETURNING t.id, to_jsonb(t) AS image`, [op.delete]);
      const row = changed.rows[0];
      if (!row) continue; // a delete of an absent key changes nothing and logs nothing
      const { rows } = await conn.query<{ id: string }>(
        `INSERT INTO genfill.change_log (event_id, source_table, key, op, row, revision)
         SELECT n, $1, jsonb_build_object('id', $2::int), $3, $4::jsonb, n FROM (SELECT nextval('genfill.change_log_event_seq') AS n) s
         RETURNING event_id::text AS id`,
        [this.sourceTable, row.id, 'upsert' in op ? 'upsert' : 'delete', row.image],
      );
      ids.push(BigInt(rows[0]!.id));
    }
    return ids;
  }

  /** One consumer batch in its own REPEATABLE READ transaction; the record is kept in `batches`. */
  async consume(): Promise<BatchRecord> {
    const c = await this.pool.connect();
    try {
      await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      const f = (await c.query<{ s: string }>(`SELECT snapshot::text AS s FROM public.test_frontiers WHERE consumer = $1`, [this.name])).rows[0]!.s;
      const batch = await consumeBatch(c, { sourceTable: this.sourceTable, from: f, order: 'event' });
      const every = newEventsStatement({ sourceTable: this.sourceTable, from: f, to: batch.snapshot });
      const all = (await c.query<{ event_id: string }>(every.text, every.values)).rows.map((r) => BigInt(r.event_id));
      await this.apply(c, batch.events);
      const stored = await c.query(`UPDATE public.test_frontiers SET snapshot = $2::pg_snapshot WHERE consumer = $1`, [this.name, batch.snapshot]);
      if (stored.rowCount !== 1) throw new Error(`frontier of ${this.name} not stored`);
      await c.query('COMMIT');
      const record = { from: f, snapshot: batch.snapshot, all, latest: batch.events };
      this.batches.push(record);
      return record;
    } catch (err) {
      await c.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      c.release();
    }
  }

  /** Version-aware upserts and tombstones, one statement (one row per key, or it fails). */
  private async apply(c: pg.ClientBase, events: ConsumedEvent[]): Promise<void> {
    if (events.length === 0) return;
    const rows = events.map((e) => ({
      id: e.key.id,
      balance: e.op === 'upsert' ? e.row!.balance : null,
      note: e.op === 'upsert' ? e.row!.note : null,
      rev: e.revision.toString(),
      deleted: e.op === 'delete',
    }));
    await c.query(
      `INSERT INTO ${this.copy} (id, balance, note, _rev, _deleted)
       SELECT (x->>'id')::int, (x->>'balance')::bigint, x->>'note', (x->>'rev')::bigint, (x->>'deleted')::boolean
         FROM jsonb_array_elements($1::jsonb) AS x
       ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance, note = EXCLUDED.note, _rev = EXCLUDED._rev, _deleted = EXCLUDED._deleted
        WHERE ${this.copy}._rev < EXCLUDED._rev`,
      [JSON.stringify(rows)],
    );
  }

  /** Rows of the table and of the copy (tombstones left out), ordered by id. */
  async tableAndCopy(): Promise<{ table: unknown[]; copy: unknown[] }> {
    const table = (await this.pool.query(`SELECT id, balance::text, note FROM ${this.t} ORDER BY id`)).rows;
    const copy = (await this.pool.query(`SELECT id, balance::text, note FROM ${this.copy} WHERE NOT _deleted ORDER BY id`)).rows;
    return { table, copy };
  }

  /** Every event id of this table in the log, read after the writers finished. */
  async loggedEventIds(): Promise<bigint[]> {
    const { rows } = await this.pool.query<{ id: string }>(`SELECT event_id::text AS id FROM genfill.change_log WHERE source_table = $1 ORDER BY event_id`, [
      this.sourceTable,
    ]);
    return rows.map((r) => BigInt(r.id));
  }

  /** Each id → the index of every batch that consumed it. */
  consumedIn(): Map<bigint, number[]> {
    const seen = new Map<bigint, number[]>();
    this.batches.forEach((b, i) => {
      for (const id of b.all) seen.set(id, [...(seen.get(id) ?? []), i]);
    });
    return seen;
  }
}

/** A client in an explicit transaction, for writers the test interleaves by hand. */
export async function begin(pool: pg.Pool): Promise<pg.PoolClient & { xid(): Promise<bigint> }> {
  const c = await pool.connect();
  await c.query('BEGIN');
  return Object.assign(c, {
    xid: async () => BigInt((await c.query<{ x: string }>(`SELECT pg_current_xact_id()::text AS x`)).rows[0]!.x),
  });
}
