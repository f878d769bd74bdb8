// How full a dataset's ingress is: its pending events and the bound they are held to, read
// before an upload's body is (the early 429). The ONE place the API reads the bound: the
// owner's setting ingest.max_pending_events (migration 0026; the same one genfill.ingest_apply
// enforces), and the count comes from genfill.ingress_pending(dataset, limit).
import { maxPendingEvents } from '@genfill/capture';
import type { Db } from '@genfill/registry';

export interface IngressLoad {
  /** Pending events, counted up to max + 1 (the count stops there). */
  pending: number;
  /** The pending bound. */
  max: number;
}

export async function ingressLoad(db: Db, dataset: string): Promise<IngressLoad> {
  const maxPending = await maxPendingEvents(db);
  const { rows } = await db.query<{ pending: string }>('SELECT genfill.ingress_pending($1, $2::bigint + 1) AS pending', [dataset, maxPending]);
  return { pending: Number(rows[0]!.pending), max: maxPending };
}

/** Full: not one more event fits (ingest_apply refuses pending + n > max). */
export const isFull = (load: IngressLoad): boolean => load.pending >= load.max;
