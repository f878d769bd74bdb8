// Reader leases (migration 0016, SPEC invariant 12): every page of a pinned read takes or
// extends its holder's lease on the generation it reads, through genfill.reader_lease — the
// only writer of genfill.reader_leases. Here are its callers, the one reading of the table
// (`genfill status --dataset`, retention).
import { errorFromPg } from '@genfill/contracts';
import type { Conn, Db } from './db.ts';

/** Five minutes past each page, unless GENFILL_READER_LEASE_TTL says otherwise. */
export const DEFAULT_READER_LEASE_MS = 300_000;

/**
 * What genfill.reader_lease raised, as a named error (contracts' table): GFG01 a gone
 * generation (GenerationGoneError with the registry's reason), GFN01 an unknown dataset or
 * generation (NotFoundError), 22023 a bad holder or TTL (InvalidInputError at `lease`).
 */
export function readerLeaseError(err: unknown, dataset: string, generation: string): unknown {
  return errorFromPg(err, { dataset, generation, input: 'lease' });
}

/** Take or extend `holder`'s lease on a readable generation; returns the new expiry. */
export async function takeReaderLease(
  conn: Conn | Db,
  l: { dataset: string; generation: string; holder: string; ttlMs?: number },
): Promise<Date> {
  try {
    const { rows } = await conn.query<{ expires: Date }>('SELECT genfill.reader_lease($1, $2, $3, $4) AS expires', [
      l.dataset,
      l.generation,
      l.holder,
      Math.round(l.ttlMs ?? DEFAULT_READER_LEASE_MS),
    ]);
    return rows[0]!.expires;
  } catch (err) {
    throw readerLeaseError(err, l.dataset, l.generation);
  }
}

/** Let a lease go (only the principal that holds it can); false when there was none. */
export async function releaseReaderLease(conn: Conn | Db, l: { dataset: string; generation: string; holder: string }): Promise<boolean> {
  const { rows } = await conn.query<{ released: boolean }>('SELECT genfill.reader_lease_release($1, $2, $3) AS released', [
    l.dataset,
    l.generation,
    l.holder,
  ]);
  return rows[0]!.released;
}

export interface ReaderLease {
  generation: string;
  holder: string;
  principal: string;
  takenAt: string;
  expiresAt: string;
}

/** The dataset's live reader leases (not yet expired), longest first. */
export async function readerLeases(conn: Conn | Db, dataset: string): Promise<ReaderLease[]> {
  const { rows } = await conn.query<ReaderLease>(
    `SELECT generation, holder, principal, to_json(taken_at) #>> '{}' AS "takenAt", to_json(expires_at) #>> '{}' AS "expiresAt"
       FROM genfill.reader_leases
      WHERE dataset = $1 AND expires_at > clock_timestamp()
      ORDER BY expires_at DESC, generation, holder`,
    [dataset],
  );
  return rows;
}

/** Why a generation can no longer be read (genfill.generation_gone), or null while it can or is unknown. */
export async function generationGoneReason(conn: Conn | Db, dataset: string, generation: string): Promise<string | null> {
  const { rows } = await conn.query<{ reason: string | null }>('SELECT genfill.generation_gone($1, $2) AS reason', [dataset, generation]);
  return rows[0]!.reason;
}
