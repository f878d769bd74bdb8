// Registry queries on releases, one named function per statement. State changes are CASes
// against TRANSITIONS and are logged with the principal (session_user) in the same transaction.
import {
  CasConflictError,
  canTransition,
  NotFoundError,
  type ReleaseSpec,
  type ReleaseState,
} from '@genfill/contracts';
import type { Conn } from './db.ts';

export interface ReleaseRow {
  id: string;
  dataset: string;
  generation: string;
  expected_active: string | null;
  digest: string;
  spec: ReleaseSpec;
  transform_digest: string;
  range_from: Date;
  range_to: Date;
  timezone: string;
  every: string;
  state: ReleaseState;
  operator_paused: boolean;
  throttle_paused: boolean;
  approvals_required: number;
  owner: string;
  deadline: Date;
  submitted_by: string;
  submitted_at: Date;
  state_changed_at: Date;
}

const RELEASE_COLUMNS = `id, dataset, generation, expected_active, digest, spec, transform_digest,
  lower(range) AS range_from, upper(range) AS range_to, timezone, every, state, operator_paused,
  throttle_paused, approvals_required, owner, deadline, submitted_by, submitted_at, state_changed_at`;

export async function findRelease(conn: Conn, id: string, opts: { lock?: 'FOR UPDATE' | 'FOR SHARE' } = {}): Promise<ReleaseRow | null> {
  const { rows } = await conn.query<ReleaseRow>(
    `SELECT ${RELEASE_COLUMNS} FROM genfill.releases WHERE id = $1 ${opts.lock ?? ''}`,
    [id],
  );
  return rows[0] ?? null;
}

export async function getRelease(conn: Conn, id: string, opts: { lock?: 'FOR UPDATE' | 'FOR SHARE' } = {}): Promise<ReleaseRow> {
  const row = await findRelease(conn, id, opts);
  if (!row) throw new NotFoundError(`release ${id} does not exist: submit it with \`genfill release submit <file>\``);
  return row;
}

export async function listReleases(conn: Conn): Promise<ReleaseRow[]> {
  const { rows } = await conn.query<ReleaseRow>(`SELECT ${RELEASE_COLUMNS} FROM genfill.releases ORDER BY submitted_at, id`);
  return rows;
}

export interface NewRelease {
  spec: ReleaseSpec;
  digest: string;
  transformDigest: string;
}

export async function insertRelease(conn: Conn, r: NewRelease): Promise<void> {
  await conn.query(
    `INSERT INTO genfill.releases (id, dataset, generation, expected_active, digest, spec, transform_digest,
       range, timezone, every, approvals_required, owner, deadline)
     VALUES ($1, $2, $3, $4, $5, $6, $7, tstzrange($8, $9, '[)'), $10, $11, $12, $13, $14)`,
    [
      r.spec.release,
      r.spec.dataset,
      r.spec.target.generation,
      r.spec.target.expectedActive,
      r.digest,
      r.spec,
      r.transformDigest,
      r.spec.range.from,
      r.spec.range.to,
      r.spec.timezone,
      r.spec.partition.every,
      r.spec.approvals,
      r.spec.owner,
      r.spec.deadline,
    ],
  );
  await logAction(conn, { release: r.spec.release, action: 'submit', to: 'DRAFT', detail: { digest: r.digest } });
}

/** Releases of a dataset and generation, other than `exceptId`, whose range overlaps [from, to). */
export async function findOverlapping(
  conn: Conn,
  q: { dataset: string; generation: string; from: string; to: string; exceptId: string },
): Promise<{ id: string; range: string }[]> {
  const { rows } = await conn.query<{ id: string; range: string }>(
    `SELECT id, range::text AS range FROM genfill.releases
      WHERE dataset = $1 AND generation = $2 AND state <> 'CANCELLED' AND id <> $5
        AND range && tstzrange($3, $4, '[)')
      ORDER BY id`,
    [q.dataset, q.generation, q.from, q.to, q.exceptId],
  );
  return rows;
}

export interface LogEntry {
  release: string;
  action: string;
  from?: ReleaseState | null;
  to?: ReleaseState | null;
  reason?: string | null;
  detail?: unknown;
  /**
   * Who acted, when it is not the connected login: the API connects as its service login and
   * names the token's subject here. Omitted, the column default (session_user) records it.
   */
  principal?: string | null;
}

export async function logAction(conn: Conn, e: LogEntry): Promise<void> {
  await conn.query(
    `INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail, principal)
     VALUES ($1, $2, $3, $4, $5, $6, coalesce($7::text, session_user))`,
    [e.release, e.action, e.from ?? null, e.to ?? null, e.reason ?? null, e.detail === undefined ? null : JSON.stringify(e.detail), e.principal ?? null],
  );
}

export interface LogRow {
  id: string;
  action: string;
  from_state: string | null;
  to_state: string | null;
  principal: string;
  at: Date;
  reason: string | null;
  detail: unknown;
}

export async function releaseLog(conn: Conn, release: string): Promise<LogRow[]> {
  const { rows } = await conn.query<LogRow>(
    `SELECT id, action, from_state, to_state, principal, at, reason, detail
       FROM genfill.release_log WHERE release = $1 ORDER BY id`,
    [release],
  );
  return rows;
}

/**
 * The one compare-and-swap for release states. Zero rows is a lost race, reported as
 * CasConflictError naming the current state — never treated as success.
 */
export async function casTransition(
  conn: Conn,
  t: { release: string; from: ReleaseState; to: ReleaseState; action: string; reason?: string; detail?: unknown; principal?: string | null },
): Promise<void> {
  if (!canTransition(t.from, t.to)) {
    throw new Error(`${t.from} → ${t.to} is not in the transition table`);
  }
  const res = await conn.query(
    `UPDATE genfill.releases SET state = $3, state_changed_at = now() WHERE id = $1 AND state = $2`,
    [t.release, t.from, t.to],
  );
  if (res.rowCount !== 1) {
    const { rows } = await conn.query<{ state: string }>('SELECT state FROM genfill.releases WHERE id = $1', [t.release]);
    throw new CasConflictError(t.release, t.from, rows[0]?.state ?? null, t.to);
  }
  await logAction(conn, { release: t.release, action: t.action, from: t.from, to: t.to, reason: t.reason ?? null, detail: t.detail, principal: t.principal });
}
