// The page cursor of a pinned read: opaque to callers, base64url of a small versioned JSON
// object. It carries the generation (so a later page reads the same one, whatever the active
// pointer says by then), the last key read (keyset pagination: each key value as PostgreSQL's
// text form of it, so bigint, numeric and timestamps round-trip exactly), and the lease holder
// (so every page of one scan extends one lease instead of leaving one per page behind).
import { z } from 'zod';
import { InvalidInputError } from '@genfill/contracts';

const CURSOR_VERSION = 1;
/** Far more than any key needs; a cursor is a query parameter. */
const MAX_CURSOR_CHARS = 8192;

const cursorSchema = z.strictObject({
  v: z.literal(CURSOR_VERSION),
  /** dataset */
  d: z.string().min(1),
  /** generation */
  g: z.string().min(1),
  /** lease holder */
  h: z.string().min(1).max(200),
  /** the last key returned: key column → its text form */
  k: z.record(z.string(), z.string()),
});

export interface Cursor {
  dataset: string;
  generation: string;
  holder: string;
  /** The last key read, each value in PostgreSQL's text form. */
  after: Record<string, string>;
}

export function encodeCursor(c: Cursor): string {
  const body = { v: CURSOR_VERSION, d: c.dataset, g: c.generation, h: c.holder, k: c.after };
  return Buffer.from(JSON.stringify(body), 'utf8').toString('base64url');
}

const bad = (message: string) => new InvalidInputError([{ path: 'cursor', message }]);

/** A cursor as `encodeCursor` made it; anything else is bad input naming what is wrong. */
export function decodeCursor(text: string): Cursor {
  if (text.length === 0 || text.length > MAX_CURSOR_CHARS || !/^[A-Za-z0-9_-]+$/.test(text)) {
    throw bad('not a cursor of genfill read: pass the nextCursor of the previous page unchanged');
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'));
  } catch {
    throw bad('not a cursor of genfill read: pass the nextCursor of the previous page unchanged');
  }
  const r = cursorSchema.safeParse(parsed);
  if (!r.success) {
    const version = (parsed as { v?: unknown } | null)?.v;
    throw bad(
      version !== undefined && version !== CURSOR_VERSION
        ? `cursor version ${JSON.stringify(version)} is not one this genfill reads (${CURSOR_VERSION}): start the read again without a cursor`
        : 'not a cursor of genfill read: pass the nextCursor of the previous page unchanged',
    );
  }
  return { dataset: r.data.d, generation: r.data.g, holder: r.data.h, after: r.data.k };
}
