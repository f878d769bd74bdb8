// Ingress events at the edge: NDJSON, one `{key, revision, op, row}` object per line, parsed
// once with zod against the mirror's shape (SPEC "Ingress"). Lines are split from the byte
// stream here rather than by readline so that one line can be bounded (a 2 GB line must not be
// buffered whole) and the stream is pulled only as fast as the database takes the events:
// memory stays flat in the size of the file.
//
// A line that passes is kept as its raw text: the database parses it again (jsonb), so numbers
// keep every digit (JavaScript would round 12345678901234567890) and what is applied is what
// the source sent, typed by the mirror's columns. Type errors the columns find (a date that is
// not one) come back from genfill.ingest_apply with their line numbers.
import { isUtf8 } from 'node:buffer';
import { z } from 'zod';

/** A line longer than this is malformed (and is not buffered past this). */
export const INGRESS_MAX_LINE_BYTES = 8 * 1024 * 1024;

const MAX_BIGINT = 9223372036854775807n;

const revision = z.union([
  z
    .number()
    .int('must be an integer')
    .positive('must be > 0')
    .refine(Number.isSafeInteger, 'is beyond 2^53: send it as a string of digits ("9007199254740993")'),
  z
    .string()
    .regex(/^[1-9][0-9]{0,18}$/, 'must be an integer > 0 (a number, or a string of digits)')
    .refine((v) => BigInt(v) <= MAX_BIGINT, 'must fit a bigint'),
]);

/**
 * One event as the source sends it. `row` is the full row (every column); a delete may omit it.
 * `key` and `row` are objects of any keys (the mirror's columns are checked after the parse):
 * `z.object({}).catchall(…)` rather than `z.record(z.string(), …)`, which accepts the same
 * objects at half the cost per line (bench/capture.ts streams a million lines through this).
 */
export const ingressEventSchema = z.strictObject({
  key: z.object({}).catchall(z.union([z.string(), z.number(), z.boolean()], 'a key value is a string, number or boolean, never null')),
  revision,
  op: z.enum(['upsert', 'delete']),
  row: z.object({}).catchall(z.unknown()).nullable().optional(),
});
export type IngressEvent = z.infer<typeof ingressEventSchema>;

/** What a line is checked against: the mirror's columns and key. */
export interface MirrorShape {
  columns: readonly string[];
  key: readonly string[];
}

export type ParsedLine = { ok: true; text: string } | { ok: false; message: string };

function hasNul(v: unknown): boolean {
  if (typeof v === 'string') return v.includes('\0');
  if (Array.isArray(v)) return v.some(hasNul);
  if (v !== null && typeof v === 'object') return Object.entries(v).some(([k, x]) => k.includes('\0') || hasNul(x));
  return false;
}

const sameKeys = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((k) => b.includes(k));

/** Check one line of text; on success the trimmed text itself travels on. */
export function parseEventLine(text: string, shape: MirrorShape): ParsedLine {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { ok: false, message: `not JSON: ${(err as Error).message}` };
  }
  const parsed = ingressEventSchema.safeParse(value);
  if (!parsed.success) {
    return { ok: false, message: parsed.error.issues.map((i) => `${i.path.length ? `${i.path.join('.')}: ` : ''}${i.message}`).join('; ') };
  }
  const e = parsed.data;
  const keyNames = Object.keys(e.key);
  if (!sameKeys(keyNames, shape.key)) {
    return { ok: false, message: `key must name exactly the key columns (${shape.key.join(', ')}), not (${keyNames.join(', ')})` };
  }
  if (e.op === 'upsert' && (e.row === undefined || e.row === null)) {
    return { ok: false, message: 'an upsert carries row: the full row as an object' };
  }
  if (e.row) {
    const unknown = Object.keys(e.row).filter((c) => !shape.columns.includes(c));
    if (unknown.length > 0) return { ok: false, message: `row has columns the mirror does not: ${unknown.join(', ')}` };
    if (e.op === 'upsert') {
      const missing = shape.columns.filter((c) => !Object.hasOwn(e.row!, c));
      if (missing.length > 0) return { ok: false, message: `row lacks columns: ${missing.join(', ')} (send the full row; null is a value)` };
      const differs = shape.key.filter((k) => !Object.is(e.row![k], e.key[k]));
      if (differs.length > 0) return { ok: false, message: `row.${differs[0]} differs from key.${differs[0]}: an upsert's row carries its own key` };
    }
  }
  // PostgreSQL's jsonb cannot hold U+0000 (checked only when the text can contain one).
  if (text.includes('\\u0000') && hasNul(value)) return { ok: false, message: 'contains \\u0000, which PostgreSQL text cannot hold' };
  return { ok: true, text };
}

/** A line of the input: its 1-based number and text, or null text when it was too long or not UTF-8. */
export interface RawLine {
  n: number;
  text: string | null;
  problem?: string;
}

/**
 * Split a byte stream into lines (LF or CRLF), in arrays of the lines each chunk completed.
 * Blank lines are skipped (they keep their number). Pulls the next chunk only when asked.
 */
export async function* ndjsonLines(input: AsyncIterable<Buffer | string>, maxLineBytes = INGRESS_MAX_LINE_BYTES): AsyncGenerator<RawLine[]> {
  let n = 0;
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let tooLong = false;

  const finish = (piece: Buffer, out: RawLine[]) => {
    n++;
    if (tooLong) {
      out.push({ n, text: null, problem: `longer than ${maxLineBytes} bytes` });
      tooLong = false;
      return;
    }
    let bytes = pending.length > 0 ? Buffer.concat([...pending, piece]) : piece;
    pending = [];
    pendingBytes = 0;
    if (bytes.length > 0 && bytes[bytes.length - 1] === 13) bytes = bytes.subarray(0, bytes.length - 1);
    if (bytes.length > maxLineBytes) return void out.push({ n, text: null, problem: `longer than ${maxLineBytes} bytes` });
    if (!isUtf8(bytes)) return void out.push({ n, text: null, problem: 'not valid UTF-8' });
    const text = bytes.toString('utf8');
    if (text.trim().length === 0) return;
    out.push({ n, text });
  };

  for await (const c of input) {
    const chunk = typeof c === 'string' ? Buffer.from(c, 'utf8') : c;
    const out: RawLine[] = [];
    let start = 0;
    for (let i = chunk.indexOf(10, start); i !== -1; i = chunk.indexOf(10, start)) {
      finish(chunk.subarray(start, i), out);
      start = i + 1;
    }
    if (start < chunk.length && !tooLong) {
      pending.push(chunk.subarray(start));
      pendingBytes += chunk.length - start;
      if (pendingBytes > maxLineBytes) {
        tooLong = true;
        pending = [];
        pendingBytes = 0;
      }
    }
    if (out.length > 0) yield out;
  }
  if (pendingBytes > 0 || tooLong) {
    const out: RawLine[] = [];
    finish(Buffer.alloc(0), out);
    if (out.length > 0) yield out;
  }
}
