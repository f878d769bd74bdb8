// How full a dataset's ingress is: its pending events and the bound they are held to, read
// before an upload's body is (the early 429). The ONE place the API reads the bound: today it
// is GENFILL_MAX_PENDING_EVENTS, passed in from the API's config, and the count comes from
// genfill.ingress_pending(dataset, limit); when the bound moves into an owner-held setting,
// only this function changes.
import type { Db } from '@genfill/registry';

export interface IngressLoad {
  /** Pending events, counted up to max + 1 (the count stops there). */
  pending: number;
  /** The pending bound. */
  max: number;
}

export async function ingressLoad(db: Db, dataset: string, maxPending: number): Promise<IngressLoad> {
  const { rows } = await db.query<{ pending: string }>('SELECT genfill.ingress_pending($1, $2::bigint + 1) AS pending', [dataset, maxPending]);
  return { pending: Number(rows[0]!.pending), max: maxPending };
}

/** Full: not one more event fits (ingest_apply refuses pending + n > max). */
export const isFull = (load: IngressLoad): boolean => load.pending >= load.max;
