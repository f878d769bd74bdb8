// Registry queries on releases, one named function per statement. State changes live in
// transitions.ts, log rows in log.ts.
import { NotFoundError, type ReleaseSpec, type ReleaseState } from '@genfill/contracts';
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
