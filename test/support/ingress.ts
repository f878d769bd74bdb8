// Ingress fixtures: an external source's mirror table, its events as NDJSON, and what a test
// reads back (the mirror, the change log, genfill's key revisions).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type pg from 'pg';

/** The orders of a source outside the database, mirrored; `note` tells "" from NULL. */
export function mirrorDdl(table: string): string {
  return `CREATE TABLE ${table} (
    order_id     bigint PRIMARY KEY,
    customer_id  bigint NOT NULL,
    region       text NOT NULL,
    created_at   timestamptz NOT NULL,
    amount_cents bigint NOT NULL,
    note         text
  )`;
}

export interface IngressEventLine {
  key: { order_id: number };
  revision: number;
  op: 'upsert' | 'delete';
  row?: Record<string, unknown> | null;
}

export function upsert(id: number, revision: number, note: string | null, amount = 1000): IngressEventLine {
  return {
    key: { order_id: id },
    revision,
    op: 'upsert',
    row: { order_id: id, customer_id: 7, region: 'north', created_at: '2025-07-01T10:00:00Z', amount_cents: amount, note },
  };
}

export function del(id: number, revision: number): IngressEventLine {
  return { key: { order_id: id }, revision, op: 'delete' };
}

/** Write events (or raw lines) as an NDJSON file; returns its path. */
export function writeEvents(dir: string, name: string, lines: (IngressEventLine | string)[]): string {
  const file = join(dir, name);
  writeFileSync(file, lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n') + '\n');
  return file;
}

export function ndjson(lines: (IngressEventLine | string)[]): string {
  return lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n') + '\n';
}

export async function mirrorRow(pool: pg.Pool, table: string, id: number): Promise<{ note: string | null; amount_cents: string } | null> {
  const { rows } = await pool.query(`SELECT note, amount_cents::text FROM ${table} WHERE order_id = $1`, [id]);
  return rows[0] ?? null;
}

/** The change log of one key of the mirror: [op, revision, note] in event order. */
export async function loggedEvents(pool: pg.Pool, table: string, id: number): Promise<[string, number, string | null | undefined][]> {
  const { rows } = await pool.query(
    `SELECT op, revision::int AS revision, row FROM genfill.change_log WHERE source_table = $1 AND key = jsonb_build_object('order_id', $2::bigint) ORDER BY event_id`,
    [table, id],
  );
  return rows.map((r) => [r.op, r.revision, r.row === null ? undefined : r.row.note]);
}

/** What genfill holds for a key: its revision and whether it is a tombstone. */
export async function keyState(pool: pg.Pool, table: string, id: number): Promise<{ revision: number; deleted: boolean } | null> {
  const { rows } = await pool.query(
    `SELECT revision::int AS revision, deleted FROM genfill.ingress_keys WHERE source_table = $1 AND key = jsonb_build_object('order_id', $2::bigint)`,
    [table, id],
  );
  return rows[0] ?? null;
}

/** Row counts of everything an ingest writes. */
export interface IngressCounts {
  mirror: number;
  change_log: number;
  ingress_keys: number;
  conflicts: number;
  dataset_log: number;
  release_log: number;
}

export async function ingressCounts(pool: pg.Pool, table: string): Promise<IngressCounts> {
  const { rows } = await pool.query(
    `SELECT (SELECT count(*)::int FROM ${table}) AS mirror,
            (SELECT count(*)::int FROM genfill.change_log) AS change_log,
            (SELECT count(*)::int FROM genfill.ingress_keys) AS ingress_keys,
            (SELECT count(*)::int FROM genfill.ingress_conflicts) AS conflicts,
            (SELECT count(*)::int FROM genfill.dataset_log) AS dataset_log,
            (SELECT count(*)::int FROM genfill.release_log) AS release_log`,
  );
  return rows[0];
}
