// Catch-up rounds (SPEC invariant 8): the candidate of a release follows the change log from its
// catch-up frontier CF to S, where S is the projector's committed frontier of the active
// generation — never a fresher snapshot, so CF never passes what readers of the old generation
// have seen — or, for the round after the seal, the barrier B (INGRESS_SEALED → CAUGHT_UP).
//
// CF starts, at the first round, as the containment-minimum of every watermark of the release's
// receipts, superseded ones included; a receipt written later (a repair) lowers it to include
// its watermark; only a round raises it, to its S. Why the minimum and not "not visible in the
// key's partition watermark": build P1, an event moves k into P2, repair P2 (keeping the stale
// row), repair P1 (deleting it): every current watermark contains the event, so nothing would
// re-apply it and k is lost. From the minimum, every event any receipt may have missed is
// applied again, version-aware — what a receipt already holds is rewritten with the same row.
//
// A round applies exactly what a projector batch applies (the same staged events and the same
// statement, statement.ts) to the candidate generation through the candidate's transform map,
// by each row's current time: a row whose time moved between partitions, or across the range's
// edge, ends once, in its new place and form; a delete of a key the candidate lacks is
// remembered. An event the candidate's transform fans out or re-keys refuses the round, writing
// nothing; its key is recorded in genfill.switch_stops for the operator to quarantine
// (stops.ts). Rounds and repairs of a release serialize on the release's catch-up lock (a LOCK
// TABLE on a genfill-only relation, genfill.take_lock: no login outside genfill can hold it;
// its wait ends with LockWaitTimeoutError after the session's lock_timeout).
import { containmentMinimum, formatSnapshot, parseSnapshot } from '@genfill/capture';
import { LockWaitTimeoutError, pgErrorCode, quoteIdent, RefusedError, SQLSTATE } from '@genfill/contracts';
import { casTransition, holdLock, qualifiedGenerationTable, RELEASE_ACTIONS, rootAgg, rowHashExpr, takeLock, withTransaction, type Conn, type Db } from '@genfill/registry';
import { applyStep, type Applied, EVENTS_TABLE, loadDataset } from '@genfill/projector';
import { checkDependencies } from './dependencies.ts';
import { poisonStop, recordStop, stopAdvice, type SwitchStop } from './stops.ts';

/** The table of the staged events' typed keys (stagedKeys): dropped at the round's commit. */
export const STAGED_KEYS = 'pg_temp.gf_catchup_keys';

/** A literal of `s` (release ids, generation names and zones are genfill's own, quoted all the same). */
const lit = (s: string) => `'${s.replace(/'/g, "''")}'`;

/** The instant (timestamptz) of `c`'s time column: a zone-less one holds wall clocks of the release's zone. */
function instantOf(time: string, timeType: string, timezone: string): string {
  const t = `c.${quoteIdent(time)}`;
  const zone = lit(timezone);
  return timeType === 'timestamp with time zone' ? t : timeType === 'date' ? `(${t}::timestamp AT TIME ZONE ${zone})` : `(${t} AT TIME ZONE ${zone})`;
}

/** The candidate's row of the key in `k`, through the generation's primary key (generation, key…): an index probe per key. */
function rowOfKey(gen: string, generation: string, key: string[], select: string): string {
  return `LEFT JOIN LATERAL (SELECT ${select} FROM ${gen} AS c
                    WHERE c.generation = ${lit(generation)} AND ${key.map((k) => `c.${quoteIdent(k)} = k.${quoteIdent(k)}`).join(' AND ')}) AS c ON true`;
}

export interface CatchupStatements {
  /** Stage the typed keys (one row per staged event) with their candidate row's time and whether a partition's build already holds the event. */
  keys: string[];
  /** The times (instants, text) of the candidate's rows of the staged keys before the apply (read by `keys`). */
  before: string;
  /** The same after the apply. */
  times: string;
  /** Drop the staged events a partition's build already holds (heldByWatermarks, below). */
  held: string;
}

/**
 * The statements a round runs over its staged events besides the apply, each driven by the
 * staged events and joined to the candidate through its primary key (issue 29, finding 8): the
 * events' jsonb keys are typed ONCE into a temporary table of their own (analysed: the planner
 * knows its size and how many events are held), and every lookup of a candidate row is a
 * LATERAL probe of the primary key per key. Before, the candidate was joined to
 * `jsonb_populate_record(e.key)` by a filter: on a candidate never analysed the planner took it
 * for one row and nested a scan of every staged event inside every candidate row (100k × 40k
 * pg_visible_in_snapshot calls, minutes), whatever the estimates, that shape cannot come back.
 *
 * Held: the key's candidate row was written by a partition's build (or carry copy, or repair)
 * and never since by catch-up (`_gf_rev` 0), and the event is visible in the watermark of the
 * partition's current receipt — so the row already is the transform of this image or a later
 * one. Re-applying it would rewrite the same row; it is a no-op instead (an update committed
 * inside a partition's watermark is not applied twice, one committed after it is). The round's
 * root still covers it.
 */
export function catchupStatements(o: { release: string; dataset: string; generation: string; key: string[]; time: string; timeType: string; timezone: string }): CatchupStatements {
  const gen = qualifiedGenerationTable(o.dataset, o.generation);
  const at = instantOf(o.time, o.timeType, o.timezone);
  const typed = o.key.map((k) => `k.${quoteIdent(k)}`).join(', ');
  return {
    keys: [
      `DROP TABLE IF EXISTS ${STAGED_KEYS}`,
      `CREATE TEMPORARY TABLE gf_catchup_keys ON COMMIT DROP AS
  WITH b AS MATERIALIZED (
      SELECT array_agg(p.lower ORDER BY p.lower) AS lo, array_agg(p.upper ORDER BY p.lower) AS hi, array_agg(w.watermark ORDER BY p.lower) AS wm
        FROM genfill.partitions p
        LEFT JOIN LATERAL (SELECT rc.watermark FROM genfill.current_receipts rc
                            WHERE rc.release = p.release AND rc.partition = p.id
                            ORDER BY rc.id DESC LIMIT 1) w ON true
       WHERE p.release = ${lit(o.release)})
  SELECT e.event_id, ${typed}, c.at,
         coalesce(c.fresh AND x.i >= 1 AND (c.at < b.hi[x.i] OR b.hi[x.i] = '9999-12-31 00:00:00+00')
                  AND b.wm[x.i] IS NOT NULL AND pg_visible_in_snapshot(e.txid, b.wm[x.i]), false) AS held
    FROM ${EVENTS_TABLE} AS e
   CROSS JOIN b
   CROSS JOIN LATERAL jsonb_populate_record(NULL::${gen}, e.key) AS k
   ${rowOfKey(gen, o.generation, o.key, `${at} AS at, c._gf_rev = 0 AND NOT c._gf_deleted AS fresh`)}
   CROSS JOIN LATERAL (SELECT width_bucket(c.at, b.lo) AS i) AS x`,
      `ANALYZE ${STAGED_KEYS}`,
    ],
    before: `SELECT coalesce(array_agg(k.at::text) FILTER (WHERE k.at IS NOT NULL), '{}') AS t FROM ${STAGED_KEYS} AS k`,
    times: `SELECT coalesce(array_agg(c.at::text) FILTER (WHERE c.at IS NOT NULL), '{}') AS t
              FROM ${STAGED_KEYS} AS k ${rowOfKey(gen, o.generation, o.key, `${at} AS at`)}`,
    held: `DELETE FROM ${EVENTS_TABLE} AS e USING ${STAGED_KEYS} AS k WHERE k.held AND e.event_id = k.event_id`,
  };
}

/** States in which a candidate follows the live frontier (the state does not change). */
const LIVE_STATES = ['BUILT', 'RECONCILED', 'APPROVED'];

export interface CatchupRound {
  release: string;
  generation: string;
  /** The recorded round's id; null for a round that consumed nothing (not recorded, finding 6). */
  id: string | null;
  from: string;
  to: string;
  toBarrier: boolean;
  events: number;
  upserted: number;
  tombstones: number;
  noops: number;
  quarantined: number;
  root: string;
  ms: number;
  /** INGRESS_SEALED → CAUGHT_UP happened in this round. */
  caughtUp: boolean;
}

/** The per-release lock rounds and repairs take (a repair must not run between a round's read and its write). */
export async function lockCatchup(conn: Conn, release: string): Promise<void> {
  await takeLock(conn, 'catchup', release, 'exclusive');
}

/** CF: the stored one lowered by newer receipts, or the minimum of every receipt's watermark. */
async function catchupFrontier(conn: Conn, release: string): Promise<{ cf: string; receiptsSeen: string }> {
  const { rows: stored } = await conn.query<{ snapshot: string; receipts_seen: string }>(
    `SELECT snapshot::text, receipts_seen::text FROM genfill.catchup_frontiers WHERE release = $1`,
    [release],
  );
  const since = stored[0]?.receipts_seen ?? '0';
  const { rows: receipts } = await conn.query<{ id: string; watermark: string }>(
    // By the id as a number: ordered by its text, receipt 99 came after 367 and was taken as
    // the newest seen, so receipts 100–367 lowered CF again at every later read.
    `SELECT r.id::text AS id, r.watermark::text AS watermark FROM genfill.receipts r WHERE r.release = $1 AND r.id > $2 ORDER BY r.id`,
    [release, since],
  );
  const snaps = [...(stored[0] ? [stored[0].snapshot] : []), ...receipts.map((r) => r.watermark)].map(parseSnapshot);
  if (snaps.length === 0) throw new RefusedError(`release ${release} has no receipt: nothing to catch up from`);
  return { cf: formatSnapshot(containmentMinimum(snaps)), receiptsSeen: receipts.at(-1)?.id ?? since };
}

/** A round refused on poison, inside its transaction: catchupRound records the stop once it rolled back. */
class CatchupPoison extends RefusedError {
  constructor(
    message: string,
    readonly stop: SwitchStop,
  ) {
    super(message);
  }
}

export const CATCHUP_DEFAULTS = {
  /** How long a round waits out contention (the lock, a serialization failure) before it fails. */
  retryForMs: 120_000,
};

/** Contention, not a refusal: another round's or a repair's lock, or a row it changed under this round's snapshot. */
function isContention(err: unknown): boolean {
  const code = pgErrorCode(err);
  return err instanceof LockWaitTimeoutError || code === SQLSTATE.serializationFailure || code === SQLSTATE.deadlockDetected;
}

/**
 * One round of `release`'s candidate. Refused (exit 3) outside BUILT, RECONCILED, APPROVED and
 * INGRESS_SEALED. Contention is waited out, never reported as failure (issue 29, finding 5): the
 * round takes the release's catch-up lock before its snapshot (oneRound), so it never reads CF
 * or the candidate from before another round's commit; a serialization failure or a lock wait
 * past lock_timeout that still happens is retried, with a growing pause, until `retryForMs`.
 */
export async function catchupRound(db: Db, release: string, o: { retryForMs?: number } = {}): Promise<CatchupRound> {
  const deadline = performance.now() + (o.retryForMs ?? CATCHUP_DEFAULTS.retryForMs);
  for (let attempt = 1; ; attempt++) {
    try {
      return await oneRound(db, release);
    } catch (err) {
      // A poison key, recorded now that the round's transaction rolled back, so
      // genfill.quarantine_key takes it (migration 0029).
      if (err instanceof CatchupPoison) {
        throw new RefusedError(`${err.message}: ${stopAdvice(err.stop, await recordStop(db, err.stop), `the catch-up (or the cutover) of ${release}`)}`);
      }
      if (!isContention(err) || performance.now() >= deadline) throw err;
      await new Promise((r) => setTimeout(r, Math.min(1000, 10 * 2 ** Math.min(attempt, 7)) * (0.5 + Math.random() / 2)));
    }
  }
}

async function oneRound(db: Db, release: string): Promise<CatchupRound> {
  const started = performance.now();
  // The lock first, held by a transaction of its own, THEN the REPEATABLE READ transaction: its
  // snapshot is taken after any round or repair that held the lock committed. Taken inside the
  // round's transaction, the wait for it was the statement that fixed the snapshot, and a round
  // that waited always failed to serialize on the rows the other one wrote (issue 29, finding 5).
  const held = (await holdLock(db, 'catchup', release, 'exclusive'))!;
  try {
    return await roundUnderLock(db, release, started);
  } finally {
    await held.release();
  }
}

async function roundUnderLock(db: Db, release: string, started: number): Promise<CatchupRound> {
  return withTransaction(
    db,
    async (conn) => {
      const { rows: rel } = await conn.query<{ dataset: string; generation: string; state: string; expected_active: string | null; timezone: string }>(
        `SELECT dataset, generation, state, expected_active, timezone FROM genfill.releases WHERE id = $1`,
        [release],
      );
      const r = rel[0];
      if (!r) throw new RefusedError(`release ${release} does not exist`);
      const toBarrier = r.state === 'INGRESS_SEALED';
      if (!toBarrier && !LIVE_STATES.includes(r.state)) {
        throw new RefusedError(`release ${release} is ${r.state}: catch-up runs on a built release (BUILT, RECONCILED, APPROVED) and, after the seal, to the barrier`);
      }
      if (!r.expected_active) throw new RefusedError(`release ${release} builds a first generation: there is no live writer to catch up with`);
      const { rows: s } = await conn.query<{ s: string | null; active: string | null; epoch_release: string | null }>(
        `SELECT CASE WHEN $3 THEN e.barrier::text ELSE f.snapshot::text END AS s, d.active_generation AS active, e.release AS epoch_release
           FROM genfill.datasets d
           LEFT JOIN genfill.frontiers f ON f.dataset = d.name AND f.generation = d.active_generation
           LEFT JOIN genfill.epochs e ON e.dataset = d.name AND e.epoch = d.ingress_epoch
          WHERE d.name = $1 AND $2::text IS NOT NULL`,
        [r.dataset, r.expected_active, toBarrier],
      );
      const head = s[0];
      if (!head?.s) throw new RefusedError(`dataset ${r.dataset} has no projector frontier: adopt it with capture and run \`genfill projector\``);
      if (head.active !== r.expected_active) throw new RefusedError(`release ${release} expects ${r.expected_active} active, but ${head.active ?? 'none'} is`);
      if (toBarrier && head.epoch_release !== release) throw new RefusedError(`the dataset's current epoch is not sealed by ${release}`);
      const { cf, receiptsSeen } = await catchupFrontier(conn, release);
      const { rows: ok } = await conn.query<{ c: boolean }>('SELECT genfill.snapshot_contains($1::pg_snapshot, $2::pg_snapshot) AS c', [head.s, cf]);
      // S behind CF: a repair's watermark is newer than the projector's frontier. Nothing to do
      // until the frontier passes it (CF never moves back, never passes S).
      const to = ok[0]!.c ? head.s : cf;

      const ds = await loadDataset(conn, r.dataset, { generation: r.generation });
      // The partitions this round changes rows in: where the staged keys' rows are before the
      // apply, and where they are after it (a moved row touches both).
      const st = catchupStatements({ release, dataset: ds.name, generation: r.generation, key: ds.key, time: ds.time, timeType: ds.timeType, timezone: r.timezone });
      let before: string[] = [];
      let root = '';
      let held = 0;
      let staged = false;
      let step: Applied;
      try {
        step = await applyStep(conn, ds, { from: cf, to }, {
          staged: async () => {
            staged = true;
            for (const q of st.keys) await conn.query(q);
            before = (await conn.query<{ t: string[] }>(st.before)).rows[0]!.t;
            // The root covers every (key, revision) the round consumed, held ones included: recomputable from the log.
            const { rows: rootRow } = await conn.query<{ root: string }>(
              `SELECT ${rootAgg(rowHashExpr(['key', 'revision'], 'e'))}::text AS root FROM ${EVENTS_TABLE} AS e`,
            );
            root = rootRow[0]!.root;
            held = (await conn.query(st.held)).rowCount ?? 0;
          },
        });
      } catch (err) {
        if (!staged || isContention(err)) throw err;
        throw new RefusedError(`catch-up of ${release} failed applying (${cf}, ${to}]: ${(err as Error).message}; nothing was applied`, { cause: err });
      }
      if (step.poison) {
        // The event it came from, while the events are staged; catchupRound records it after the rollback.
        const stop = await poisonStop(conn, ds, step.poison, { kind: 'catchup', release, switchId: null });
        throw new CatchupPoison(`catch-up of ${release}: ${stop.what}, at key ${JSON.stringify(stop.key)}; nothing was applied`, stop);
      }
      // Dependencies are checked wherever events are applied (issue 29, dependencies.ts): flagged, or refused in the freeze.
      await checkDependencies(conn, ds, { from: cf, to }, toBarrier ? 'refuse' : 'flag');
      const applied = step.counts;
      const counts = { ...applied, events: applied.events + held, noops: applied.noops + held };
      const after = (await conn.query<{ t: string[] }>(st.times)).rows[0]!.t;
      const changed = counts.upserted + counts.flagged + counts.remembered > 0;
      const { rows: parts } = changed
        ? await conn.query<{ p: string[] }>(`SELECT coalesce(array_agg(p), '{}') AS p FROM genfill.partitions_at($1, $2::timestamptz[]) AS p`, [release, [...before, ...after]])
        : { rows: [{ p: [] as string[] }] };
      const ms = Math.round((performance.now() - started) * 10) / 10;
      // Recorded only when it consumed events or is the round to the barrier (the switch's
      // evidence): the service runs a round every poll for every built candidate, and an empty
      // one each time filled genfill.catchup_rounds (~166,000 rows a day per release, issue 29,
      // finding 6). Every round, recorded or not, is the candidate's `last_round` (status).
      const record = counts.events > 0 || toBarrier;
      let id: string | null = null;
      if (record) {
        const { rows: ins } = await conn.query<{ id: string }>(
          `INSERT INTO genfill.catchup_rounds (release, generation, from_snapshot, to_snapshot, to_barrier, events, upserted, tombstones, noops, quarantined, root, ms)
           VALUES ($1, $2, $3::pg_snapshot, $4::pg_snapshot, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id::text`,
          [release, r.generation, cf, to, toBarrier, counts.events, counts.upserted, counts.flagged + counts.remembered, counts.noops, counts.quarantined, root, ms],
        );
        id = ins[0]!.id;
      }
      const last = {
        id: id === null ? null : Number(id),
        to,
        toBarrier,
        events: counts.events,
        upserted: counts.upserted,
        tombstones: counts.flagged + counts.remembered,
        noops: counts.noops,
        root,
        recorded: record,
      };
      await conn.query(
        `INSERT INTO genfill.catchup_frontiers (release, snapshot, receipts_seen, last_round)
         VALUES ($1, $2::pg_snapshot, $3, $4::jsonb || jsonb_build_object('at', clock_timestamp()))
         ON CONFLICT (release) DO UPDATE SET snapshot = EXCLUDED.snapshot, receipts_seen = EXCLUDED.receipts_seen,
                                             last_round = EXCLUDED.last_round, updated_at = clock_timestamp()`,
        [release, to, receiptsSeen, JSON.stringify(last)],
      );
      if (parts[0]!.p.length > 0) {
        await conn.query(
          `INSERT INTO genfill.catchup_touched (release, partition, round)
           SELECT $1, p, $3 FROM unnest($2::text[]) AS p
           ON CONFLICT (release, partition) DO UPDATE SET round = EXCLUDED.round`,
          [release, parts[0]!.p, id],
        );
      }
      let caughtUp = false;
      if (toBarrier && to === head.s) {
        await casTransition(conn, {
          release,
          from: 'INGRESS_SEALED',
          to: 'CAUGHT_UP',
          action: RELEASE_ACTIONS.caughtUp,
          detail: { round: id, barrier: to, root },
        });
        caughtUp = true;
      }
      return {
        release,
        generation: r.generation,
        id,
        from: cf,
        to,
        toBarrier,
        events: counts.events,
        upserted: counts.upserted,
        tombstones: counts.flagged + counts.remembered,
        noops: counts.noops,
        quarantined: counts.quarantined,
        root,
        ms,
        caughtUp,
      };
    },
    'REPEATABLE READ',
  );
}

/** Releases whose candidates the projector service catches up: live ones, and a sealed one to its barrier. */
export async function catchupCandidates(db: Db, datasets?: string[]): Promise<{ release: string; state: string; behind: boolean }[]> {
  const { rows } = await db.query<{ release: string; state: string; behind: boolean }>(
    `SELECT r.id AS release, r.state,
            cf.snapshot IS NULL OR NOT genfill.snapshot_contains(cf.snapshot,
              CASE WHEN r.state = 'INGRESS_SEALED' THEN e.barrier ELSE f.snapshot END) AS behind
       FROM genfill.releases r
       JOIN genfill.datasets d ON d.name = r.dataset AND d.active_generation = r.expected_active
       JOIN genfill.frontiers f ON f.dataset = d.name AND f.generation = d.active_generation
       LEFT JOIN genfill.epochs e ON e.dataset = d.name AND e.epoch = d.ingress_epoch
       LEFT JOIN genfill.catchup_frontiers cf ON cf.release = r.id
      WHERE (r.state IN ('BUILT', 'RECONCILED', 'APPROVED') OR (r.state = 'INGRESS_SEALED' AND e.release = r.id))
        AND ($1::text[] IS NULL OR r.dataset = ANY ($1::text[]))
      ORDER BY r.id`,
    [datasets && datasets.length > 0 ? datasets : null],
  );
  return rows;
}
