// The controller's registry queries. A takeover bumps the release's fencing token; a decision
// is written only while the writer's token is the row's token, in one transaction that also
// moves `throttle_paused` — never `operator_paused`, which belongs to people.
import { setThrottlePause, withTransaction, type Db } from '@genfill/registry';
import type { Budget, Decision, Knobs } from './aimd.ts';
import type { Reading } from './signals.ts';

/** Take the fence for `holder`: token + 1 (1 for the first controller of the release). */
export async function takeFence(db: Db, release: string, holder: string): Promise<number> {
  const { rows } = await db.query<{ token: string }>(
    `INSERT INTO genfill.throttle_leases (release, token, holder) VALUES ($1, 1, $2)
     ON CONFLICT (release) DO UPDATE
       SET token = genfill.throttle_leases.token + 1, holder = EXCLUDED.holder, acquired_at = clock_timestamp(), decided_at = NULL
     RETURNING token::text`,
    [release, holder],
  );
  return Number(rows[0]!.token);
}

export interface ReleaseThrottleState {
  state: string;
  budget: Budget;
  throttlePaused: boolean;
  operatorPaused: boolean;
}

export async function releaseThrottleState(db: Db, release: string): Promise<ReleaseThrottleState | null> {
  const { rows } = await db.query<{ state: string; budget: Budget; throttle_paused: boolean; operator_paused: boolean }>(
    `SELECT state, spec->'budget' AS budget, throttle_paused, operator_paused FROM genfill.releases WHERE id = $1`,
    [release],
  );
  const r = rows[0];
  return r ? { state: r.state, budget: r.budget, throttlePaused: r.throttle_paused, operatorPaused: r.operator_paused } : null;
}

export interface StoredDecision {
  id: number;
  release: string;
  token: number;
  holder: string;
  at: string;
  signals: Record<string, Reading>;
  binding: string;
  ratio: number | null;
  action: string;
  concurrency: number;
  rowsPerSecond: number;
  liveWorkers: number;
  workerRowsPerSecond: number;
  throttlePaused: boolean;
}

const DECISION_COLUMNS = `id::int AS id, release, token::int AS token, holder, at, signals, binding, ratio, action, concurrency,
  rows_per_second, live_workers, worker_rows_per_second, throttle_paused`;

interface DecisionRow {
  id: number;
  release: string;
  token: number;
  holder: string;
  at: Date;
  signals: Record<string, Reading>;
  binding: string;
  ratio: number | null;
  action: string;
  concurrency: number;
  rows_per_second: number;
  live_workers: number;
  worker_rows_per_second: number;
  throttle_paused: boolean;
}

function toDecision(r: DecisionRow): StoredDecision {
  return {
    id: r.id,
    release: r.release,
    token: r.token,
    holder: r.holder,
    at: r.at.toISOString(),
    signals: r.signals,
    binding: r.binding,
    ratio: r.ratio,
    action: r.action,
    concurrency: r.concurrency,
    rowsPerSecond: r.rows_per_second,
    liveWorkers: r.live_workers,
    workerRowsPerSecond: r.worker_rows_per_second,
    throttlePaused: r.throttle_paused,
  };
}

export async function latestDecision(db: Db, release: string): Promise<StoredDecision | null> {
  const { rows } = await db.query<DecisionRow>(
    `SELECT ${DECISION_COLUMNS} FROM genfill.throttle_decisions WHERE release = $1 ORDER BY id DESC LIMIT 1`,
    [release],
  );
  return rows[0] ? toDecision(rows[0]) : null;
}

export function knobsOf(d: StoredDecision): Knobs {
  return { concurrency: d.concurrency, rowsPerSecond: d.rowsPerSecond, paused: d.throttlePaused };
}

export type RecordResult =
  | { kind: 'recorded'; id: number; pauseChanged: boolean }
  /** The fence moved: another controller took over. Nothing was written. */
  | { kind: 'fenced'; currentToken: number | null; currentHolder: string | null };

/**
 * One fenced transaction: lock the lease row on our token (0 rows: fenced, write nothing),
 * append the decision, and move throttle_paused if the decision changes it — fenced on its
 * old value and logged, so an operator reading the history sees who paused and why.
 */
export async function recordDecision(
  db: Db,
  q: { release: string; token: number; holder: string; decision: Decision; readings: Reading[]; liveWorkers: number; workerRowsPerSecond: number; built?: { rowsPerSecond: number; windowMs: number } },
): Promise<RecordResult> {
  return withTransaction(db, async (conn) => {
    const fence = await conn.query(
      `UPDATE genfill.throttle_leases SET decided_at = clock_timestamp() WHERE release = $1 AND token = $2`,
      [q.release, q.token],
    );
    if (fence.rowCount !== 1) {
      const { rows } = await conn.query<{ token: string; holder: string }>(
        `SELECT token::text, holder FROM genfill.throttle_leases WHERE release = $1`,
        [q.release],
      );
      return { kind: 'fenced', currentToken: rows[0] ? Number(rows[0].token) : null, currentHolder: rows[0]?.holder ?? null };
    }
    const d = q.decision;
    const ins = await conn.query<{ id: string }>(
      `INSERT INTO genfill.throttle_decisions
         (release, token, holder, signals, binding, ratio, action, concurrency, rows_per_second, live_workers, worker_rows_per_second, throttle_paused)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id::text`,
      [
        q.release, q.token, q.holder,
        // What the fleet built over the window rides along with the signals (not a budget signal).
        JSON.stringify({
          ...Object.fromEntries(q.readings.map((r) => [r.name, r])),
          ...(q.built ? { built_rows_per_second: { name: 'built_rows_per_second', value: Math.round(q.built.rowsPerSecond), detail: { windowMs: q.built.windowMs } } } : {}),
        }),
        d.binding, d.ratio, d.action, d.concurrency, d.rowsPerSecond, q.liveWorkers, q.workerRowsPerSecond, d.paused,
      ],
    );
    const pauseChanged = await setThrottlePause(conn, {
      release: q.release,
      paused: d.paused,
      reason: `${d.binding} at ${d.ratio === null ? '—' : d.ratio.toFixed(2)}× budget`,
      detail: { token: q.token, holder: q.holder, decision: Number(ins.rows[0]!.id) },
    });
    return { kind: 'recorded', id: Number(ins.rows[0]!.id), pauseChanged };
  });
}
