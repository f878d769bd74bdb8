// Multi-step verbs as requests (migration 0006). A person calls genfill.request (checked by
// its grants), the service that owns the work claims the request, runs it under the service
// role with the requester as principal and records the outcome; the CLI waits for it. A
// claim is a lease: a RUNNING request whose executor died is taken again (every kind is safe
// to run twice), and every later write of the request is fenced on `claimed_by`.
import { setTimeout as sleep } from 'node:timers/promises';
import { errorFromPg, GenfillError, InvalidInputError, type ExitCode, type Problem } from '@genfill/contracts';
import { poolAs, type Conn, type Db } from './db.ts';


export type RequestKind = 'plan' | 'reconcile' | 'repair' | 'seal' | 'unseal' | 'catchup' | 'cutover' | 'rollback';
export type RequestState = 'PENDING' | 'RUNNING' | 'DONE' | 'FAILED';

export interface RequestRow {
  id: string;
  kind: RequestKind;
  release: string;
  args: Record<string, unknown>;
  principal: string;
  state: RequestState;
  claimed_by: string | null;
  attempts: number;
  exit_code: number | null;
  result: unknown;
  error: StoredError | null;
  progress: unknown;
  created_at: Date;
  finished_at: Date | null;
}

/** An error as a request stores it, enough to raise the same exit code and message again. */
export interface StoredError {
  name: string;
  message: string;
  exitCode: ExitCode;
  problems?: Problem[];
}

const COLUMNS = ['kind', 'release', 'args', 'principal', 'state', 'claimed_by', 'attempts', 'exit_code', 'result', 'error', 'progress', 'created_at', 'finished_at'];
/** The request's columns, qualified by `alias` when given. */
const requestColumns = (alias = '') => [`${alias}id::text AS id`, ...COLUMNS.map((c) => alias + c)].join(', ');

/** Whether this login may do the fleet's work itself (a member of genfill_service, or a superuser). */
export async function isServiceLogin(conn: Conn | Db): Promise<boolean> {
  const { rows } = await conn.query<{ ok: boolean }>(`SELECT pg_has_role(session_user, 'genfill_service', 'MEMBER') AS ok`);
  return rows[0]!.ok;
}

export async function submitRequest(conn: Conn | Db, q: { kind: RequestKind; release: string; args?: Record<string, unknown> }): Promise<string> {
  try {
    const { rows } = await conn.query<{ id: string }>('SELECT genfill.request($1, $2, $3)::text AS id', [q.kind, q.release, JSON.stringify(q.args ?? {})]);
    return rows[0]!.id;
  } catch (err) {
    throw errorFromPg(err);
  }
}

export async function getRequest(conn: Conn | Db, id: string): Promise<RequestRow | null> {
  const { rows } = await conn.query<RequestRow>(`SELECT ${requestColumns()} FROM genfill.requests WHERE id = $1`, [id]);
  return rows[0] ?? null;
}

/** The oldest request of these kinds that is pending, or running under an expired lease. */
export async function claimRequest(db: Db, q: { kinds: RequestKind[]; worker: string; leaseMs: number }): Promise<RequestRow | null> {
  const { rows } = await db.query<RequestRow>(
    `UPDATE genfill.requests r
        SET state = 'RUNNING', claimed_by = $2, attempts = r.attempts + 1,
            lease_expires_at = clock_timestamp() + $3 * interval '1 millisecond'
      WHERE r.id = (SELECT id FROM genfill.requests
                     WHERE kind = ANY($1::text[])
                       AND (state = 'PENDING' OR (state = 'RUNNING' AND lease_expires_at < clock_timestamp()))
                     ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
     RETURNING ${requestColumns('r.')}`,
    [q.kinds, q.worker, q.leaseMs],
  );
  return rows[0] ?? null;
}

/** Extend the lease and record progress; false when the request is no longer ours. */
export async function renewRequest(db: Db, q: { id: string; worker: string; leaseMs: number; progress?: unknown }): Promise<boolean> {
  const res = await db.query(
    `UPDATE genfill.requests SET lease_expires_at = clock_timestamp() + $3 * interval '1 millisecond',
            progress = coalesce($4::jsonb, progress)
      WHERE id = $1 AND claimed_by = $2 AND state = 'RUNNING'`,
    [q.id, q.worker, q.leaseMs, q.progress === undefined ? null : JSON.stringify(q.progress)],
  );
  return res.rowCount === 1;
}

export function storedError(err: unknown): StoredError {
  if (err instanceof GenfillError) {
    return { name: err.name, message: err.message, exitCode: err.exitCode, ...(err instanceof InvalidInputError ? { problems: err.problems } : {}) };
  }
  return { name: (err as Error)?.name ?? 'Error', message: (err as Error)?.message ?? String(err), exitCode: 1 };
}

/** Record the outcome, fenced on the claim; false when another executor took the request over. */
export async function finishRequest(
  db: Db,
  q: { id: string; worker: string } & ({ result: unknown; exitCode?: ExitCode } | { error: unknown }),
): Promise<boolean> {
  const failed = 'error' in q;
  const error = failed ? storedError(q.error) : null;
  const res = await db.query(
    `UPDATE genfill.requests SET state = $3, exit_code = $4, result = $5, error = $6, finished_at = clock_timestamp(), lease_expires_at = NULL
      WHERE id = $1 AND claimed_by = $2 AND state = 'RUNNING'`,
    [
      q.id,
      q.worker,
      failed ? 'FAILED' : 'DONE',
      failed ? error!.exitCode : (q.exitCode ?? 0),
      failed ? null : JSON.stringify(q.result ?? null),
      error ? JSON.stringify(error) : null,
    ],
  );
  return res.rowCount === 1;
}

export interface RequestOutcome {
  result: unknown;
  exitCode?: ExitCode;
}

/**
 * Run one claimed request: `handler` gets a pool whose writes record the requester as the
 * principal; the lease is renewed while it runs; the outcome (or the error, with its exit
 * code) is recorded fenced on the claim. Errors of the handler are recorded, not thrown.
 */
export async function executeRequest(
  db: Db,
  req: RequestRow,
  o: { worker: string; leaseMs: number; handler: (db: Db, req: RequestRow) => Promise<RequestOutcome> },
): Promise<{ state: 'DONE' | 'FAILED'; recorded: boolean; error?: StoredError }> {
  const as = poolAs(db, req.principal);
  const renew = setInterval(() => void renewRequest(db, { id: req.id, worker: o.worker, leaseMs: o.leaseMs }).catch(() => undefined), Math.max(1000, o.leaseMs / 3));
  try {
    const out = await o.handler(as, req);
    const recorded = await finishRequest(db, { id: req.id, worker: o.worker, result: out.result, exitCode: out.exitCode });
    return { state: 'DONE', recorded };
  } catch (err) {
    const recorded = await finishRequest(db, { id: req.id, worker: o.worker, error: err });
    return { state: 'FAILED', recorded, error: storedError(err) };
  } finally {
    clearInterval(renew);
    await as.end();
  }
}

export type RequestHandlers = Partial<Record<RequestKind, (db: Db, req: RequestRow) => Promise<RequestOutcome>>>;

export interface RequestLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/**
 * Execute every waiting request of the kinds `handlers` knows, oldest first, one at a time.
 * Returns how many ran. A service calls it at the start of each round.
 */
export async function serveRequests(
  db: Db,
  o: { handlers: RequestHandlers; worker: string; leaseMs?: number; log?: RequestLog; signal?: AbortSignal },
): Promise<number> {
  const kinds = Object.keys(o.handlers) as RequestKind[];
  const leaseMs = o.leaseMs ?? 60_000;
  let ran = 0;
  while (kinds.length > 0 && !o.signal?.aborted) {
    const req = await claimRequest(db, { kinds, worker: o.worker, leaseMs });
    if (!req) break;
    ran += 1;
    const out = await executeRequest(db, req, { worker: o.worker, leaseMs, handler: o.handlers[req.kind]! });
    const fields = { request: req.id, kind: req.kind, release: req.release, principal: req.principal, state: out.state, recorded: out.recorded };
    if (out.state === 'DONE') o.log?.info(fields, `${req.kind} request done`);
    else o.log?.warn({ ...fields, error: out.error }, `${req.kind} request failed`);
  }
  return ran;
}

/**
 * Wait (bounded) for a request to finish: the row once DONE or FAILED, null when `timeoutMs`
 * passed first (it stays queued and runs when its service does).
 */
export async function awaitRequest(db: Conn | Db, id: string, timeoutMs: number, pollMs = 200): Promise<RequestRow | null> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const req = await getRequest(db, id);
    if (req && (req.state === 'DONE' || req.state === 'FAILED')) return req;
    if (Date.now() >= until) return null;
    await sleep(pollMs);
  }
}

const REQUEST_POLL_MS = 1000;

/**
 * A service's pause between rounds: `ms` long, serving waiting requests every second so a
 * person's request is answered within about a second whatever the round interval. Rejects
 * when `signal` aborts (no request is left half-done: serveRequests finishes the one it runs).
 */
export async function waitServingRequests(serve: () => Promise<unknown>, ms: number, signal?: AbortSignal): Promise<void> {
  for (let left = ms; left > 0 && !signal?.aborted; left -= REQUEST_POLL_MS) {
    await sleep(Math.min(REQUEST_POLL_MS, left), undefined, { signal });
    await serve();
  }
}
