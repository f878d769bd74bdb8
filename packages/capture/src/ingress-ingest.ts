// `genfill ingest <dataset> <file.ndjson>` and `POST /datasets/:ds/events`: apply a source's
// events to its ingress mirror (SPEC "Ingress", invariant 5; seed 003's drill).
//
// How a plain operator streams a million lines under the privilege model: the lines are
// checked here as they arrive (zod, the mirror's shape) and COPYed, raw, into a temporary table
// of the caller's own session, `ingress_events (line, event jsonb)` (a person may create those;
// nothing else of genfill is writable to them); then ONE verb, genfill.ingest_apply (SECURITY
// DEFINER, migrations 0011 and 0012), reads that table and applies it in the same transaction:
// checks and types every event, locks the keys in key order, compares revisions, writes the
// winners to the mirror and the change log. So the file is never held in memory, and a
// malformed line — any line — rolls the transaction back before the verb runs: the temporary
// table vanishes with it and nothing is written.
//
// COPY FROM STDIN (pg-copy-streams) rather than batched INSERTs: the server parses each line
// once, into jsonb, while this process validates the next ones, and the socket's back-pressure
// keeps the memory flat. Row i of the COPY is line i of the file (a blank line is a NULL
// event), so a line the server refuses while it is copied is reported by its number too.
//
// A file refused for a conflict is recorded by the verb itself (migration 0026): nothing of it
// is applied, the conflicts go to genfill.ingress_conflicts and the open releases to
// RECONCILIATION_REQUIRED in the same transaction, and the verb returns them; this side commits
// and raises IngressConflictError. (Before 0026 this side recorded them in a second transaction
// through genfill.ingress_record_conflict, which any operator could call with forged JSON.)
// Tombstone compaction runs after the commit, in its own short transaction, and is skipped
// while another ingest of the mirror runs.
//
// The bounds are the owner's (genfill.settings): the pending bound is read here only to refuse
// an oversized file before sending all of it; the verb applies it regardless.
import { once } from 'node:events';
import { finished } from 'node:stream/promises';
import { from as copyFrom } from 'pg-copy-streams';
import {
  DEFAULT_RETRY_AFTER_SECONDS,
  errorFromPg,
  type IngressConflict,
  IngressConflictError,
  InvalidInputError,
  isPgError,
  type Problem,
} from '@genfill/contracts';
import { asPrincipal, type Conn, type Db } from '@genfill/registry';
import { ingressMirrorOf, type IngressMirror } from './ingress.ts';
import { ndjsonLines, parseEventLine } from './ingress-events.ts';

/** COPY text (characters) handed to the connection at a time, one CopyData message. */
const COPY_CHUNK_CHARS = 256 * 1024;
/** Bad lines listed one by one; past this the answer counts the rest. */
const MAX_LISTED_PROBLEMS = 1_000;
/** What a busy answer asks the caller to wait (HTTP Retry-After). */
export const INGRESS_RETRY_AFTER_SECONDS = DEFAULT_RETRY_AFTER_SECONDS;

export interface IngestOptions {
  /** The API's token subject; the CLI's principal is its login (session_user). */
  principal?: string | null;
}

export interface IngestResult {
  dataset: string;
  /** The mirror (genfill.captures.source_table). */
  sourceTable: string;
  /** Events in the file (non-blank lines). */
  events: number;
  /** Winners: applied to the mirror and written to the change log, one per key. */
  applied: number;
  upserts: number;
  deletes: number;
  /** Stale or repeated (and lines superseded by a later revision in the same file): no-ops, not logged. */
  stale: number;
  /** At or below the compaction watermark for a key genfill holds nothing for: not applied. */
  refused: number;
  /** The first refused keys. */
  refusedKeys: Record<string, unknown>[];
  /** Tombstones compacted after the commit; null when skipped (another ingest ran) or failed. */
  compactedTombstones: number | null;
}

interface ApplyRow {
  events: string;
  applied: string;
  upserts: string;
  deletes: string;
  stale: string;
  refused: string;
  refused_keys: Record<string, unknown>[];
  source_table: string;
  /** The conflicts the verb found and recorded (nothing applied), else null. */
  conflicts: IngressConflict[] | null;
  conflict_ids: string[] | null;
  conflict_releases: string[] | null;
}

/**
 * The owner's pending bound (the setting ingest.max_pending_events): the most events one file
 * may hold, and pending plus one file may reach. genfill.ingest_apply applies it whatever the
 * caller read; the API and this module read it to refuse early.
 */
export async function maxPendingEvents(conn: Conn | Db): Promise<number> {
  const { rows } = await conn.query<{ v: string }>(`SELECT genfill.setting('ingest.max_pending_events') AS v`);
  return Number(rows[0]!.v);
}


/**
 * A line as a field of COPY's text format. A line holds no LF, and JSON allows no other control
 * character outside its strings than tab and CR (as whitespace), so those and the backslash are
 * all COPY needs escaped.
 */
function copyField(text: string): string {
  return /[\\\t\r]/.test(text) ? text.replace(/[\\\t\r]/g, (c) => (c === '\\' ? '\\\\' : c === '\t' ? '\\t' : '\\r')) : text;
}

/**
 * A value the server refused while it was copied (jsonb input), named by its line: the line is
 * the row of the COPY, which the server gives only in the error's context (`where`).
 */
function copyError(err: unknown): unknown {
  if (!isPgError(err) || !err.code.startsWith('22')) return err;
  const row = /COPY ingress_events, line (\d+)/.exec(err.where ?? '');
  if (!row) return err;
  return new InvalidInputError([{ path: `line ${row[1]}`, message: err.detail ? `${err.message} (${err.detail})` : err.message }], { cause: err });
}

/** Stage the stream's events in pg_temp.ingress_events; returns the count, or throws InvalidInputError. */
async function stage(conn: Conn, mirror: IngressMirror, input: AsyncIterable<Buffer | string>, maxPending: number): Promise<number> {
  // Temporary tables past temp_buffers (8 MB by default) go to disk; the apply's working tables
  // of a large file are hundreds of MB. A session may raise it only before it first touches a
  // temporary table (a pooled connection that already did keeps its value). Memory is taken
  // as used, not up front.
  await conn.query('SAVEPOINT gf_temp_buffers');
  await conn.query(`SET temp_buffers = '256MB'`).then(
    () => conn.query('RELEASE SAVEPOINT gf_temp_buffers'),
    () => conn.query('ROLLBACK TO SAVEPOINT gf_temp_buffers'),
  );
  await conn.query('CREATE TEMPORARY TABLE ingress_events (line integer, event jsonb) ON COMMIT DROP');
  // The verb runs as genfill_owner: it reads this session's table, nothing else may.
  await conn.query('GRANT SELECT ON pg_temp.ingress_events TO genfill_owner');

  const copy = conn.query(copyFrom('COPY pg_temp.ingress_events (line, event) FROM STDIN'));
  let failed: unknown = null;
  copy.on('error', (err: unknown) => void (failed ??= err));
  let copying = true;
  /** Lines sent: rows 1..sent of the COPY are lines 1..sent of the file. */
  let sent = 0;
  let text = '';
  // One chunk in flight at a time: a write past the stream's buffer is waited for (drain), so
  // nothing is queued behind an error and memory does not grow with the file.
  const send = async () => {
    if (failed) throw copyError(failed);
    if (text.length === 0) return;
    const chunk = text;
    text = '';
    if (!copy.write(chunk)) await once(copy, 'drain');
  };
  const endCopy = async () => {
    if (!copying) return;
    copying = false;
    if (failed) throw copyError(failed);
    copy.end();
    await finished(copy);
  };

  const problems: Problem[] = [];
  let bad = 0;
  let events = 0;
  try {
    for await (const chunk of ndjsonLines(input)) {
      for (const raw of chunk) {
        events++;
        const parsed = raw.text === null ? { ok: false as const, message: raw.problem ?? 'unreadable' } : parseEventLine(raw.text, mirror);
        if (!parsed.ok) {
          bad++;
          if (problems.length < MAX_LISTED_PROBLEMS) problems.push({ path: `line ${raw.n}`, message: parsed.message });
          continue;
        }
        // Once anything is wrong the file is refused: stop sending, keep reading for every bad line.
        if (bad > 0 || events > maxPending) continue;
        for (let blank = sent + 1; blank < raw.n; blank++) {
          text += `${blank}\t\\N\n`;
          if (text.length >= COPY_CHUNK_CHARS) await send();
        }
        text += `${raw.n}\t${copyField(parsed.text)}\n`;
        sent = raw.n;
        if (text.length >= COPY_CHUNK_CHARS) await send();
      }
      if (copying && (bad > 0 || events > maxPending)) await endCopy().catch(() => undefined);
    }
    if (bad > MAX_LISTED_PROBLEMS) problems.push({ path: '', message: `and ${bad - MAX_LISTED_PROBLEMS} more malformed lines` });
    if (events > maxPending) {
      problems.push({
        path: '',
        message: `${events} events in one file, more than GENFILL_MAX_PENDING_EVENTS (${maxPending}): split the file (busy is for the dataset, this is the file)`,
      });
    }
    if (problems.length > 0) {
      await endCopy().catch(() => undefined);
      throw new InvalidInputError(problems);
    }
    await send();
    await endCopy();
  } catch (err) {
    // The connection must leave COPY before the rollback: CopyFail ends it (a COPY the server
    // ended with an error has left it already).
    if (copying && !failed) {
      copying = false;
      copy.destroy(err instanceof Error ? err : new Error(String(err)));
      await finished(copy).catch(() => undefined);
    }
    throw copyError(err);
  }
  return events;
}

/**
 * Apply an NDJSON stream of `{key, revision, op, row}` events to the dataset's ingress mirror.
 * Throws InvalidInputError (nothing written) for malformed lines or a file over the bound,
 * IngressBusyError at the pending bound, IngressConflictError for an equal revision with
 * another payload (nothing applied; recorded), RefusedError when the source is not a mirror.
 */
export async function ingest(db: Db, dataset: string, input: AsyncIterable<Buffer | string>, opts: IngestOptions = {}): Promise<IngestResult> {
  const mirror = await ingressMirrorOf(db, dataset);
  const maxPending = await maxPendingEvents(db);
  const applied = await asPrincipal(db, opts.principal, async (conn) => {
    await stage(conn, mirror, input, maxPending);
    try {
      const { rows } = await conn.query<ApplyRow>('SELECT * FROM genfill.ingest_apply($1)', [dataset]);
      return rows[0]!;
    } catch (err) {
      // GFI01 bad events, GFB01 busy.
      throw errorFromPg(err, { dataset, retryAfterSeconds: INGRESS_RETRY_AFTER_SECONDS });
    }
  });
  // Committed: the conflicts and the releases they blocked (nothing of the file applied).
  if (applied.conflicts !== null) {
    throw new IngressConflictError(dataset, applied.conflicts, (applied.conflict_ids ?? []).map(String), applied.conflict_releases ?? []);
  }

  // Housekeeping after the commit: a failure leaves the events committed; the next ingest compacts.
  const compacted = await asPrincipal(db, opts.principal, async (conn) => {
    const { rows } = await conn.query<{ n: string | null }>('SELECT genfill.ingress_compact_tombstones($1) AS n', [dataset]);
    return rows[0]!.n === null ? null : Number(rows[0]!.n);
  }).catch(() => null);

  return {
    dataset,
    sourceTable: applied.source_table,
    events: Number(applied.events),
    applied: Number(applied.applied),
    upserts: Number(applied.upserts),
    deletes: Number(applied.deletes),
    stale: Number(applied.stale),
    refused: Number(applied.refused),
    refusedKeys: applied.refused_keys,
    compactedTombstones: compacted,
  };
}
