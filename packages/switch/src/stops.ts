// The key a switch or a catch-up round refused on (migration 0029). The cutover's and the
// rollback's switch transaction, a rollback's replay round and a catch-up round apply log events
// through a transform; a fan-out or a changed key is poison and the step is refused, its
// transaction rolled back — and with it anything it wrote. The key used to be named only in the
// refusal's text, which genfill.quarantine_key (issue 28) no longer takes on trust, so the
// operator's one way out was a transform fix. Here:
//   1. poisonStop, in the refused transaction while its events are still staged: the poison
//      search (@genfill/projector findPoison) finds the event that fails alone — its key is the
//      log's, which quarantine takes and the apply skips (for a changed key the apply only named
//      the transform's output key, which no event has);
//   2. recordStop, after that transaction rolled back (and, for a switch, after the seal was
//      undone: reopening ingress comes first and never waits on this), one INSERT of its own
//      into genfill.switch_stops, which commits although the step was refused;
//   3. stopAdvice, the refusal's tail: the `genfill quarantine` command line for the key, or,
//      when the record failed, why, so the operator knows only a transform fix is left.
import { findPoison, type Poison, type ProjectedDataset } from '@genfill/projector';
import type { Conn, Db } from '@genfill/registry';

export type StopKind = 'cutover' | 'rollback' | 'catchup';

export interface SwitchStop {
  kind: StopKind;
  dataset: string;
  release: string;
  /** The generation the event is poison for. */
  generation: string;
  /** The cutover or rollback (genfill.cutovers id); null for a catch-up round. */
  switchId: string | null;
  /** The event's key (the log's); the output key the apply named when the search found no event alone. */
  key: Record<string, unknown>;
  eventId: string | null;
  revision: string | null;
  /** What the transform did with it. */
  what: string;
}

/** What the apply reported, in words. */
export function poisonWhat(p: Poison): string {
  return p.what === 'fan-out'
    ? `the transform produced key ${JSON.stringify(p.key)} more than once (fan-out)`
    : `the transform changed the key: it produced ${JSON.stringify(p.key)}, which is not the event's key`;
}

/**
 * In the refused step's transaction, after the apply reported `poison` (it wrote nothing): the
 * event that fails alone. A search that fails itself (the freeze's statement timeout, say)
 * leaves the output key the apply named.
 */
export async function poisonStop(
  conn: Conn,
  ds: ProjectedDataset,
  poison: Poison,
  o: { kind: StopKind; release: string; switchId: string | null },
): Promise<SwitchStop> {
  const what = poisonWhat(poison);
  const found = await findPoison(conn, ds, what).catch(() => null);
  return {
    kind: o.kind,
    dataset: ds.name,
    release: o.release,
    generation: ds.generation,
    switchId: o.switchId,
    key: found?.key ?? poison.key,
    eventId: found?.eventId ?? null,
    revision: found?.revision ?? null,
    what: found?.error ?? what,
  };
}

/**
 * Record `stop` in a statement of its own (autocommit: call it after the refused transaction
 * rolled back). The same event refused again (a catch-up round each poll) is recorded once.
 * Returns null when recorded, or the error that kept it from being recorded.
 */
export async function recordStop(db: Pick<Db, 'query'>, stop: SwitchStop): Promise<Error | null> {
  try {
    await db.query(
      `INSERT INTO genfill.switch_stops (dataset, release, generation, kind, switch, key, event_id, revision, what)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING`,
      [stop.dataset, stop.release, stop.generation, stop.kind, stop.switchId, JSON.stringify(stop.key), stop.eventId, stop.revision, stop.what.slice(0, 2000)],
    );
    return null;
  } catch (err) {
    return err as Error;
  }
}

/** The refusal's advice once recordStop ran: the quarantine command for the key, or a transform fix alone. */
export function stopAdvice(stop: SwitchStop, recorded: Error | null, again: string): string {
  const key = JSON.stringify(stop.key);
  if (recorded) {
    return `recording the key in genfill.switch_stops failed (${recorded.message}), so it cannot be quarantined: fix the transform, then run ${again} again`;
  }
  return (
    `the key ${key}${stop.eventId ? ` (event ${stop.eventId}, revision ${stop.revision})` : ''} is recorded in genfill.switch_stops: ` +
    `quarantine it with \`genfill quarantine ${stop.dataset} --key '${key}' --reason …\` or fix the transform, then run ${again} again`
  );
}
