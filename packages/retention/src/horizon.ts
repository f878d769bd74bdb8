// The change log's pruning horizon (SPEC invariant 15): the containment-minimum of every
// snapshot the log is still needed for. What counts is defined once, in SQL
// (genfill.log_horizon_parts, migration 0018): frontiers of live and retained generations,
// open releases' catch-up frontiers, floors, receipt watermarks and latest reconciliation,
// the barrier of every switch still inside its rollback window, and a sealed epoch's barrier.
// An event whose txid is below the horizon's xmin is visible in every one of them, so no
// consumer reads it again.
//
// One more case the stored rows cannot show: a genfill transaction still running may commit a
// snapshot it read before the horizon was computed — a release floor (the projector frontier
// read at plan), a carry partition's watermark (the frontier read in the copy's own snapshot)
// — older than what the registry holds by then. So a horizon taken at time t is used only
// once no session of genfill's writers holds a snapshot or transaction from before t
// (genfill.log_horizon_blockers): the HorizonHistory keeps the horizons of earlier rounds and
// hands out the newest one no such transaction predates. A long transaction of an
// application (not a genfill writer) holds the horizon back only through the frontiers, whose
// xip names it — which is what `status --dataset` and /metrics show.
//
// All snapshots come from the primary: a standby's pg_current_snapshot() is not the primary's,
// and pruning refuses to run on one.
import { containmentMinimum, formatSnapshot, parseSnapshot } from '@genfill/capture';
import { RefusedError } from '@genfill/contracts';
import type { Conn, Db } from '@genfill/registry';

export interface HorizonPart {
  kind: string;
  dataset: string;
  subject: string;
  snapshot: string;
  since: string | null;
}

export interface HorizonTransaction {
  kind: 'backend' | 'prepared';
  xid: string;
  pid: number | null;
  gid: string | null;
  /** The session's details are the service's: null for a person's login (migration 0025). */
  role: string | null;
  application: string | null;
  sessionState: string | null;
  started: string | null;
  database: string | null;
  ageSeconds: number;
}

export interface Horizon {
  /** The containment-minimum, as pg_snapshot text. */
  horizon: string;
  /** Its xmin (a txid, as text: results go out as JSON): every event below it is prunable. */
  xmin: string;
  /** The database clock after the horizon's snapshot was taken. */
  at: Date;
  parts: HorizonPart[];
  /** Parts whose xmin is the horizon's: what holds it where it is. */
  holders: HorizonPart[];
  /** Transactions in progress the horizon waits for (long or prepared ones). */
  transactions: HorizonTransaction[];
  /** How far behind now the horizon is: since its oldest holder (a transaction's start, or the part's time). */
  ageSeconds: number;
}

export class StandbyError extends RefusedError {}

/** Refuse to take horizons or prune on a standby. */
export async function assertPrimary(conn: Pick<Conn, 'query'>): Promise<void> {
  const { rows } = await conn.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby');
  if (rows[0]!.standby) {
    throw new StandbyError('the change log is pruned from the primary only (a standby cannot take its snapshots): point DATABASE_URL at the primary');
  }
}

/** The horizon now, what makes it, and the transactions it waits for. */
export async function computeHorizon(conn: Pick<Conn, 'query'>): Promise<Horizon> {
  const { rows: h } = await conn.query<{ horizon: string; parts: HorizonPart[] | null; at: Date; now: Date }>(
    `SELECT genfill.log_horizon()::text AS horizon,
            (SELECT jsonb_agg(jsonb_build_object('kind', p.kind, 'dataset', p.dataset, 'subject', p.subject, 'snapshot', p.snapshot::text,
                                                 'since', p.since) ORDER BY p.since NULLS FIRST)
               FROM genfill.log_horizon_parts() p) AS parts,
            clock_timestamp() AS at, now() AS now`,
  );
  const horizon = h[0]!.horizon;
  const at = h[0]!.at;
  const parts = h[0]!.parts ?? [];
  const xmin = parseSnapshot(horizon).xmin;
  const holders = parts.filter((p) => parseSnapshot(p.snapshot).xmin === xmin);
  // The service reads each transaction's session (genfill.log_horizon_transactions); a person's
  // login gets kind, xid and start only (genfill.log_horizon_waits, migration 0025).
  const { rows: can } = await conn.query<{ detail: boolean }>(
    `SELECT has_function_privilege('genfill.log_horizon_transactions(pg_snapshot)', 'EXECUTE') AS detail`,
  );
  const { rows: t } = can[0]!.detail
    ? await conn.query<Omit<HorizonTransaction, 'ageSeconds'> & { age: number | null }>(
        `SELECT kind, xid, pid, gid, role, application, session_state AS "sessionState", to_json(started) #>> '{}' AS started, database,
                extract(epoch FROM clock_timestamp() - started)::float8 AS age
           FROM genfill.log_horizon_transactions($1::pg_snapshot)`,
        [horizon],
      )
    : await conn.query<Omit<HorizonTransaction, 'ageSeconds'> & { age: number | null }>(
        `SELECT kind, xid, NULL::int AS pid, gid, NULL AS role, NULL AS application, NULL AS "sessionState", to_json(started) #>> '{}' AS started,
                NULL AS database, extract(epoch FROM clock_timestamp() - started)::float8 AS age
           FROM genfill.log_horizon_waits()`,
      );
  const transactions = t.map(({ age, ...x }) => ({ ...x, kind: x.kind as HorizonTransaction['kind'], ageSeconds: Math.max(0, age ?? 0) }));
  const since = [
    ...transactions.filter((x) => x.started).map((x) => Date.parse(x.started!)),
    ...holders.filter((p) => p.since).map((p) => Date.parse(p.since!)),
  ];
  const ageSeconds = since.length === 0 ? 0 : Math.max(0, (at.getTime() - Math.min(...since)) / 1000);
  return { horizon, xmin: String(xmin), at, parts, holders, transactions, ageSeconds };
}

export interface HorizonBlocker {
  kind: 'backend' | 'prepared';
  pid: number | null;
  gid: string | null;
  role: string;
  application: string | null;
  sessionState: string | null;
  started: string;
}

/** Transactions of genfill's writers that began before `since`, oldest first. */
export async function horizonBlockers(conn: Pick<Conn, 'query'>, since: Date | 'infinity'): Promise<HorizonBlocker[]> {
  const { rows } = await conn.query<HorizonBlocker>(
    `SELECT kind, pid, gid, role, application, session_state AS "sessionState", to_json(started) #>> '{}' AS started
       FROM genfill.log_horizon_blockers($1::timestamptz)`,
    [since],
  );
  return rows;
}

/** Can this login see every session's snapshot (pg_read_all_stats, through genfill_owner's functions)? */
export async function canSeeSessions(conn: Pick<Conn, 'query'>): Promise<boolean> {
  const { rows } = await conn.query<{ ok: boolean }>(
    `SELECT pg_has_role('genfill_owner', 'pg_read_all_stats', 'USAGE') OR (SELECT rolsuper FROM pg_roles WHERE rolname = 'genfill_owner') AS ok`,
  );
  return rows[0]!.ok;
}

/**
 * Horizons taken earlier, newest last. A horizon taken at time t may be used once no
 * transaction of a genfill writer that began before t is left: every snapshot a later
 * transaction records contains the frontiers it read, which contain that horizon.
 */
export class HorizonHistory {
  readonly #entries: Horizon[] = [];

  constructor(private readonly keep = 64) {}

  get size(): number {
    return this.#entries.length;
  }

  record(h: Horizon): void {
    this.#entries.push(h);
    if (this.#entries.length > this.keep) this.#entries.splice(0, this.#entries.length - this.keep);
  }

  /** The newest horizon taken at or before `before` (the newest of all when undefined), or null. */
  takenBefore(before?: Date): Horizon | null {
    for (let i = this.#entries.length - 1; i >= 0; i--) {
      const e = this.#entries[i]!;
      if (!before || e.at.getTime() <= before.getTime()) return e;
    }
    return null;
  }
}

export interface UsableHorizon {
  /** The horizon now. */
  current: Horizon;
  /** What pruning may use now, as pg_snapshot text, or null (then `blockers` says why). */
  usable: string | null;
  /** Transactions of genfill's writers in progress, oldest first: the oldest decides how old `usable` is. */
  blockers: HorizonBlocker[];
}

/**
 * Pick the horizon pruning may use. A horizon is recorded first; then (at t_b) the genfill
 * writers' transactions in progress are listed; E is the newest recorded horizon taken before
 * every one of them began (the one just recorded, unless one began before it). A transaction
 * that began after E records only snapshots containing E; one that began before E and
 * committed before t_b is in the registry, so E is lowered to the horizon taken after t_b.
 */
export async function usableHorizon(db: Db | Conn, history: HorizonHistory): Promise<UsableHorizon> {
  await assertPrimary(db);
  history.record(await computeHorizon(db));
  const inProgress = await horizonBlockers(db, 'infinity');
  const oldest = inProgress.length === 0 ? undefined : new Date(Math.min(...inProgress.map((b) => Date.parse(b.started))));
  const earlier = history.takenBefore(oldest);
  const current = await computeHorizon(db);
  history.record(current);
  if (!earlier) return { current, usable: null, blockers: inProgress };
  const usable = formatSnapshot(containmentMinimum([parseSnapshot(earlier.horizon), parseSnapshot(current.horizon)]));
  return { current, usable, blockers: inProgress };
}
