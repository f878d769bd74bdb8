// The registry's two append-only logs and the names of what they record. Every log row is
// written by one of the two functions here, and every reader that counts a kind of row
// (the throttle's error rate counts failed partitions) names it by the same constant: an
// action string is a contract between writer and reader, so it lives in one place. Who acted
// is never an argument: a trigger (migration 0006) fills the principal from session_user or
// the delegated genfill.principal (see asPrincipal in verbs.ts).
import type { ReleaseState } from '@genfill/contracts';
import type { Conn } from './db.ts';

/** What a release_log row records. */
export const RELEASE_ACTIONS = {
  submit: 'submit',
  plan: 'plan',
  /** SNAPSHOT_PINNED → BUILDING: the first enqueue. */
  build: 'build',
  /** BUILDING → BUILT: the receipt that completed the manifest. */
  built: 'built',
  requeue: 'requeue',
  partitionFailed: 'partition-failed',
  pause: 'pause',
  resume: 'resume',
  throttlePause: 'throttle-pause',
  throttleResume: 'throttle-resume',
  cancel: 'cancel',
  repair: 'repair',
  reconcile: 'reconcile',
  /** Written by the SQL function genfill.approve (migration 0004). */
  approve: 'approve',
  /** → RECONCILIATION_REQUIRED: an ingested key came at a held revision with another payload (genfill.ingress_record_conflict, 0011). */
  ingressConflict: 'ingress-conflict',
  /** Bull Board's kept writes, by the token's subject (genfill.record_board_action). */
  boardRetry: 'board-retry',
  boardPromote: 'board-promote',
  boardClean: 'board-clean',
  /** Written by genfill.seal_epoch / unseal_epoch (migration 0013). */
  seal: 'seal',
  unseal: 'unseal',
  /** A captured dependency changed (genfill.mark_dependency_stale, 0013). */
  dependencyChanged: 'dependency-changed',
  /** → RECONCILIATION_REQUIRED: the source's rows changed without DML, e.g. ALTER … USING (genfill.mark_source_rewritten, 0030). */
  sourceRewritten: 'source-rewritten',
  /** INGRESS_SEALED → CAUGHT_UP: the catch-up round to the barrier (0014). */
  caughtUp: 'caught-up',
  /** CAUGHT_UP → ACTIVE, and ACTIVE → SUPERSEDED of the release it replaced (genfill.cutover_switch, 0015). */
  cutover: 'cutover',
  superseded: 'superseded',
  /** APPROVED → RECONCILIATION_REQUIRED: keys changed since the approved reconciliation do not match (cutover.ts). */
  cutoverTailMismatch: 'cutover-tail-mismatch',
  /** SUPERSEDED → RETIRED with its generation (genfill.retire_generation, 0018). */
  retire: 'retire',
  /** Its queue, Redis keys and throttle row removed after its rollback window (genfill.record_release_cleanup, 0018). */
  cleanup: 'cleanup',
} as const;
export type ReleaseAction = (typeof RELEASE_ACTIONS)[keyof typeof RELEASE_ACTIONS];

/** What a dataset_log row records. */
export const DATASET_ACTIONS = {
  /** The adopted table moved into genfill_data (its name becomes the view). */
  adoptMove: 'adopt-move',
  adopt: 'adopt',
  /** Events applied to the dataset's ingress mirror (genfill.ingest_apply, migration 0011). */
  ingest: 'ingest',
  /** An ingested file refused for a conflict, recorded with the releases it moved (genfill.ingress_record_conflict). */
  ingestConflict: 'ingest-conflict',
  /** Tombstones older than GENFILL_TOMBSTONE_RETENTION dropped (genfill.ingress_compact_tombstones). */
  ingressCompact: 'ingress-compact',
  /** A generation retired, with the reason readers are given (genfill.retire_generation, 0018). */
  retire: 'retire',
  /** A retired generation's table detached and dropped (genfill.record_generation_dropped, 0018). */
  generationDropped: 'generation-dropped',
  /** The source's rows changed without DML: a table rewrite, an enum label renamed (genfill.mark_source_rewritten, 0030). */
  sourceRewritten: 'source-rewritten',
} as const;
export type DatasetAction = (typeof DATASET_ACTIONS)[keyof typeof DATASET_ACTIONS];

export interface LogEntry {
  release: string;
  action: ReleaseAction;
  from?: ReleaseState | null;
  to?: ReleaseState | null;
  reason?: string | null;
  detail?: unknown;
}

function json(detail: unknown): string | null {
  return detail === undefined ? null : JSON.stringify(detail);
}

export async function logAction(conn: Conn, e: LogEntry): Promise<void> {
  await conn.query(
    `INSERT INTO genfill.release_log (release, action, from_state, to_state, reason, detail) VALUES ($1, $2, $3, $4, $5, $6)`,
    [e.release, e.action, e.from ?? null, e.to ?? null, e.reason ?? null, json(e.detail)],
  );
}

export async function logDatasetAction(
  conn: Conn,
  e: { dataset: string; action: DatasetAction; generation?: string | null; detail?: unknown },
): Promise<void> {
  await conn.query('INSERT INTO genfill.dataset_log (dataset, action, generation, detail) VALUES ($1, $2, $3, $4)', [
    e.dataset,
    e.action,
    e.generation ?? null,
    json(e.detail),
  ]);
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
