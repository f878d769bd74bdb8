// Plan's second half: SNAPSHOT_PINNED → BUILDING with a row estimate per partition, then
// dispatch — one BullMQ job per unfinished partition and the queue pause mirrored from the
// operator flag. Every step is idempotent, so `genfill plan` and the planner service can run
// it at any time, twice at once, or after Redis lost every key.
import { quoteIdent, quoteQualified, RedisUnavailableError, RefusedError, wallClockBounds, type ReleaseState } from '@genfill/contracts';
import {
  asRedisUnavailable,
  qualifiedQueueName,
  releaseQueue,
  syncQueuePause,
  type Dispatcher,
} from '@genfill/queue';
import { casTransition, findDataset, getRelease, RELEASE_ACTIONS, storedGrid, takeLock, withTransaction, type Conn, type Db, type ReleaseRow } from '@genfill/registry';
import { tableColumns } from './admission.ts';
import { enqueueUnfinished, type EnqueueResult } from './enqueue.ts';
import { planRelease, type PlanResult } from './plan.ts';

/**
 * Count the source rows of every build partition in one scan: width_bucket over the sorted
 * lower bounds assigns each row its partition, so the cost is one range read of the source
 * whatever the number of partitions. A `timestamp`/`date` time column holds local times of
 * the release's timezone, so the bounds are its wall clocks, computed by Temporal like the
 * grid and bound as `timestamp` (never `AT TIME ZONE` in SQL: PostgreSQL reads CET, EET, …
 * as fixed abbreviations).
 */
export async function storeRowEstimates(conn: Conn, release: ReleaseRow): Promise<number> {
  const dataset = await findDataset(conn, release.dataset);
  if (!dataset) throw new RefusedError(`dataset ${release.dataset} is not registered`);
  // A source that is gone reads as a missing column (tableColumns looks it up with to_regclass).
  const source = await tableColumns(conn, quoteQualified(dataset.source_table));
  // The type without its modifier (what regtype names), as this check has always compared it.
  const type = source?.columns.find((c) => c.name === dataset.time_column)?.type.replace(/\([\d,]+\)/, '');
  if (!type) throw new RefusedError(`source ${dataset.source_table} has no column ${dataset.time_column} any more: the release cannot be built`);
  const local = type === 'timestamp without time zone' || type === 'date';
  if (!local && type !== 'timestamp with time zone') throw new RefusedError(`${dataset.time_column} of ${dataset.source_table} is ${type}; the time column must be timestamptz, timestamp or date`);
  // Zone-less: the build partitions (sorted by lower) with their wall-clock bounds.
  const build = local ? (await storedGrid(conn, release.id)).filter((p) => p.kind === 'build') : [];
  const wall = build.map((p) => wallClockBounds(p.lower, p.upper, release.timezone));
  const parts = local
    ? `SELECT id, lower, upper, i FROM unnest($2::text[], $3::timestamp[], $4::timestamp[]) WITH ORDINALITY AS w(id, lower, upper, i)`
    : `SELECT id, lower, upper, row_number() OVER (ORDER BY lower) AS i
         FROM genfill.partitions WHERE release = $1 AND kind = 'build'`;

  const t = `s.${quoteIdent(dataset.time_column)}`;
  const { rows } = await conn.query<{ total: string | null }>(
    `WITH parts AS (
       ${parts}
     ), bounds AS (
       SELECT array_agg(lower ORDER BY i) AS lowers, min(lower) AS lo, max(upper) AS hi FROM parts
     ), counts AS (
       SELECT width_bucket(${t}, (SELECT lowers FROM bounds)) AS i, count(*) AS n
         FROM ${quoteQualified(dataset.source_table)} s
        WHERE ${t} >= (SELECT lo FROM bounds) AND ${t} < (SELECT hi FROM bounds)
        GROUP BY 1
     ), updated AS (
       UPDATE genfill.partitions p SET est_rows = coalesce(c.n, 0)
         FROM parts LEFT JOIN counts c ON c.i = parts.i
        WHERE p.release = $1 AND p.id = parts.id
       RETURNING p.est_rows
     )
     SELECT sum(est_rows)::text AS total FROM updated`,
    local ? [release.id, build.map((p) => p.id), wall.map((w) => w.lower), wall.map((w) => w.upper)] : [release.id],
  );
  return Number(rows[0]?.total ?? 0);
}

export interface BuildStart {
  release: string;
  state: ReleaseState;
  /** True when this call moved SNAPSHOT_PINNED → BUILDING. */
  started: boolean;
  /** Sum of the partitions' estimated source rows (null when never estimated). */
  estimatedRows: number | null;
}

async function estimatedTotal(conn: Conn | Db, release: string): Promise<number | null> {
  const { rows } = await conn.query<{ total: string | null }>(
    'SELECT sum(est_rows)::text AS total FROM genfill.partitions WHERE release = $1',
    [release],
  );
  return rows[0]?.total == null ? null : Number(rows[0].total);
}

/** SNAPSHOT_PINNED → BUILDING (estimates first); any other state is returned as found. */
export async function startBuilding(db: Db, id: string): Promise<BuildStart> {
  const conn = await db.connect();
  let found: ReleaseRow;
  try {
    found = await getRelease(conn, id);
  } finally {
    conn.release();
  }
  // Only the move itself takes the release's lock: a BUILDING release is looked at by every
  // planner round, and its claims must not queue behind them.
  if (found.state !== 'SNAPSHOT_PINNED') {
    if (found.state === 'CANCELLED') throw new RefusedError(`release ${id} is CANCELLED: submit a new release`);
    return { release: id, state: found.state, started: false, estimatedRows: await estimatedTotal(db, id) };
  }
  return withTransaction(db, async (c) => {
    await takeLock(c, 'plan', id, 'exclusive');
    const release = await getRelease(c, id, { lock: 'FOR UPDATE' });
    if (release.state !== 'SNAPSHOT_PINNED') {
      return { release: id, state: release.state, started: false, estimatedRows: await estimatedTotal(c, id) };
    }
    const estimatedRows = await storeRowEstimates(c, release);
    await casTransition(c, { release: id, from: 'SNAPSHOT_PINNED', to: 'BUILDING', action: RELEASE_ACTIONS.build, detail: { estimatedRows } });
    return { release: id, state: 'BUILDING' as const, started: true, estimatedRows };
  });
}

export interface DispatchResult {
  release: string;
  state: ReleaseState | null;
  queue: string;
  /** The BullMQ queue's pause after the sync, mirroring the operator flag. */
  queuePaused: boolean;
  enqueue: EnqueueResult;
}

/**
 * Enqueue the unfinished partitions of a BUILDING release and mirror the operator's pause.
 * The pause goes first so that jobs added to a paused release wait in the paused list.
 */
export async function dispatchRelease(
  db: Db,
  dispatcher: Dispatcher,
  id: string,
  opts: { requeueFailed?: boolean } = {},
): Promise<DispatchResult> {
  const queue = releaseQueue(id, { connection: dispatcher.redis, prefix: dispatcher.prefix });
  try {
    const { rows } = await db.query<{ operator_paused: boolean }>('SELECT operator_paused FROM genfill.releases WHERE id = $1', [id]);
    const sync = await syncQueuePause(queue, rows[0]?.operator_paused ?? false);
    const enqueue = await enqueueUnfinished(db, queue, id, { ...opts, ...(dispatcher.window ? { window: dispatcher.window } : {}) });
    return { release: id, state: enqueue.state, queue: qualifiedQueueName(dispatcher.prefix, id), queuePaused: sync.paused, enqueue };
  } finally {
    await queue.close();
  }
}

export interface PlanDispatchResult extends PlanResult {
  /** The release's state after this call (PlanResult's `state` before it was BUILDING). */
  state: ReleaseState;
  build: BuildStart;
  dispatch: DispatchResult | null;
  /** Why nothing was dispatched, when nothing was. */
  note: string | null;
}

/**
 * `genfill plan`: manifest (planRelease), estimates and BUILDING (startBuilding), then
 * dispatch. Redis is reached only after the registry part is committed; `connect` failing
 * leaves a BUILDING release whose jobs the next plan (or the planner service) enqueues.
 */
export async function planAndDispatch(db: Db, id: string, connect: () => Promise<Dispatcher>): Promise<PlanDispatchResult> {
  const plan = await planRelease(db, id);
  const build = await startBuilding(db, id);
  const base = { ...plan, state: build.state, build };
  if (build.state !== 'BUILDING') {
    return { ...base, dispatch: null, note: `release ${id} is ${build.state}: nothing to enqueue` };
  }
  try {
    const dispatch = await dispatchRelease(db, await connect(), id);
    const note = dispatch.state === 'BUILDING' ? null : `release ${id} became ${dispatch.state} meanwhile: nothing to enqueue`;
    return { ...base, state: dispatch.state ?? build.state, dispatch, note };
  } catch (err) {
    const down = asRedisUnavailable(err);
    if (!down) throw err;
    throw new RedisUnavailableError(
      `release ${id} is ${build.state} in the registry, but ${down.message}: its jobs may not be enqueued. ` +
        `Re-running \`genfill plan ${id}\` is safe: it enqueues exactly the unfinished partitions.`,
      { cause: err },
    );
  }
}
