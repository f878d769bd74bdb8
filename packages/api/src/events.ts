// POST /datasets/:ds/events (operator): the body is NDJSON `{key, revision, op, row}` events,
// applied to the dataset's ingress mirror exactly as `genfill ingest` applies a file — the
// body is streamed, never held whole — with the token's subject as the principal. 200 with the
// counts; 400 malformed (every bad line listed, nothing written) or more events than
// the owner's pending bound (genfill.settings); 409 a conflict (nothing applied, recorded) or not a mirror; 429
// busy with Retry-After.
import { once } from 'node:events';
import { Router, type Request } from 'express';
import { ingest } from '@genfill/capture';
import { InvalidInputError, releaseSchema } from '@genfill/contracts';
import type { Logger } from '@genfill/observability';
import type { Db } from '@genfill/registry';
import { requirePermission, requirePrincipal } from './auth.ts';

export interface EventDeps {
  db: Db;
  log: Logger;
}

const datasetName = releaseSchema.shape.dataset;

/** Read what is left of a body we refused early, so the client sees the answer, not a reset. */
async function drain(req: Request): Promise<void> {
  if (req.readableEnded || req.destroyed) return;
  req.resume();
  await Promise.race([once(req, 'end'), once(req, 'close'), new Promise((r) => setTimeout(r, 10_000).unref())]).catch(() => undefined);
}

export function eventRoutes(deps: EventDeps): Router {
  const { db, log } = deps;
  const router = Router();

  router.post('/datasets/:ds/events', requirePermission('operate'), async (req, res) => {
    const who = requirePrincipal(res);
    try {
      const parsed = datasetName.safeParse(req.params.ds);
      if (!parsed.success) {
        throw new InvalidInputError(parsed.error.issues.map((i) => ({ path: 'ds', message: i.message })));
      }
      const result = await ingest(db, parsed.data, req, { principal: who.subject });
      log.info({ dataset: result.dataset, subject: who.subject, events: result.events, applied: result.applied, stale: result.stale, refused: result.refused }, 'ingest via the API');
      res.json({ ...result, principal: who.subject });
    } catch (err) {
      await drain(req);
      throw err;
    }
  });

  return router;
}
