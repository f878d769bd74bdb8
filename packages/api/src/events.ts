// POST /datasets/:ds/events (operator): the body is NDJSON `{key, revision, op, row}` events,
// applied to the dataset's ingress mirror exactly as `genfill ingest` applies a file, with the
// token's subject as the principal. 200 with the counts; 400 malformed (every bad line listed,
// nothing written) or more events than the pending bound (setting ingest.max_pending_events); 409 a conflict (nothing
// applied, recorded) or not a mirror; 429 busy with Retry-After.
//
// The order (issue 28): the pending bound is checked BEFORE the body is read (a full dataset is
// answered 429 at once and the body is not read); then the body is read whole under upload.ts's
// bounds (size 413, rate and time 408) without holding any connection; only then does the apply
// take a connection — from the ingest pool, apart from the pool of reads and verbs, so uploads
// can never take the connections GET /releases needs.
import { Router } from 'express';
import { Gauge, type Registry } from 'prom-client';
import { ingest } from '@genfill/capture';
import { DEFAULT_RETRY_AFTER_SECONDS, IngressBusyError, InvalidInputError, releaseSchema } from '@genfill/contracts';
import type { Logger } from '@genfill/observability';
import type { Db } from '@genfill/registry';
import { requirePermission, requirePrincipal } from './auth.ts';
import { RequestRefusedError } from './http-errors.ts';
import { ingressLoad, isFull } from './ingress-load.ts';
import { chunksOf, ClientGoneError, closeUnlessRead, readBody, refuseDeclaredSize, type UploadLimits } from './upload.ts';

export interface IngestLimits extends UploadLimits {
  /** GENFILL_API_INGEST_MAX_UPLOADS: bodies being read at once. */
  maxUploads: number;
}

export interface EventDeps {
  /** The pool of reads and verbs: the pending check before the body, one short query. */
  db: Db;
  /** The ingest pool: the apply, once the body is read. */
  ingestDb: Db;
  log: Logger;
  registry: Registry;
  limits: IngestLimits;
}

const datasetName = releaseSchema.shape.dataset;
/** The same wait the apply's busy answer asks for. */
const RETRY_AFTER_SECONDS = DEFAULT_RETRY_AFTER_SECONDS;

/** Full before the body was read: the counts say so, `events` is 0 (the body was not counted). */
class IngressFullError extends IngressBusyError {
  constructor(dataset: string, pending: number, max: number) {
    super(dataset, pending, 0, max, RETRY_AFTER_SECONDS);
    // The same class to a client as the apply's busy answer.
    this.name = 'IngressBusyError';
    this.message =
      `dataset ${dataset} is busy: ${pending} events are pending, at the owner's bound (setting ingest.max_pending_events, ${max}); ` +
      `the body was not read and nothing was written — retry in ${RETRY_AFTER_SECONDS}s, once the projector has consumed some`;
  }
}

export function eventRoutes(deps: EventDeps): Router {
  const { db, ingestDb, log, limits } = deps;
  const router = Router();
  let reading = 0;
  new Gauge({
    name: 'genfill_api_ingest_uploads',
    help: 'POST /datasets/:ds/events bodies being read now (no database connection is held while they are)',
    registers: [deps.registry],
    collect() {
      this.set(reading);
    },
  });

  router.post('/datasets/:ds/events', requirePermission('operate'), async (req, res) => {
    const who = requirePrincipal(res);
    try {
      const parsed = datasetName.safeParse(req.params.ds);
      if (!parsed.success) {
        throw new InvalidInputError(parsed.error.issues.map((i) => ({ path: 'ds', message: i.message })));
      }
      const dataset = parsed.data;
      refuseDeclaredSize(req, limits);
      if (reading >= limits.maxUploads) {
        throw new RequestRefusedError(
          429,
          `${reading} uploads are being read already (GENFILL_API_INGEST_MAX_UPLOADS): nothing was read or written — retry in ${RETRY_AFTER_SECONDS}s`,
          RETRY_AFTER_SECONDS,
        );
      }
      reading++;
      let body: Buffer[];
      try {
        const load = await ingressLoad(db, dataset);
        if (isFull(load)) throw new IngressFullError(dataset, load.pending, load.max);
        body = await readBody(req, limits);
      } finally {
        reading--;
      }
      const result = await ingest(ingestDb, dataset, chunksOf(body), { principal: who.subject });
      log.info({ dataset: result.dataset, subject: who.subject, events: result.events, applied: result.applied, stale: result.stale, refused: result.refused }, 'ingest via the API');
      res.json({ ...result, principal: who.subject });
    } catch (err) {
      if (err instanceof ClientGoneError) {
        log.info({ subject: who.subject, dataset: req.params.ds }, 'ingest upload abandoned by the client: nothing written');
        return;
      }
      if (err instanceof RequestRefusedError) log.warn({ subject: who.subject, dataset: req.params.ds, status: err.status }, err.message);
      // A body not read to its end is not read at all: the answer closes the connection.
      closeUnlessRead(req, res);
      throw err;
    }
  });

  return router;
}
