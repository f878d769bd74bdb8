// Registry queries on releases, one named function per statement. State changes live in
// transitions.ts, log rows in log.ts.
import { NotFoundError, type ReleaseSpec, type ReleaseState } from '@genfill/contracts';
import type { Conn } from './db.ts';
import { logAction, RELEASE_ACTIONS } from './log.ts';

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
  await logAction(conn, { release: r.spec.release, action: RELEASE_ACTIONS.submit, to: 'DRAFT', detail: { digest: r.digest } });
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
