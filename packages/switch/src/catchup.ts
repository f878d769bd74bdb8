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
import { pgErrorCode, quoteIdent, RefusedError, SQLSTATE } from '@genfill/contracts';
import { casTransition, qualifiedGenerationTable, RELEASE_ACTIONS, rootAgg, rowHashExpr, takeLock, withTransaction, type Conn, type Db } from '@genfill/registry';
import { applyStep, type Applied, EVENTS_TABLE, loadDataset } from '@genfill/projector';
import { checkDependencies } from './dependencies.ts';
import { poisonStop, recordStop, stopAdvice, type SwitchStop } from './stops.ts';

/**
 * The times (as instants, text) of the candidate's rows whose keys are staged: a zone-less
 * time column holds wall clocks of the release's region zone, converted with AT TIME ZONE.
 */
function timesOfStaged(dataset: string, generation: string, key: string[], time: string, timeType: string, timezone: string): string {
  const gen = qualifiedGenerationTable(dataset, generation);
  const t = `c.${quoteIdent(time)}`;
  const zone = `'${timezone.replace(/'/g, "''")}'`;
  const instant =
    timeType === 'timestamp with time zone' ? t : timeType === 'date' ? `(${t}::timestamp AT TIME ZONE ${zone})` : `(${t} AT TIME ZONE ${zone})`;
  return `SELECT coalesce(array_agg(${instant}::text), '{}') AS t
            FROM ${EVENTS_TABLE} AS e, jsonb_populate_record(NULL::${gen}, e.key) AS k, ${gen} AS c
           WHERE c.generation = '${generation.replace(/'/g, "''")}' AND ${key.map((k) => `c.${quoteIdent(k)} = k.${quoteIdent(k)}`).join(' AND ')}`;
}

/**
 * Drop from the staged events those a partition's own build already held: the key's candidate
 * row was written by that partition's build (or carry copy, or repair) and never since by
 * catch-up (`_gf_rev` 0), and the event is visible in the watermark of the partition's current
 * receipt — so the row already is the transform of this image or a later one. Re-applying it
 * would rewrite the same row; it is a no-op instead (an update committed inside a partition's
 * watermark is not applied twice, one committed after it is). The round's root still covers it.
 */
function heldByWatermarks(dataset: string, generation: string, key: string[], time: string, timeType: string, timezone: string): string {
  const gen = qualifiedGenerationTable(dataset, generation);
  const t = `c.${quoteIdent(time)}`;
  const zone = `'${timezone.replace(/'/g, "''")}'`;
  const instant =
    timeType === 'timestamp with time zone' ? t : timeType === 'date' ? `(${t}::timestamp AT TIME ZONE ${zone})` : `(${t} AT TIME ZONE ${zone})`;
  return `WITH b AS MATERIALIZED (
      SELECT array_agg(p.lower ORDER BY p.lower) AS lo, array_agg(p.upper ORDER BY p.lower) AS hi, array_agg(w.watermark ORDER BY p.lower) AS wm
        FROM genfill.partitions p
        LEFT JOIN LATERAL (SELECT rc.watermark FROM genfill.current_receipts rc
                            WHERE rc.release = p.release AND rc.partition = p.id
                            ORDER BY rc.id DESC LIMIT 1) w ON true
       WHERE p.release = $1),
    h AS (SELECT e.event_id, e.txid, width_bucket(${instant}, b.lo) AS i, ${instant} AS at
            FROM ${EVENTS_TABLE} AS e, jsonb_populate_record(NULL::${gen}, e.key) AS k, ${gen} AS c, b
           WHERE c.generation = '${generation.replace(/'/g, "''")}' AND ${key.map((k) => `c.${quoteIdent(k)} = k.${quoteIdent(k)}`).join(' AND ')}
             AND c._gf_rev = 0 AND NOT c._gf_deleted)
  DELETE FROM ${EVENTS_TABLE} AS e USING h, b
   WHERE e.event_id = h.event_id AND h.i >= 1 AND (h.at < b.hi[h.i] OR b.hi[h.i] = '9999-12-31 00:00:00+00')
     AND b.wm[h.i] IS NOT NULL AND pg_visible_in_snapshot(h.txid, b.wm[h.i])`;
}

/** States in which a candidate follows the live frontier (the state does not change). */
const LIVE_STATES = ['BUILT', 'RECONCILED', 'APPROVED'];

export interface CatchupRound {
  release: string;
  generation: string;
  id: string;
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

/**
 * One round of `release`'s candidate. Refused (exit 3) outside BUILT, RECONCILED, APPROVED and
 * INGRESS_SEALED. A round that waited for another one's lock read CF before that one committed
 * and fails to serialize: it runs again.
 */
export async function catchupRound(db: Db, release: string): Promise<CatchupRound> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await oneRound(db, release);
    } catch (err) {
      // A poison key, recorded now that the round's transaction rolled back, so
      // genfill.quarantine_key takes it (migration 0029).
      if (err instanceof CatchupPoison) {
        throw new RefusedError(`${err.message}: ${stopAdvice(err.stop, await recordStop(db, err.stop), `the catch-up (or the cutover) of ${release}`)}`);
      }
      if (pgErrorCode(err) !== SQLSTATE.serializationFailure || attempt >= 5) throw err;
    }
  }
}

async function oneRound(db: Db, release: string): Promise<CatchupRound> {
  const started = performance.now();
  return withTransaction(
    db,
    async (conn) => {
      await lockCatchup(conn, release);
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
      const times = timesOfStaged(ds.name, r.generation, ds.key, ds.time, ds.timeType, r.timezone);
      let before: string[] = [];
      let root = '';
      let held = 0;
      let staged = false;
      let step: Applied;
      try {
        step = await applyStep(conn, ds, { from: cf, to }, {
          staged: async () => {
            staged = true;
            before = (await conn.query<{ t: string[] }>(times)).rows[0]!.t;
            // The root covers every (key, revision) the round consumed, held ones included: recomputable from the log.
            const { rows: rootRow } = await conn.query<{ root: string }>(
              `SELECT ${rootAgg(rowHashExpr(['key', 'revision'], 'e'))}::text AS root FROM ${EVENTS_TABLE} AS e`,
            );
            root = rootRow[0]!.root;
            held = (await conn.query(heldByWatermarks(ds.name, r.generation, ds.key, ds.time, ds.timeType, r.timezone), [release])).rowCount ?? 0;
          },
        });
      } catch (err) {
        if (!staged) throw err;
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
      const after = (await conn.query<{ t: string[] }>(times)).rows[0]!.t;
      const changed = counts.upserted + counts.flagged + counts.remembered > 0;
      const { rows: parts } = changed
        ? await conn.query<{ p: string[] }>(`SELECT coalesce(array_agg(p), '{}') AS p FROM genfill.partitions_at($1, $2::timestamptz[]) AS p`, [release, [...before, ...after]])
        : { rows: [{ p: [] as string[] }] };
      await conn.query(
        `INSERT INTO genfill.catchup_frontiers (release, snapshot, receipts_seen) VALUES ($1, $2::pg_snapshot, $3)
         ON CONFLICT (release) DO UPDATE SET snapshot = EXCLUDED.snapshot, receipts_seen = EXCLUDED.receipts_seen, updated_at = clock_timestamp()`,
        [release, to, receiptsSeen],
      );
      const ms = Math.round((performance.now() - started) * 10) / 10;
      const { rows: ins } = await conn.query<{ id: string }>(
        `INSERT INTO genfill.catchup_rounds (release, generation, from_snapshot, to_snapshot, to_barrier, events, upserted, tombstones, noops, quarantined, root, ms)
         VALUES ($1, $2, $3::pg_snapshot, $4::pg_snapshot, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id::text`,
        [release, r.generation, cf, to, toBarrier, counts.events, counts.upserted, counts.flagged + counts.remembered, counts.noops, counts.quarantined, root, ms],
      );
      if (parts[0]!.p.length > 0) {
        await conn.query(
          `INSERT INTO genfill.catchup_touched (release, partition, round)
           SELECT $1, p, $3 FROM unnest($2::text[]) AS p
           ON CONFLICT (release, partition) DO UPDATE SET round = EXCLUDED.round`,
          [release, parts[0]!.p, ins[0]!.id],
        );
      }
      let caughtUp = false;
      if (toBarrier && to === head.s) {
        await casTransition(conn, {
          release,
          from: 'INGRESS_SEALED',
          to: 'CAUGHT_UP',
          action: RELEASE_ACTIONS.caughtUp,
          detail: { round: ins[0]!.id, barrier: to, root },
        });
        caughtUp = true;
      }
      return {
        release,
        generation: r.generation,
        id: ins[0]!.id,
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
