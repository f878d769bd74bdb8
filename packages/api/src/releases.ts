// GET /releases, GET /releases/:id (the data of `genfill status --json`, paged partitions on request), the operator verbs
// POST /releases/:id/{pause,resume,cancel,seal,unseal,catchup} and the approver's POST /releases/:id/approve. The verbs do what the CLI does — registry
// first, then the BullMQ queue as a best-effort mirror — with the token's subject recorded
// as the principal and `via: api` in the log detail.
import express, { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import { InvalidInputError, parseRequestArgs, releaseSchema, type Problem } from '@genfill/contracts';

/** How long a live-path request (seal, unseal, catchup) is waited for before the API answers 202. */
const REQUEST_WAIT_MS = 60_000;
import type { Logger } from '@genfill/observability';
import { cancelRelease, setOperatorPause, type Actor } from '@genfill/planner';
import { asRedisUnavailable, type Dispatcher, mirrorPause, redisAnswers, removeReleaseQueue, withDeadline } from '@genfill/queue';
import { approveVerb, asPrincipal, awaitRequest, parsePartitionListing, releaseList, releaseStatus, requestError, submitRequest, type Db } from '@genfill/registry';
import { requirePermission, requirePrincipal } from './auth.ts';
import type { ReleaseQueues } from './queues.ts';

export interface ReleaseDeps {
  db: Db;
  dispatcher: Dispatcher;
  queues: ReleaseQueues;
  log: Logger;
}

/** The release id rule of the release file (letters, digits, . _ @ + -; no ':'). */
const releaseId = releaseSchema.shape.release;
const actionBody = z.strictObject({ reason: z.string().trim().min(1).max(1000).optional() });

function problems(error: z.ZodError, where: string): Problem[] {
  return error.issues.map((i) => ({ path: [where, ...i.path.map(String)].join('.'), message: i.message }));
}

function idOf(req: Request): string {
  const parsed = releaseId.safeParse(req.params.id);
  if (!parsed.success) throw new InvalidInputError(problems(parsed.error, 'id'));
  return parsed.data;
}

/** An approval names the reconciliation the approver reviewed (`genfill approve --reconciliation`). */
const approveBody = z.strictObject({ reconciliation: z.union([z.number().int().positive(), z.string().regex(/^\d+$/)]).transform(String) });

function bodyOf(req: Request): z.infer<typeof actionBody> {
  // A body that is not JSON would otherwise be read as "no reason given".
  const sent = req.get('transfer-encoding') !== undefined || Number(req.get('content-length') ?? '0') > 0;
  if (req.body === undefined && sent) {
    throw new InvalidInputError([{ path: 'body', message: 'send the body as application/json, e.g. {"reason": "…"}' }]);
  }
  const parsed = actionBody.safeParse(req.body ?? {});
  if (!parsed.success) throw new InvalidInputError(problems(parsed.error, 'body'));
  return parsed.data;
}

const actor = (res: Response): Actor => ({ principal: requirePrincipal(res).subject, via: 'api' });

/**
 * The Redis half of a verb whose registry half is committed: a Redis that does not answer is
 * a warning in the answer, not a failure (the planner re-applies the pause; claims refuse a
 * cancelled release's jobs).
 */
export async function bestEffort<T>(dispatcher: Dispatcher, what: string, fn: () => Promise<T>): Promise<{ value: T | null; warning: string | null }> {
  const skipped = `${what} was not done; the registry is updated and workers obey it`;
  // BullMQ waits for a connection without a limit: probe first rather than leave a queue
  // command pending that could land long after a later, opposite one.
  if (!(await redisAnswers(dispatcher.redis, 2_000))) return { value: null, warning: `Redis is not answering: ${skipped}` };
  try {
    return { value: await withDeadline(fn(), 5_000, what), warning: null };
  } catch (err) {
    const down = asRedisUnavailable(err);
    if (!down) throw err;
    return { value: null, warning: `${down.message}: ${skipped}` };
  }
}

export function releaseRoutes(deps: ReleaseDeps): Router {
  const { db, dispatcher, queues, log } = deps;
  const router = Router();
  const read = requirePermission('read');
  const operate = requirePermission('operate');
  const json = express.json({ limit: '16kb' });

  router.get('/releases', read, async (_req, res) => {
    res.json(await releaseList(db));
  });

  // The summary of `genfill status --json`; ?partitions=STATUS|all&page=&pageSize= adds one page
  // of the partitions, as --partitions does.
  router.get('/releases/:id', read, async (req, res) => {
    const id = idOf(req);
    const q = (name: string): string | undefined => {
      const v = req.query[name];
      if (v === undefined) return undefined;
      if (typeof v !== 'string') throw new InvalidInputError([{ path: `query.${name}`, message: 'give it once, as a single value' }]);
      return v;
    };
    const listing = parsePartitionListing(
      { partitions: q('partitions'), page: q('page'), pageSize: q('pageSize') },
      { partitions: 'query.partitions', page: 'query.page', pageSize: 'query.pageSize' },
    );
    res.json(await releaseStatus(db, id, listing ? { partitions: listing } : {}));
  });

  for (const paused of [true, false]) {
    const verb = paused ? 'pause' : 'resume';
    router.post(`/releases/:id/${verb}`, operate, json, async (req, res) => {
      const id = idOf(req);
      const { reason } = bodyOf(req);
      const who = actor(res);
      const result = await setOperatorPause(db, id, paused, reason ?? null, who);
      // Re-applied on a no-op too: it repairs a queue whose pause drifted from the flag.
      const mirror = await bestEffort(dispatcher, `the queue ${verb}`, () => mirrorPause(dispatcher, id, paused));
      log.info({ release: id, subject: who.principal, changed: result.changed, queue: mirror.value }, `${verb} via the API`);
      res.json({ ...result, action: verb, principal: who.principal, queue: mirror.value, warning: mirror.warning });
    });
  }

  // The live path's verbs are requests the projector service runs (README "Roles"): the API
  // queues one as the token's subject and waits for it, bounded; 202 with the request id when
  // no projector has run it yet (it stays queued).
  for (const kind of ['seal', 'unseal', 'catchup'] as const) {
    router.post(`/releases/:id/${kind}`, operate, json, async (req, res) => {
      const id = idOf(req);
      const { reason } = bodyOf(req);
      const who = actor(res);
      const args = parseRequestArgs(kind, kind === 'unseal' ? { reason } : {}, 'body');
      const request = await asPrincipal(db, who.principal, (conn) => submitRequest(conn, { kind, release: id, args }));
      const done = await awaitRequest(db, request, REQUEST_WAIT_MS);
      if (!done) {
        res.status(202).json({ request, state: 'PENDING', message: `request #${request} is queued: no projector service has run it within ${REQUEST_WAIT_MS / 1000} s` });
        return;
      }
      if (done.state === 'FAILED') throw requestError(done);
      log.info({ release: id, subject: who.principal, request }, `${kind} via the API`);
      res.json({ request, principal: who.principal, ...(done.result as object) });
    });
  }

  // The cutover, a request the projector service runs; {"dryRun": true} checks every
  // precondition without sealing, {"maxFreezeMs": n} bounds the freeze. A failed precondition
  // answers as exit 3 does (409), a mismatch in the tail as exit 4.
  router.post('/releases/:id/cutover', operate, json, async (req, res) => {
    const id = idOf(req);
    const body = parseRequestArgs('cutover', req.body ?? {}, 'body');
    const who = actor(res);
    const args = { dryRun: body.dryRun ?? false, ...(body.maxFreezeMs ? { maxFreezeMs: body.maxFreezeMs } : {}) };
    const request = await asPrincipal(db, who.principal, (conn) => submitRequest(conn, { kind: 'cutover', release: id, args }));
    const done = await awaitRequest(db, request, REQUEST_WAIT_MS);
    if (!done) {
      res.status(202).json({ request, state: 'PENDING', message: `request #${request} is queued: no projector service has run it within ${REQUEST_WAIT_MS / 1000} s` });
      return;
    }
    if (done.state === 'FAILED') throw requestError(done);
    const r = done.result as { ok: boolean; checks: { name: string; ok: boolean; detail: string }[] };
    log.info({ release: id, subject: who.principal, request, dryRun: args.dryRun, ok: r.ok }, 'cutover via the API');
    res.status(r.ok ? 200 : 409).json({ request, principal: who.principal, ...(done.result as object) });
  });

  // The rollback, a request the projector service runs ({"maxFreezeMs": n} bounds the freeze).
  router.post('/releases/:id/rollback', operate, json, async (req, res) => {
    const id = idOf(req);
    const body = parseRequestArgs('rollback', req.body ?? {}, 'body');
    const who = actor(res);
    const args = body.maxFreezeMs ? { maxFreezeMs: body.maxFreezeMs } : {};
    const request = await asPrincipal(db, who.principal, (conn) => submitRequest(conn, { kind: 'rollback', release: id, args }));
    const done = await awaitRequest(db, request, REQUEST_WAIT_MS);
    if (!done) {
      res.status(202).json({ request, state: 'PENDING', message: `request #${request} is queued: no projector service has run it within ${REQUEST_WAIT_MS / 1000} s` });
      return;
    }
    if (done.state === 'FAILED') throw requestError(done);
    log.info({ release: id, subject: who.principal, request }, 'rollback via the API');
    res.json({ request, principal: who.principal, ...(done.result as object) });
  });

  router.post('/releases/:id/approve', requirePermission('approve'), json, async (req, res) => {
    const id = idOf(req);
    const parsed = approveBody.safeParse(req.body ?? {});
    if (!parsed.success) throw new InvalidInputError(problems(parsed.error, 'body'));
    const who = actor(res);
    // genfill.approve refuses an id that is not the latest passing reconciliation, and the submitter.
    const r = await asPrincipal(db, who.principal, (conn) => approveVerb(conn, { release: id, reconciliationId: parsed.data.reconciliation }));
    log.info({ release: id, subject: who.principal, reconciliation: parsed.data.reconciliation, outcome: r.outcome }, 'approval via the API');
    res.json({ release: id, outcome: r.outcome, principal: r.principal, reconciliationId: String(r.reconciliation_id), approvals: r.approvals, required: r.required, state: r.state });
  });

  router.post('/releases/:id/cancel', operate, json, async (req, res) => {
    const id = idOf(req);
    const { reason } = bodyOf(req);
    const who = actor(res);
    const result = await cancelRelease(db, id, reason ?? null, who);
    await queues.forget(id);
    const removal = await bestEffort(dispatcher, 'removing the queue', () => removeReleaseQueue(dispatcher, id));
    log.info({ release: id, subject: who.principal, from: result.from }, 'cancelled via the API');
    res.json({ ...result, principal: who.principal, queue: removal.value, warning: removal.warning });
  });

  return router;
}
