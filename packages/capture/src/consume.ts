// The consumption primitive the projector and catch-up share (SPEC invariant 6, "Capture
// rules"): the events of one source visible in a snapshot S and not visible in the consumer's
// previous frontier F, latest per key. The predicate is the SPEC's efficient form, written once
// here (`newEventsWhere`):
//
//   (txid >= xmax(F) OR txid = ANY(xip(F)))   -- index- and pruning-friendly prefilter, implied
//   AND txid < xmax(S)                         -- by the exact test on the next line
//   AND pg_visible_in_snapshot(txid, S) AND NOT pg_visible_in_snapshot(txid, F)
//
// Not `txid >= xmin(F)`: one long transaction pins xmin(F) and that range becomes the whole log
// (bench/capture.ts over 1M events behind one open transaction: 0.25 ms for this shape, 249 ms
// for that one; docs/capture.md "Consumption"). The OR is planned as a BitmapOr of two scans
// of change_log_table_txid_idx, and the constant bounds prune the txid partitions at plan time.
//
// The caller owns the transaction: `consumeBatch` runs in its REPEATABLE READ transaction,
// returns S with the events, and the caller applies them (version-aware, invariant 5) and
// stores exactly that S as its new frontier in the same commit. The read itself filters by S
// explicitly, and a statement after S sees at least what S sees, so the read is exact under any
// isolation; REPEATABLE READ is required because the apply that follows must see the database
// the events came from.
import { RefusedError, type Query } from '@genfill/contracts';
import type { Conn } from '@genfill/registry';

/**
 * What "latest per key" means: capture events by event id (their revision is the event id),
 * ingress events by the source's revision (event id breaks ties, which a mirror that logs only
 * newer revisions never produces).
 */
export type ConsumeOrder = 'event' | 'revision';

export interface ConsumeRange {
  /** The captured table as genfill.change_log.source_table spells it (`public.orders`). */
  sourceTable: string;
  /** F: the consumer's previous frontier (GENESIS_SNAPSHOT for a consumer that has seen nothing). */
  from: string;
  /** S: the snapshot this batch consumes up to. */
  to: string;
}

export interface ConsumedEvent {
  eventId: bigint;
  key: Record<string, unknown>;
  op: 'upsert' | 'delete';
  /** The row image (for a delete, the last one). */
  row: Record<string, unknown> | null;
  revision: bigint;
  txid: bigint;
}

export interface ConsumedBatch {
  /** F, as passed in. */
  from: string;
  /** S: store exactly this as the new frontier in the commit that applies `events`. */
  snapshot: string;
  /** The latest event per key among those visible in S and not in F, ordered by key. */
  events: ConsumedEvent[];
}

const COLUMNS = 'event_id, key, op, row, revision, txid';

/** The predicate over genfill.change_log: source $1, visible in S ($3) and not in F ($2). */
export function newEventsWhere(): string {
  return `source_table = $1
   AND (txid >= pg_snapshot_xmax($2::pg_snapshot) OR txid = ANY (ARRAY(SELECT pg_snapshot_xip($2::pg_snapshot))))
   AND txid < pg_snapshot_xmax($3::pg_snapshot)
   AND pg_visible_in_snapshot(txid, $3::pg_snapshot)
   AND NOT pg_visible_in_snapshot(txid, $2::pg_snapshot)`;
}

/**
 * The latest event per key of `sourceTable` visible in `to` and not in `from`. Columns
 * event_id, key, op, row, revision, txid (their log types), one row per key, ordered by key:
 * usable on its own or as a subquery of an apply statement.
 */
export function consumeStatement(range: ConsumeRange & { order: ConsumeOrder }): Query {
  const latest = range.order === 'revision' ? 'revision DESC, event_id DESC' : 'event_id DESC';
  return {
    text: `SELECT DISTINCT ON (key) ${COLUMNS}
  FROM genfill.change_log
 WHERE ${newEventsWhere()}
 ORDER BY key, ${latest}`,
    values: [range.sourceTable, range.from, range.to],
  };
}

/**
 * Every event of `sourceTable` visible in `to` and not in `from`, superseded ones included,
 * in event-id order: what a catch-up root or a pending-events bound counts, and what a test
 * compares with the log.
 */
export function newEventsStatement(range: ConsumeRange): Query {
  return {
    text: `SELECT ${COLUMNS}
  FROM genfill.change_log
 WHERE ${newEventsWhere()}
 ORDER BY event_id`,
    values: [range.sourceTable, range.from, range.to],
  };
}

/** The consumer's transaction is not REPEATABLE READ (or SERIALIZABLE): nothing was read. */
export class ConsumeIsolationError extends RefusedError {
  constructor(readonly isolation: string) {
    super(
      `consumption needs a REPEATABLE READ transaction (invariant 6), this one is ${isolation}: ` +
        'BEGIN ISOLATION LEVEL REPEATABLE READ, consume, apply, store the snapshot, COMMIT',
    );
  }
}

/**
 * The current snapshot does not contain the frontier: the frontier came from another cluster,
 * or was edited by hand. Consuming from it would skip or repeat events, so nothing is read.
 */
export class FrontierAheadError extends RefusedError {
  constructor(
    readonly frontier: string,
    readonly current: string,
  ) {
    super(
      `the frontier ${frontier} is not contained in the current snapshot ${current}: it was not taken on this database; ` +
        'restore the stored frontier or start the consumer from a watermark of this database',
    );
  }
}

interface EventRow {
  event_id: string;
  key: Record<string, unknown>;
  op: 'upsert' | 'delete';
  row: Record<string, unknown> | null;
  revision: string;
  txid: string;
}

function toConsumedEvent(r: EventRow): ConsumedEvent {
  return { eventId: BigInt(r.event_id), key: r.key, op: r.op, row: r.row, revision: BigInt(r.revision), txid: BigInt(r.txid) };
}

/**
 * One batch in the caller's REPEATABLE READ transaction: S = pg_current_snapshot() (the
 * transaction's snapshot), the latest event per key visible in S and not in `from`. The caller
 * applies the events and stores `snapshot` as its frontier before it commits.
 */
export async function consumeBatch(conn: Pick<Conn, 'query'>, opts: { sourceTable: string; from: string; order: ConsumeOrder }): Promise<ConsumedBatch> {
  const { rows } = await conn.query<{ isolation: string; s: string; contains: boolean }>(
    `SELECT current_setting('transaction_isolation') AS isolation, pg_current_snapshot()::text AS s,
            genfill.snapshot_contains(pg_current_snapshot(), $1::pg_snapshot) AS contains`,
    [opts.from],
  );
  const now = rows[0]!;
  if (now.isolation !== 'repeatable read' && now.isolation !== 'serializable') throw new ConsumeIsolationError(now.isolation);
  if (!now.contains) throw new FrontierAheadError(opts.from, now.s);
  const q = consumeStatement({ sourceTable: opts.sourceTable, from: opts.from, to: now.s, order: opts.order });
  const events = await conn.query<EventRow>(q.text, q.values);
  return { from: opts.from, snapshot: now.s, events: events.rows.map(toConsumedEvent) };
}
