// The status page and what it links to, for people in a browser (same login as Bull Board):
//   GET  /                                           the page (status-page.ts), any role
//   GET  /status/releases/:id/partitions/:partition  one partition's evidence, any role
//   GET  /status/reconciliations/:id/findings        a reconciliation's findings as NDJSON, any role
//   POST /status/releases/:id/pause|resume           the page's forms, operators only
// The forms do what `genfill pause|resume` and POST /releases/:id/pause do — the registry verb
// genfill.set_operator_pause with the token's subject as principal, then the queue mirror —
// and, being cookie requests, pass the same-origin check (same-origin.ts) before they get here.
import express, { Router, type ErrorRequestHandler, type Request, type RequestHandler, type Response } from 'express';
import { z } from 'zod';
import { InvalidInputError, NotFoundError, RefusedError, releaseSchema } from '@genfill/contracts';
import type { Logger } from '@genfill/observability';
import { setOperatorPause, type Actor } from '@genfill/planner';
import { findingLine, storedFindings } from '@genfill/reconcile';
import type { Db } from '@genfill/registry';
import { can, principalOf, requirePermission, requirePrincipal } from './auth.ts';
import { evidencePageBody } from './evidence-page.ts';
import { HEATMAP_STYLE } from './heatmap.ts';
import { esc, sendPage } from './html.ts';
import { UnauthenticatedError, toHttp } from './http-errors.ts';
import { bestEffort } from './releases.ts';
import { statusData } from './status-data.ts';
import { anchorOf, REFRESH_SECONDS, statusPageBody } from './status-page.ts';
import { type Dispatcher, mirrorPause } from '@genfill/queue';

export interface StatusDeps {
  db: Db;
  dispatcher: Dispatcher;
  log: Logger;
}

const releaseId = releaseSchema.shape.release;
const partitionId = z.string().min(1).max(200);
const reconciliationId = z.string().regex(/^[1-9]\d{0,17}$/, 'a reconciliation id is a positive integer');
const actionForm = z.strictObject({ reason: z.string().trim().max(1000).optional() });

function param<T>(schema: z.ZodType<T>, req: Request, name: string): T {
  const parsed = schema.safeParse(req.params[name]);
  if (!parsed.success) throw new InvalidInputError(parsed.error.issues.map((i) => ({ path: name, message: i.message })));
  return parsed.data;
}

const wantsHtml = (req: Request) => req.accepts(['json', 'html']) === 'html';

/** A browser without a session goes to the login form and comes back here; API clients get 401. */
const loginFirst: RequestHandler = (req, res, next) => {
  if (principalOf(res)) return next();
  if ((req.method === 'GET' || req.method === 'HEAD') && wantsHtml(req)) return res.redirect(303, '/login?next=%2F');
  throw new UnauthenticatedError();
};

/** Errors of these routes as a page for a browser (a refused resume, an unknown partition); JSON otherwise. */
const htmlErrors: ErrorRequestHandler = (err, req, res, next) => {
  if (res.headersSent || !wantsHtml(req)) return next(err);
  const http = toHttp(err);
  if (http.status === 401) return res.redirect(303, '/login?next=%2F');
  if (http.status >= 500) return next(err);
  const problems = http.body.problems?.map((p) => `<li><code>${esc(p.path)}</code>: ${esc(p.message)}</li>`).join('') ?? '';
  sendPage(res, http.status, {
    title: `${http.status} · genfill`,
    who: principalOf(res) ?? null,
    body: `<h2>${esc(http.status)} ${esc(http.body.error)}</h2><p class="bad">${esc(http.body.message)}</p>${problems ? `<ul>${problems}</ul>` : ''}<p><a href="/">Back to the status page</a></p>`,
  });
};

/** A reconciliation's release, its findings count and how many of them the registry holds. */
async function reconciliationFindingsCount(db: Db, id: string) {
  const { rows } = await db.query<{ release: string; findings: string; stored: string; findings_path: string | null }>(
    `SELECT release, findings_count::text AS findings, findings_path,
            (SELECT count(*) FROM genfill.reconciliation_findings f WHERE f.reconciliation_id = r.id)::text AS stored
       FROM genfill.reconciliations r WHERE id = $1::bigint`,
    [id],
  );
  return rows[0];
}

export function statusRoutes(deps: StatusDeps): Router {
  const { db, dispatcher, log } = deps;
  const router = Router();
  const read = requirePermission('read');

  router.get('/', loginFirst, read, async (_req, res) => {
    const who = requirePrincipal(res);
    const data = await statusData(db);
    sendPage(res, 200, { title: 'genfill status', who, style: HEATMAP_STYLE, refreshSeconds: REFRESH_SECONDS, body: statusPageBody(data, can(who, 'operate')) });
  });

  router.get('/status/releases/:id/partitions/:partition', loginFirst, read, async (req, res) => {
    const page = await evidencePageBody(db, param(releaseId, req, 'id'), param(partitionId, req, 'partition'));
    sendPage(res, 200, { ...page, who: requirePrincipal(res) });
  });

  // The complete list, in the format of `genfill reconcile`'s export and `genfill repair --findings`.
  router.get('/status/reconciliations/:id/findings', loginFirst, read, async (req, res) => {
    const id = param(reconciliationId, req, 'id');
    const r = await reconciliationFindingsCount(db, id);
    if (!r) throw new NotFoundError(`there is no reconciliation #${id}`);
    if (r.stored !== r.findings) {
      throw new RefusedError(`reconciliation #${id} predates stored findings: its ${r.findings} finding(s) are in ${r.findings_path ?? 'a file on the machine that ran it'}`);
    }
    res
      .status(200)
      .type('text/plain; charset=utf-8')
      .set('Cache-Control', 'no-store')
      .set('X-Content-Type-Options', 'nosniff')
      .set('Content-Disposition', `inline; filename="reconcile-${r.release.replace(/[^A-Za-z0-9._@+-]/g, '_')}-${id}.ndjson"`);
    for await (const chunk of storedFindings(db, id)) {
      if (!res.write(chunk.map(findingLine).join(''))) await new Promise((resolve) => res.once('drain', resolve));
    }
    res.end();
  });

  const form = express.urlencoded({ extended: false, limit: '8kb' });
  for (const paused of [true, false]) {
    const verb = paused ? 'pause' : 'resume';
    router.post(`/status/releases/:id/${verb}`, requirePermission('operate'), form, async (req: Request, res: Response) => {
      const id = param(releaseId, req, 'id');
      const parsed = actionForm.safeParse(req.body ?? {});
      if (!parsed.success) throw new InvalidInputError(parsed.error.issues.map((i) => ({ path: ['form', ...i.path.map(String)].join('.'), message: i.message })));
      const reason = parsed.data.reason || null;
      // Building again after an operator stopped it deserves a why in the log.
      if (!paused && reason === null) throw new InvalidInputError([{ path: 'form.reason', message: 'say why the release may build again' }]);
      const who: Actor = { principal: requirePrincipal(res).subject, via: 'status-page' };
      const result = await setOperatorPause(db, id, paused, reason, who);
      const mirror = await bestEffort(dispatcher, `the queue ${verb}`, () => mirrorPause(dispatcher, id, paused));
      if (mirror.warning) log.warn({ release: id, subject: who.principal }, mirror.warning);
      log.info({ release: id, subject: who.principal, changed: result.changed, queue: mirror.value }, `${verb} from the status page`);
      res.redirect(303, `/#${anchorOf(id)}`);
    });
  }

  router.use(htmlErrors);
  return router;
}
