// The poison search: which staged event makes the apply fail (an error of the statement, a
// fan-out or a changed key). The apply reports the transform's OUTPUT key — for a changed key
// that is a key no event has — so whoever stops on poison (a projector batch, a catch-up round,
// the switch) searches the staged events, halving them, for the one event that fails alone: its
// key is the log's, which genfill.quarantine_key takes and the apply skips.
import type pg from 'pg';
import type { ProjectedDataset } from './dataset.ts';
import { applyStatement, EVENTS_TABLE, type ApplyRow } from './statement.ts';

/** The latest event per key of the batch, for the poison search. */
async function batchKeys(conn: pg.ClientBase): Promise<{ key: Record<string, unknown>; event_id: string; revision: string }[]> {
  const { rows } = await conn.query<{ key: Record<string, unknown>; event_id: string; revision: string }>(
    `SELECT e.key, e.event_id::text AS event_id, e.revision::text AS revision FROM ${EVENTS_TABLE} AS e ORDER BY e.event_id`,
  );
  return rows;
}

/** Whether the batch restricted to `keys` fails (an error, a fan-out or a changed key); rolled back either way. */
async function subsetFails(conn: pg.ClientBase, ds: ProjectedDataset, keys: Record<string, unknown>[]): Promise<string | null> {
  const q = applyStatement(ds);
  await conn.query('SAVEPOINT gf_probe');
  try {
    const { rows } = await conn.query<ApplyRow>(q.text, [...q.values.slice(0, 2), keys.map((k) => JSON.stringify(k))]);
    const r = rows[0]!;
    if (r.fanout) return `the transform produced key ${JSON.stringify(r.fanout[0])} more than once (fan-out)`;
    if (r.stray) return `the transform changed the key: it produced ${JSON.stringify(r.stray[0])}, which is not the event's key`;
    return null;
  } catch (err) {
    return (err as Error).message;
  } finally {
    await conn.query('ROLLBACK TO SAVEPOINT gf_probe');
  }
}

/** The staged event that fails alone: its key (the log's), the event, and why it fails. */
export interface PoisonEvent {
  key: Record<string, unknown>;
  eventId: string;
  revision: string;
  error: string;
}

/**
 * Halve the staged events until one event's key is left that fails alone. Runs in the caller's
 * transaction, each probe inside a savepoint rolled back: it writes nothing.
 */
export async function findPoison(conn: pg.ClientBase, ds: ProjectedDataset, firstError: string): Promise<PoisonEvent | null> {
  let candidates = await batchKeys(conn);
  let error = firstError;
  while (candidates.length > 1) {
    const half = candidates.slice(0, Math.ceil(candidates.length / 2));
    const why = await subsetFails(conn, ds, half.map((c) => c.key));
    if (why) {
      candidates = half;
      error = why;
    } else {
      candidates = candidates.slice(half.length);
    }
  }
  const last = candidates[0];
  if (!last) return null;
  const why = await subsetFails(conn, ds, [last.key]);
  return { key: last.key, eventId: last.event_id, revision: last.revision, error: why ?? error };
}
