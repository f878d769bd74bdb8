// Pinned reads (SPEC invariant 12): a reader fixes the generation when its request starts —
// the active one, read once, or one named explicitly (a candidate is readable by name, never
// through the user's view) — and reads pages of that generation only: keyset-paginated by
// the dataset's key, tombstones left out, the data columns without the system columns. The
// page cursor carries the generation, so a later page reads the same one even after a
// cutover moved the pointer; a generation that is gone by then (RETIRED, ABANDONED, its table
// dropped) is a GenerationGoneError with the reason the registry records, never rows of
// another generation. Every page takes or extends the holder's reader lease in its own
// transaction, which is also the page's: a page refused for any reason writes nothing.
//
// `genfill read`, GET /datasets/:ds/rows and applications (openPinnedRead) use this.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { InvalidInputError, NotFoundError, PermissionDeniedError, pgErrorCode, RefusedError, UnknownDatasetError, type Problem } from '@genfill/contracts';
import {
  asPrincipal,
  type Conn,
  dataColumns,
  type Db,
  findDataset,
  parentExists,
  qualifiedParent,
  releaseReaderLease,
  takeReaderLease as takeLease,
  withTransaction,
} from '@genfill/registry';
import { type Cursor, decodeCursor, encodeCursor } from './cursor.ts';
import { col, type Column, keyText, keyValues, outputRow, Params, type Row } from './sql.ts';

export const READ_LIMITS = { default: 100, max: 10_000 } as const;

export interface ReadPage {
  dataset: string;
  generation: string;
  rows: Row[];
  /** The next page's cursor; null after the last row. */
  nextCursor: string | null;
  /** The reader lease this page took or extended. */
  lease: { holder: string; expiresAt: string };
}

export interface PinOptions {
  dataset: string;
  /** Read this generation (a candidate too, by name); default: the active one, read once now. */
  generation?: string | null;
  /** Names the reader lease; default: a fresh one per read (a cursor carries it to the next page). */
  holder?: string | null;
  /** How long the lease lasts past each page (default 5 minutes). */
  leaseTtlMs?: number;
  /**
   * The principal the lease records (the API's token subject). Honoured for logins in
   * genfill_api or genfill_service; for anyone else the login itself is recorded.
   */
  principal?: string | null;
}

export interface ReadRequest extends PinOptions {
  /** The previous page's nextCursor: it names the dataset, generation and holder. */
  cursor?: string | null;
  /** One row by its key: a JSON object of the key columns (text, so big integers stay exact). */
  key?: string | Record<string, unknown> | null;
  /** Rows per page: 1 to 10,000, default 100. */
  limit?: number | string | null;
}

/** A holder id for a new read: `<prefix>:<host>:<random>`. */
export function newHolder(prefix = 'read'): string {
  return `${prefix}:${hostname()}:${randomBytes(6).toString('base64url')}`.slice(0, 200);
}

export function parseLimit(limit: number | string | null | undefined): number {
  if (limit === undefined || limit === null || limit === '') return READ_LIMITS.default;
  const n = typeof limit === 'number' ? limit : /^\d+$/.test(limit.trim()) ? Number(limit.trim()) : NaN;
  if (!Number.isInteger(n) || n < 1 || n > READ_LIMITS.max) {
    throw new InvalidInputError([{ path: 'limit', message: `must be a whole number from 1 to ${READ_LIMITS.max}, not ${JSON.stringify(limit)}` }]);
  }
  return n;
}

/** A key as JSON text, checked to be one object of exactly the key columns with scalar values. */
function parseKey(given: string | Record<string, unknown>, key: readonly string[]): string {
  const example = `e.g. ${JSON.stringify(Object.fromEntries(key.map((k) => [k, 42])))}`;
  const problem = (message: string): never => {
    throw new InvalidInputError([{ path: 'key', message: `${message}: give a JSON object of the key columns (${key.join(', ')}), ${example}` }]);
  };
  let value: unknown = given;
  const text = typeof given === 'string' ? given : JSON.stringify(given);
  if (typeof given === 'string') {
    try {
      value = JSON.parse(given);
    } catch {
      problem('not JSON');
    }
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return problem('not a JSON object');
  const names = Object.keys(value as object);
  const missing = key.filter((k) => !names.includes(k));
  const extra = names.filter((n) => !key.includes(n));
  if (missing.length > 0 || extra.length > 0) {
    problem([missing.length ? `missing ${missing.join(', ')}` : '', extra.length ? `not key columns: ${extra.join(', ')}` : ''].filter(Boolean).join('; '));
  }
  for (const [k, v] of Object.entries(value as object)) {
    if (!['string', 'number', 'boolean'].includes(typeof v)) problem(`${k} is ${v === null ? 'null' : typeof v}, not a value`);
  }
  return text;
}

/** What a read needs to know of its dataset, asked once per pin. */
interface Shape {
  dataset: string;
  columns: Column[];
  key: Column[];
  active: string | null;
}

async function loadShape(conn: Conn, dataset: string): Promise<Shape> {
  const ds = await findDataset(conn, dataset);
  if (!ds) throw new UnknownDatasetError(dataset);
  if (!(await parentExists(conn, dataset))) {
    throw new RefusedError(`dataset ${dataset} has no generation yet: plan a release of it (genfill plan <release>) or adopt a table first`);
  }
  const columns = await dataColumns(conn, dataset);
  const key = ds.key_columns.map((k) => columns.find((c) => c.name === k) ?? { name: k, type: 'text' });
  return { dataset, columns, key, active: ds.active_generation };
}

function activeOf(shape: Shape): string {
  if (shape.active === null) {
    throw new RefusedError(`dataset ${shape.dataset} has no active generation yet: name a candidate with --generation (generation=) to read it`);
  }
  return shape.active;
}

/** The page's transaction, recording `principal` when given. */
function transaction<T>(db: Db, principal: string | null | undefined, fn: (conn: Conn) => Promise<T>): Promise<T> {
  return principal ? asPrincipal(db, principal, fn) : withTransaction(db, fn);
}

/** SQLSTATE class 22 (data exception): a key value that does not fit its column's type. */
function isDataException(err: unknown): boolean {
  return pgErrorCode(err)?.startsWith('22') === true;
}

/**
 * Take or extend the lease on the generation the reader named (or the active one): a
 * generation the registry does not know (NotFoundError) is the reader's bad input, named.
 */
async function takeReaderLease(conn: Conn, l: Parameters<typeof takeLease>[1]): Promise<Date> {
  try {
    return await takeLease(conn, l);
  } catch (err) {
    if (err instanceof NotFoundError) throw new InvalidInputError([{ path: 'generation', message: err.message }], { cause: err });
    throw err;
  }
}

/**
 * The page's lease. A cursor names the holder of the read it continues; when that lease is
 * another principal's (a cursor handed on — from a CLI user to an API viewer, say), it stays
 * theirs: a principal renews only its own lease (migration 0026, GFQ04). The read then goes on
 * under a lease of its own, and the next cursor names that one.
 */
async function cursorLease(conn: Conn, l: Parameters<typeof takeLease>[1], fromCursor: boolean): Promise<{ holder: string; expires: Date }> {
  if (!fromCursor) return { holder: l.holder, expires: await takeReaderLease(conn, l) };
  await conn.query('SAVEPOINT gf_cursor_lease');
  try {
    const expires = await takeReaderLease(conn, l);
    await conn.query('RELEASE SAVEPOINT gf_cursor_lease');
    return { holder: l.holder, expires };
  } catch (err) {
    if (!(err instanceof PermissionDeniedError)) throw err;
    await conn.query('ROLLBACK TO SAVEPOINT gf_cursor_lease');
    const holder = newHolder();
    return { holder, expires: await takeReaderLease(conn, { ...l, holder }) };
  }
}

interface Fetch {
  after?: Record<string, string>;
  /** A key as JSON text: one row. */
  key?: string;
  limit: number;
}

/**
 * One page of `generation` after `after` (or the row of `key`), in key order, tombstones left
 * out. Read through the parent with `generation = $g` — the privilege readers hold (an
 * adopted table carries no grants of its own) — which plan-time pruning turns into a scan of
 * that one partition, whose primary key index (generation, key…) delivers the rows in order
 * with the keyset condition as an index bound.
 */
async function fetchRows(conn: Conn, shape: Shape, generation: string, f: Fetch): Promise<{ rows: Row[]; last: Record<string, string> | null; more: boolean }> {
  const p = new Params();
  const keyCols = shape.key.map((k) => col('t', k.name));
  const where = [`t."generation" = ${p.add(generation)}`, `NOT t."_gf_deleted"`];
  if (f.after) where.push(`(${keyCols.join(', ')}) > (${keyValues(p, JSON.stringify(f.after), shape.key).join(', ')})`);
  if (f.key !== undefined) keyValues(p, f.key, shape.key).forEach((v, i) => where.push(`${keyCols[i]} = ${v}`));
  const text = `SELECT row_to_json(r) AS gf_row, row_to_json(k) AS gf_key
  FROM ${qualifiedParent(shape.dataset)} AS t
 CROSS JOIN LATERAL ${outputRow('t', shape.columns)} AS r
 CROSS JOIN LATERAL ${keyText('t', shape.key.map((k) => k.name))} AS k
 WHERE ${where.join('\n   AND ')}
 ORDER BY ${keyCols.join(', ')}
 LIMIT ${p.add(f.limit + 1)}`;
  try {
    const { rows } = await conn.query<{ gf_row: Row; gf_key: Record<string, string> }>(text, p.values);
    const page = rows.slice(0, f.limit);
    return { rows: page.map((r) => r.gf_row), last: page.at(-1)?.gf_key ?? null, more: rows.length > f.limit };
  } catch (err) {
    if (!isDataException(err)) throw err;
    const path = f.key !== undefined ? 'key' : 'cursor';
    throw new InvalidInputError([{ path, message: `a key value does not fit its column: ${(err as Error).message}` }], { cause: err });
  }
}

/** A cursor fits this read: same dataset, same generation when one is named, the dataset's key. */
function checkCursor(c: Cursor, dataset: string, generation: string | null | undefined, key: readonly Column[] | null): void {
  const problems: Problem[] = [];
  if (c.dataset !== dataset) problems.push({ path: 'cursor', message: `the cursor is of dataset ${c.dataset}, not ${dataset}` });
  if (generation && generation !== c.generation) {
    problems.push({ path: 'generation', message: `the cursor reads generation ${c.generation}, not ${generation}: drop one of them` });
  }
  if (key) {
    const names = key.map((k) => k.name);
    const got = Object.keys(c.after);
    if (got.length !== names.length || names.some((n) => !got.includes(n))) {
      problems.push({ path: 'cursor', message: `the cursor's key (${got.join(', ')}) is not the key of ${dataset} (${names.join(', ')})` });
    }
  }
  if (problems.length > 0) throw new InvalidInputError(problems);
}

function page(shape: Shape, generation: string, holder: string, expires: Date, got: Awaited<ReturnType<typeof fetchRows>>): ReadPage {
  return {
    dataset: shape.dataset,
    generation,
    rows: got.rows,
    nextCursor: got.more && got.last ? encodeCursor({ dataset: shape.dataset, generation, holder, after: got.last }) : null,
    lease: { holder, expiresAt: expires.toISOString() },
  };
}

/**
 * One request's page: the generation is the cursor's, else the one named, else the active
 * one read now; the lease is taken or extended in the page's transaction. Bad input (a bad
 * cursor, limit or key, an unknown dataset or generation) is an InvalidInputError before
 * anything is written.
 */
export async function readPage(db: Db, req: ReadRequest): Promise<ReadPage> {
  const limit = parseLimit(req.limit);
  const cursor = req.cursor ? decodeCursor(req.cursor) : null;
  const hasKey = req.key !== undefined && req.key !== null && req.key !== '';
  if (cursor && hasKey) throw new InvalidInputError([{ path: 'key', message: 'a key reads one row: give a key or a cursor, not both' }]);
  if (cursor) checkCursor(cursor, req.dataset, req.generation, null);
  const holder = req.holder || cursor?.holder || newHolder();
  return transaction(db, req.principal, async (conn) => {
    const shape = await loadShape(conn, req.dataset);
    if (cursor) checkCursor(cursor, req.dataset, req.generation, shape.key);
    const key = hasKey ? parseKey(req.key!, shape.key.map((k) => k.name)) : undefined;
    const generation = cursor?.generation ?? (req.generation || activeOf(shape));
    const lease = await cursorLease(conn, { dataset: req.dataset, generation, holder, ttlMs: req.leaseTtlMs }, !req.holder && !!cursor);
    const got = await fetchRows(conn, shape, generation, { after: cursor?.after, key, limit: key !== undefined ? 1 : limit });
    return page(shape, generation, lease.holder, lease.expires, key !== undefined ? { ...got, more: false } : got);
  });
}

/**
 * A read pinned to one generation for an application: `openPinnedRead` fixes the generation
 * (and takes the lease) now; every `page` reads that generation and extends the lease; `rows`
 * walks the whole generation; `close` lets the lease go.
 */
export class PinnedRead {
  private constructor(
    private readonly db: Db,
    private readonly shape: Shape,
    readonly generation: string,
    readonly holder: string,
    private readonly opts: PinOptions,
  ) {}

  get dataset(): string {
    return this.shape.dataset;
  }

  static async open(db: Db, o: PinOptions): Promise<PinnedRead> {
    const holder = o.holder || newHolder();
    return transaction(db, o.principal, async (conn) => {
      const shape = await loadShape(conn, o.dataset);
      const generation = o.generation || activeOf(shape);
      await takeReaderLease(conn, { dataset: o.dataset, generation, holder, ttlMs: o.leaseTtlMs });
      return new PinnedRead(db, shape, generation, holder, o);
    });
  }

  /** The page after `cursor` (a nextCursor of this read), or the first page. */
  async page(o: { cursor?: string | null; limit?: number } = {}): Promise<ReadPage> {
    const limit = parseLimit(o.limit);
    const cursor = o.cursor ? decodeCursor(o.cursor) : null;
    if (cursor) checkCursor(cursor, this.dataset, this.generation, this.shape.key);
    return this.transaction(async (conn) => {
      const expires = await this.lease(conn);
      return page(this.shape, this.generation, this.holder, expires, await fetchRows(conn, this.shape, this.generation, { after: cursor?.after, limit }));
    });
  }

  /** The row of `key` in the pinned generation, or null. */
  async get(key: string | Record<string, unknown>): Promise<Row | null> {
    const json = parseKey(key, this.shape.key.map((k) => k.name));
    return this.transaction(async (conn) => {
      await this.lease(conn);
      return (await fetchRows(conn, this.shape, this.generation, { key: json, limit: 1 })).rows[0] ?? null;
    });
  }

  /** Every live row of the pinned generation in key order, a page at a time. */
  async *rows(pageSize: number = READ_LIMITS.default): AsyncGenerator<Row> {
    let cursor: string | null = null;
    do {
      const p: ReadPage = await this.page({ cursor, limit: pageSize });
      yield* p.rows;
      cursor = p.nextCursor;
    } while (cursor);
  }

  /** Let the lease go now rather than at its expiry. */
  async close(): Promise<boolean> {
    return this.transaction((conn) => releaseReaderLease(conn, { dataset: this.dataset, generation: this.generation, holder: this.holder }));
  }

  private transaction<T>(fn: (conn: Conn) => Promise<T>): Promise<T> {
    return transaction(this.db, this.opts.principal, fn);
  }

  private lease(conn: Conn): Promise<Date> {
    return takeReaderLease(conn, { dataset: this.dataset, generation: this.generation, holder: this.holder, ttlMs: this.opts.leaseTtlMs });
  }
}

export const openPinnedRead = (db: Db, o: PinOptions): Promise<PinnedRead> => PinnedRead.open(db, o);
