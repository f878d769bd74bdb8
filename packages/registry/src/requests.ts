// Multi-step verbs as requests (migration 0006). A person calls genfill.request (checked by
// its grants), the service that owns the work claims the request, runs it under the service
// role with the requester as principal and records the outcome; the CLI waits for it. A
// claim is a lease: a RUNNING request whose executor died is taken again (every kind is safe
// to run twice), and every later write of the request is fenced on `claimed_by`.
import { setTimeout as sleep } from 'node:timers/promises';
import {
  errorFromPg,
  type ExitCode,
  fromStoredError,
  type GenfillError,
  type KindsOf,
  parseRequestArgs,
  type RequestArgs,
  type RequestKind,
  type RequestService,
  type StoredError,
  toStoredError,
} from '@genfill/contracts';
import { poolAs, type Conn, type Db } from './db.ts';

export type RequestState = 'PENDING' | 'RUNNING' | 'DONE' | 'FAILED';

/** A request as genfill.requests holds it: its arguments as sent, untrusted until parsed. */
export interface RequestRow {
  id: string;
  kind: RequestKind;
  release: string;
  args: unknown;
  principal: string;
  state: RequestState;
  claimed_by: string | null;
  attempts: number;
  exit_code: number | null;
  result: unknown;
  /** The error a FAILED request raised, with its class, code and fields (contracts' StoredError). */
  error: StoredError | null;
  progress: unknown;
  created_at: Date;
  finished_at: Date | null;
}

/** A claimed request whose arguments parsed as its kind's: what a handler receives. */
export type RequestOf<K extends RequestKind> = Omit<RequestRow, 'kind' | 'args'> & { kind: K; args: RequestArgs<K> };

export interface RequestOutcome {
  result: unknown;
  exitCode?: ExitCode;
}

export type RequestHandler<K extends RequestKind> = (db: Db, req: RequestOf<K>) => Promise<RequestOutcome>;
/** A handler for every kind service `S` runs: a kind of `S` without one is a type error. */
export type ServiceHandlers<S extends RequestService> = { [K in KindsOf<S>]: RequestHandler<K> };
/** What a serving loop runs: any of the kinds, each with its own handler. */
export type RequestHandlers = { [K in RequestKind]?: RequestHandler<K> };

const COLUMNS = ['kind', 'release', 'args', 'principal', 'state', 'claimed_by', 'attempts', 'exit_code', 'result', 'error', 'progress', 'created_at', 'finished_at'];
/** The request's columns, qualified by `alias` when given. */
const requestColumns = (alias = '') => [`${alias}id::text AS id`, ...COLUMNS.map((c) => alias + c)].join(', ');

/** Whether this login may do the fleet's work itself (a member of genfill_service, or a superuser). */
export async function isServiceLogin(conn: Conn | Db): Promise<boolean> {
  const { rows } = await conn.query<{ ok: boolean }>(`SELECT pg_has_role(session_user, 'genfill_service', 'MEMBER') AS ok`);
  return rows[0]!.ok;
}

/**
 * Ask for a `kind` request (genfill.request, checked by its grants); its arguments are parsed
 * first. The verb checks them again against the kind's schema (InvalidInputError), returns the
 * id of an open request of the same kind, release and arguments instead of queueing a second,
 * and refuses (RefusedError) another open one of that kind and release or a principal past
 * request.max_open_per_principal (genfill.settings).
 */
export async function submitRequest<K extends RequestKind>(conn: Conn | Db, q: { kind: K; release: string; args: RequestArgs<K> }): Promise<string> {
  const args = parseRequestArgs(q.kind, q.args);
  try {
    const { rows } = await conn.query<{ id: string }>('SELECT genfill.request($1, $2, $3)::text AS id', [q.kind, q.release, JSON.stringify(args)]);
    return rows[0]!.id;
  } catch (err) {
    throw errorFromPg(err, { release: q.release });
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

/**
 * The error a FAILED request raised, rebuilt as its own class (or its nearest known one):
 * the exit code and HTTP status it would have had in-process. It carries the request's id.
 */
export function requestError(req: Pick<RequestRow, 'id' | 'error' | 'exit_code'>): GenfillError {
  const stored = req.error ?? { message: `request #${req.id} failed`, exitCode: (req.exit_code ?? 1) as ExitCode };
  return fromStoredError(stored, req.id);
}

/** Record the outcome, fenced on the claim; false when another executor took the request over. */
export async function finishRequest(
  db: Db,
  q: { id: string; worker: string } & ({ result: unknown; exitCode?: ExitCode } | { error: unknown }),
): Promise<boolean> {
  const failed = 'error' in q;
  const error = failed ? toStoredError(q.error) : null;
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

/**
 * Run one claimed request: its arguments are parsed as its kind's first — a payload that does
 * not parse fails the request as InvalidInputError (exit 2) and the handler never runs; then
 * `handler` gets a pool whose writes record the requester as the principal; the lease is
 * renewed while it runs; the outcome (or the error, as contracts' table names it, with its
 * class, code and fields) is recorded fenced on the claim. Errors of the handler are recorded,
 * not thrown.
 */
export async function executeRequest<K extends RequestKind>(
  db: Db,
  req: RequestRow & { kind: K },
  o: { worker: string; leaseMs: number; handler: RequestHandler<K> },
): Promise<{ state: 'DONE' | 'FAILED'; recorded: boolean; error?: StoredError }> {
  let args: RequestArgs<K>;
  try {
    args = parseRequestArgs(req.kind, req.args);
  } catch (err) {
    const recorded = await finishRequest(db, { id: req.id, worker: o.worker, error: err });
    return { state: 'FAILED', recorded, error: toStoredError(err) };
  }
  const as = poolAs(db, req.principal);
  const renew = setInterval(() => void renewRequest(db, { id: req.id, worker: o.worker, leaseMs: o.leaseMs }).catch(() => undefined), Math.max(1000, o.leaseMs / 3));
  try {
    const out = await o.handler(as, { ...req, args });
    const recorded = await finishRequest(db, { id: req.id, worker: o.worker, result: out.result, exitCode: out.exitCode });
    return { state: 'DONE', recorded };
  } catch (raised) {
    const err = errorFromPg(raised, { release: req.release });
    const recorded = await finishRequest(db, { id: req.id, worker: o.worker, error: err });
    return { state: 'FAILED', recorded, error: toStoredError(err) };
  } finally {
    clearInterval(renew);
    await as.end();
  }
}

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
    // The kinds claimed are the handlers' keys: this request's kind has its handler.
    const handler = o.handlers[req.kind] as RequestHandler<RequestKind>;
    const out = await executeRequest(db, req, { worker: o.worker, leaseMs, handler });
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
