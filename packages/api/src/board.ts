// Bull Board at /admin/queues, one board per kind of caller: operators get a writable board,
// everyone else the same queues read-only (bull-board's readOnlyMode is per queue adapter, so
// the two boards share the BullMQ queues and differ only in their adapters).
//
// Pausing a queue in Bull Board must be an operator pause in the registry, which is what
// workers obey and `status` shows. bull-board's own handlers (node_modules/@bull-board/api/
// dist/routes.js) are `PUT /api/queues/:queueName/pause|resume` for one queue and
// `PUT /api/queues/pause|resume` for all; those four are answered here first: the registry
// flag is set with the caller's subject as principal, then the queue pause mirrors it.
//
// Every other write is denied (issue 28: an operator's `rate-limit` with a 24-day duration,
// `add`, `update-data`, `empty` and `obliterate` succeeded and left no record), except retry,
// promote and clean, which are kept and recorded with the subject. The kept writes are matched
// here in bull-board's own route order, so the route recorded is the route bull-board runs;
// anything else that is not a GET or HEAD is 403 before bull-board sees it. Clean is kept for
// finished jobs only (completed, failed): cleaning a waiting, delayed or active job drops a
// partition's work, as `empty` does. Retry, promote and clean are recorded in the release's log
// under the subject through the verb genfill.record_board_action before bull-board acts, and
// in the API's structured log with the route.
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { ExpressAdapter } from '@bull-board/express';
import { Router, type Express, type Request, type RequestHandler, type Response } from 'express';
import { NotFoundError, OPEN_STATES, RefusedError } from '@genfill/contracts';
import type { Logger } from '@genfill/observability';
import { setOperatorPause, type Actor } from '@genfill/planner';
import { syncQueuePause, withDeadline } from '@genfill/queue';
import { asPrincipal, boardActionVerb, type Db } from '@genfill/registry';
import { can, principalOf, requirePermission, requirePrincipal } from './auth.ts';
import { ForbiddenError, UnauthenticatedError } from './http-errors.ts';
import type { ReleaseQueues, ShownRelease } from './queues.ts';

export const BOARD_PATH = '/admin/queues';

interface Board {
  router: RequestHandler;
  replace(adapters: BullMQAdapter[]): void;
}

function createBoard(readOnlyMode: boolean): Board {
  const serverAdapter = new ExpressAdapter();
  serverAdapter.setBasePath(BOARD_PATH);
  const board = createBullBoard({
    queues: [],
    serverAdapter,
    options: {
      uiConfig: {
        boardTitle: readOnlyMode ? 'genfill (read-only)' : 'genfill',
        miscLinks: [{ text: 'Status page', url: '/' }, { text: 'Log out', url: '/logout' }],
      },
    },
  });
  // getRouter() is an express app of its own, with express's defaults.
  const app = serverAdapter.getRouter() as Express;
  app.disable('x-powered-by');
  return { router: app, replace: (adapters) => board.replaceQueues(adapters) };
}

export interface BoardDeps {
  db: Db;
  queues: ReleaseQueues;
  log: Logger;
}

/** The board writes kept besides pause and resume, in bull-board's route order (node_modules/@bull-board/api/dist/routes.js). */
const KEPT_WRITES = [
  { path: '/api/queues/:queueName/retry/:queueStatus', action: 'retry', scope: 'queue' },
  { path: '/api/queues/:queueName/promote', action: 'promote', scope: 'queue' },
  { path: '/api/queues/:queueName/clean/:queueStatus', action: 'clean', scope: 'queue' },
  { path: '/api/queues/:queueName/:jobId/retry', action: 'retry', scope: 'job' },
  { path: '/api/queues/:queueName/:jobId/clean', action: 'clean', scope: 'job' },
  { path: '/api/queues/:queueName/:jobId/promote', action: 'promote', scope: 'job' },
] as const;

/** Job states whose jobs clean may remove: their work is done (or given up on). */
const CLEANABLE = new Set(['completed', 'failed']);

/** Set once a write is let through to bull-board; the deny gate lets only these pass. */
const KEPT = 'boardWriteKept';
const kept = (res: Response): boolean => res.locals[KEPT] === true;

const actor = (res: Response): Actor => ({ principal: requirePrincipal(res).subject, via: 'bull-board' });

/** Browsers without a session go to the login form; API clients get 401. */
const requireLogin: RequestHandler = (req, res, next) => {
  if (principalOf(res)) return next();
  if ((req.method === 'GET' || req.method === 'HEAD') && !req.path.startsWith('/api/') && req.accepts('html')) {
    return res.redirect(303, '/login');
  }
  throw new UnauthenticatedError();
};

export function boardRoutes(deps: BoardDeps): Router {
  const { db, queues, log } = deps;
  const operatorBoard = createBoard(false);
  const readerBoard = createBoard(true);
  queues.onChange((shown) => {
    operatorBoard.replace(shown.map((s) => new BullMQAdapter(s.queue, { readOnlyMode: false, description: s.release })));
    readerBoard.replace(shown.map((s) => new BullMQAdapter(s.queue, { readOnlyMode: true, description: s.release })));
  });

  const refresh: RequestHandler = async (_req, _res, next) => {
    await queues.refresh();
    next();
  };

  const shownRelease = (req: Request): ShownRelease => {
    const name = String(req.params.queueName);
    const shown = queues.byQueueName(name);
    if (!shown) throw new NotFoundError(`queue ${name} belongs to no release shown on this board`);
    return shown;
  };

  // One queue: the registry flag first; then next() lets bull-board pause or resume the
  // BullMQ queue, the mirror. A refused flag change (a release no longer open) stops here
  // and the queue is left alone.
  const pauseOne = (paused: boolean): RequestHandler => async (req, res, next) => {
    res.locals[KEPT] = true;
    const shown = shownRelease(req);
    const who = actor(res);
    const result = await setOperatorPause(db, shown.release, paused, null, who);
    log.info({ release: shown.release, subject: who.principal, changed: result.changed }, paused ? 'paused from Bull Board' : 'resumed from Bull Board');
    next();
  };

  // Every queue: bull-board would pause every writable queue, including those of releases
  // that are no longer open and whose flag cannot be set. Done here instead, release by
  // release, flag then mirror; the failures are reported together after the rest are done.
  const pauseAll = (paused: boolean): RequestHandler => async (_req, res) => {
    const who = actor(res);
    const refused: string[] = [];
    for (const shown of queues.list()) {
      if (!OPEN_STATES.includes(shown.state)) continue;
      try {
        await setOperatorPause(db, shown.release, paused, null, who);
        await withDeadline(syncQueuePause(shown.queue, paused), 5_000, `${paused ? 'pause' : 'resume'} of ${shown.queue.name}`);
      } catch (err) {
        refused.push(`${shown.release}: ${(err as Error).message}`);
      }
    }
    log.info({ subject: who.principal, refused: refused.length }, paused ? 'paused every release from Bull Board' : 'resumed every release from Bull Board');
    if (refused.length > 0) throw new RefusedError(`some releases were not ${paused ? 'paused' : 'resumed'}:\n${refused.join('\n')}`);
    res.status(200).json({});
  };

  // Retry, promote, clean: checked, recorded with the subject, then bull-board does them. The
  // first of these routes to match is the one bull-board runs; later matches pass.
  const keptWrite = (write: (typeof KEPT_WRITES)[number]): RequestHandler => async (req, res, next) => {
    if (kept(res)) return next();
    const shown = shownRelease(req);
    const who = requirePrincipal(res);
    const jobId = write.scope === 'job' ? String(req.params.jobId) : undefined;
    const status = write.scope === 'queue' ? String(req.params.queueStatus ?? '') || undefined : undefined;
    if (write.action === 'clean') {
      const state = jobId !== undefined ? await shown.queue.getJobState(jobId) : status;
      if (!CLEANABLE.has(String(state))) {
        throw new ForbiddenError(
          `Bull Board clean is kept for completed and failed jobs only; ${jobId !== undefined ? `job ${jobId} is ${state}` : `these jobs are ${state}`}: ` +
            `removing them drops partitions' work — pause the release, or cancel it with \`genfill cancel ${shown.release}\``,
        );
      }
    }
    // Recorded before bull-board acts: a write the registry could not record does not happen.
    await asPrincipal(db, who.subject, (conn) =>
      boardActionVerb(conn, { release: shown.release, action: write.action, detail: { queue: shown.queue.name, ...(jobId !== undefined ? { jobId } : {}), ...(status ? { status } : {}) } }),
    );
    res.locals[KEPT] = true;
    log.info(
      { subject: who.subject, role: who.role, via: 'bull-board', release: shown.release, queue: shown.queue.name, action: write.action, jobId, status, route: `${req.method} ${write.path}` },
      `Bull Board ${write.action} by ${who.subject}`,
    );
    next();
  };

  // Everything else that writes is refused, whoever asks: bull-board's read-only mode is per
  // queue adapter and would let an operator rate-limit, add, edit, empty or obliterate.
  const denyOtherWrites: RequestHandler = (req, res, next) => {
    if (req.method === 'GET' || req.method === 'HEAD' || kept(res)) return next();
    const who = principalOf(res);
    log.warn({ subject: who?.subject, method: req.method, path: `${BOARD_PATH}${req.path}` }, 'Bull Board write denied');
    throw new ForbiddenError(
      `Bull Board ${req.method} ${BOARD_PATH}${req.path} is denied: genfill keeps only pause, resume, retry, promote and clean on the board ` +
        '(a queue edit there bypasses the registry and leaves no record) — use the genfill verbs (pause, resume, cancel) instead',
    );
  };

  // Viewers and approvers look; anything but a read needs an operator, whatever bull-board's
  // read-only mode would have said.
  const readsUnlessOperator: RequestHandler = (req, res, next) => {
    if (req.method === 'GET' || req.method === 'HEAD') return next();
    return requirePermission('operate')(req, res, next);
  };

  const router = Router();
  const operate = requirePermission('operate');
  router.use(BOARD_PATH, requireLogin, refresh);
  router.put(`${BOARD_PATH}/api/queues/pause`, operate, pauseAll(true));
  router.put(`${BOARD_PATH}/api/queues/resume`, operate, pauseAll(false));
  router.put(`${BOARD_PATH}/api/queues/:queueName/pause`, operate, pauseOne(true));
  router.put(`${BOARD_PATH}/api/queues/:queueName/resume`, operate, pauseOne(false));
  for (const write of KEPT_WRITES) router.put(`${BOARD_PATH}${write.path}`, operate, keptWrite(write));
  router.use(BOARD_PATH, denyOtherWrites);
  router.use(BOARD_PATH, readsUnlessOperator, (req, res, next) =>
    (can(requirePrincipal(res), 'operate') ? operatorBoard : readerBoard).router(req, res, next),
  );
  return router;
}
