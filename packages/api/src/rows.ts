// GET /datasets/:ds/rows?cursor=&limit=&generation=&key= (any role): a pinned read, as
// `genfill read` does it (docs/reads.md). 200 {dataset, generation, rows, nextCursor}; 400 bad
// input (nothing written); 404 an unknown dataset; 410 {error, reason} a generation that is
// gone. Each page takes or extends the reader lease its cursor names, recorded with the
// token's subject as principal.
import { Router, type Request } from 'express';
import { z } from 'zod';
import { InvalidInputError, releaseSchema } from '@genfill/contracts';
import type { Logger } from '@genfill/observability';
import { newHolder, readPage } from '@genfill/reads';
import { DEFAULT_READER_LEASE_MS, type Db } from '@genfill/registry';
import { requirePermission, requirePrincipal } from './auth.ts';

export interface RowDeps {
  db: Db;
  log: Logger;
  /** GENFILL_READER_LEASE_TTL in milliseconds (default 5 minutes). */
  leaseTtlMs?: number;
}

const datasetName = releaseSchema.shape.dataset;
const single = z.string().max(8192, 'too long');
const query = z.strictObject({
  cursor: single.optional(),
  limit: single.optional(),
  generation: single.min(1).optional(),
  key: single.optional(),
});

function parse(req: Request) {
  const ds = datasetName.safeParse(req.params.ds);
  const q = query.safeParse(req.query);
  const problems = [
    ...(ds.success ? [] : ds.error.issues.map((i) => ({ path: 'ds', message: i.message }))),
    ...(q.success ? [] : q.error.issues.map((i) => ({ path: i.path.map(String).join('.') || 'query', message: i.code === 'unrecognized_keys' ? `${i.message}: the parameters are cursor, limit, generation, key` : i.message }))),
  ];
  if (problems.length > 0 || !ds.success || !q.success) throw new InvalidInputError(problems);
  return { dataset: ds.data, ...q.data };
}

export function rowRoutes(deps: RowDeps): Router {
  const { db, log } = deps;
  const router = Router();

  router.get('/datasets/:ds/rows', requirePermission('read'), async (req, res) => {
    const who = requirePrincipal(res);
    const q = parse(req);
    const page = await readPage(db, {
      dataset: q.dataset,
      generation: q.generation ?? null,
      cursor: q.cursor ?? null,
      key: q.key ?? null,
      limit: q.limit ?? null,
      holder: q.cursor ? null : newHolder(`api:${who.subject}`),
      leaseTtlMs: deps.leaseTtlMs ?? DEFAULT_READER_LEASE_MS,
      principal: who.subject,
    });
    log.debug({ dataset: page.dataset, generation: page.generation, subject: who.subject, rows: page.rows.length, holder: page.lease.holder }, 'pinned read');
    res.set('Cache-Control', 'no-store').json({ dataset: page.dataset, generation: page.generation, rows: page.rows, nextCursor: page.nextCursor });
  });

  return router;
}
