// Numbered, add-only migrations applied in one transaction under an advisory lock; the ledger
// row goes in first so a second runner that somehow got past the lock clashes on the key
// (graphile-worker's migrate.ts does the same). A database newer than this code is refused.
// Then, in the same transaction, every SQL function file (sql/functions/*.sql: one current
// definition per function, idempotent) is applied and its sha256 recorded; the other commands
// refuse a database whose recorded files are not this code's (sql/README.md). Last, the
// request kinds: genfill.request_kinds is made equal to the code's registry (contracts'
// REQUEST_KINDS), each kind with its arguments' JSON Schema, and the other commands refuse a
// database whose kinds differ. And the owner's settings (genfill.settings, migration 0026):
// each one the caller passes (`genfill migrate` passes the GENFILL_* variables that are set)
// is written there; the verbs read only the settings.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type Config, REQUEST_KIND_NAMES, requestArgsSchema, SchemaVersionError, serviceOf } from '@genfill/contracts';
import { withTransaction, type Conn, type Db } from './db.ts';

const MIGRATIONS_DIR = fileURLToPath(new URL('../migrations/', import.meta.url));
const FUNCTIONS_DIR = fileURLToPath(new URL('../sql/functions/', import.meta.url));
// Any fixed 64-bit key works; this one is 'genfill' in ASCII. The one advisory lock genfill
// still takes (every other lock it waits on is a LOCK TABLE in schema genfill_lock, which no
// other login can take: sql/functions/take_lock.sql): only an owner or a superuser migrates,
// the lock must exist before the schema does, and a login holding this key delays nothing but
// a migration — the fleet never waits on it.
const MIGRATE_LOCK = '29103447440190572';

export interface Migration {
  version: number;
  name: string;
  sql: string;
  sha256: string;
}

export function knownMigrations(): Migration[] {
  return readdirSync(MIGRATIONS_DIR)
    .filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((f, i) => {
      const version = Number(f.slice(0, 4));
      if (version !== i + 1) throw new Error(`migration ${f} is out of sequence: expected ${String(i + 1).padStart(4, '0')}`);
      const sql = readFileSync(MIGRATIONS_DIR + f, 'utf8');
      return { version, name: f.replace(/\.sql$/, ''), sql, sha256: createHash('sha256').update(sql).digest('hex') };
    });
}

export const LATEST_VERSION = knownMigrations().length;

export interface FunctionFile {
  /** The file's name, e.g. `request.sql`. */
  name: string;
  sql: string;
  sha256: string;
}

let functionFiles: FunctionFile[] | undefined;

/** The function files of this code, in the order migrate applies them (byte order of their names). */
export function knownFunctionFiles(): FunctionFile[] {
  functionFiles ??= readdirSync(FUNCTIONS_DIR)
    .filter((f) => f.endsWith('.sql'))
    .sort()
    .map((f) => {
      if (!/^[a-z0-9_]+\.sql$/.test(f)) throw new Error(`function file ${f}: a name is lower-case letters, digits and _ (the function's or its area's)`);
      const sql = readFileSync(FUNCTIONS_DIR + f, 'utf8');
      return { name: f, sql, sha256: createHash('sha256').update(sql).digest('hex') };
    });
  return functionFiles;
}

interface Applied {
  version: number;
  name: string;
  sha256: string;
}

async function appliedMigrations(conn: Conn): Promise<Applied[] | null> {
  const exists = await conn.query(`SELECT to_regclass('genfill.migrations') IS NOT NULL AS ok`);
  if (!exists.rows[0].ok) return null;
  const { rows } = await conn.query<Applied>('SELECT version, name, sha256 FROM genfill.migrations ORDER BY version');
  return rows;
}

function refuseNewer(applied: Applied[]): void {
  const newest = applied.at(-1)?.version ?? 0;
  if (newest > LATEST_VERSION) {
    throw new SchemaVersionError(
      `the database schema is at version ${newest}, newer than this genfill knows (${LATEST_VERSION}): upgrade genfill before running it against this database`,
    );
  }
}

export interface MigrateResult {
  /** Numbered migrations applied by this run. */
  applied: string[];
  version: number;
  /** Function files whose content this run applied for the first time. */
  functions: string[];
  /** How this run changed genfill.request_kinds to match the code's kinds (`+kind`, `-kind`, `~kind`). */
  requestKinds: string[];
  /** The owner's settings this run changed (`name=value`). */
  settings: string[];
}

/**
 * Values for the owner's settings (genfill.settings), by setting name; a setting not given is
 * left as it is. Only the owner writes them, so only `genfill migrate` (run as the owner) does.
 */
export type OwnerSettings = Partial<Record<'ingest.max_pending_events' | 'ingress.tombstone_retention' | 'reader_lease.max_lifetime' | 'request.max_open_per_principal', string>>;

/** The settings the GENFILL_* variables that are set ask for. */
export function ownerSettingsFromConfig(config: Pick<Config, 'GENFILL_MAX_PENDING_EVENTS' | 'GENFILL_TOMBSTONE_RETENTION' | 'GENFILL_READER_LEASE_MAX_LIFETIME' | 'GENFILL_MAX_OPEN_REQUESTS'>): OwnerSettings {
  const out: OwnerSettings = {};
  if (config.GENFILL_MAX_PENDING_EVENTS !== undefined) out['ingest.max_pending_events'] = String(config.GENFILL_MAX_PENDING_EVENTS);
  if (config.GENFILL_TOMBSTONE_RETENTION !== undefined) out['ingress.tombstone_retention'] = `${config.GENFILL_TOMBSTONE_RETENTION} seconds`;
  if (config.GENFILL_READER_LEASE_MAX_LIFETIME !== undefined) out['reader_lease.max_lifetime'] = `${config.GENFILL_READER_LEASE_MAX_LIFETIME} seconds`;
  if (config.GENFILL_MAX_OPEN_REQUESTS !== undefined) out['request.max_open_per_principal'] = String(config.GENFILL_MAX_OPEN_REQUESTS);
  return out;
}

/**
 * Write the given settings, only where they differ (compared as their type: '7 days' and
 * '604800 seconds' are one retention). A name the table lacks is a schema this code does not
 * know: refused. The settings trigger checks each value.
 */
async function writeSettings(conn: Conn, settings: OwnerSettings): Promise<string[]> {
  const entries = Object.entries(settings).filter((e): e is [string, string] => e[1] !== undefined);
  if (entries.length === 0) return [];
  const { rows } = await conn.query<{ name: string; value: string }>(
    `WITH want AS (SELECT * FROM unnest($1::text[], $2::text[]) AS w(name, value))
     UPDATE genfill.settings s SET value = want.value FROM want
      WHERE s.name = want.name
        AND CASE s.type WHEN 'bigint' THEN s.value::bigint IS DISTINCT FROM want.value::bigint
                        ELSE s.value::interval IS DISTINCT FROM want.value::interval END
     RETURNING s.name, s.value`,
    [entries.map((e) => e[0]), entries.map((e) => e[1])],
  );
  const { rows: known } = await conn.query<{ name: string }>('SELECT name FROM genfill.settings WHERE name = ANY($1::text[])', [entries.map((e) => e[0])]);
  const unknown = entries.map((e) => e[0]).filter((n) => !known.some((k) => k.name === n));
  if (unknown.length > 0) throw new SchemaVersionError(`genfill.settings has no ${unknown.join(', ')}: this database's schema is not this genfill's`);
  return rows.map((r) => `${r.name}=${r.value}`).sort();
}

interface RecordedFile {
  name: string;
  sha256: string;
}

async function recordedFunctionFiles(conn: Conn): Promise<RecordedFile[] | null> {
  const exists = await conn.query(`SELECT to_regclass('genfill.function_files') IS NOT NULL AS ok`);
  if (!exists.rows[0].ok) return null;
  const { rows } = await conn.query<RecordedFile>('SELECT name, sha256 FROM genfill.function_files ORDER BY name');
  return rows;
}

/**
 * The function files, in order, then the record of what was applied. Each file re-creates its
 * functions (CREATE OR REPLACE) with their grants, triggers and comments. A run applies every
 * file when it applied a numbered migration (which may have dropped and re-created what a
 * file's trigger hangs on), and otherwise only the files whose content the database has not
 * recorded: a migrate that changes nothing takes no lock on a registry table and re-creates no
 * event trigger. Function bodies are not checked at CREATE time (check_function_bodies, as
 * pg_dump does): a LANGUAGE sql body may then use a function of a file that sorts after its own.
 */
async function applyFunctionFiles(conn: Conn, all: boolean): Promise<string[]> {
  const files = knownFunctionFiles();
  const recorded = new Map(((await recordedFunctionFiles(conn)) ?? []).map((f) => [f.name, f.sha256]));
  const due = all ? files : files.filter((f) => recorded.get(f.name) !== f.sha256);
  await conn.query('SET LOCAL check_function_bodies = off');
  for (const f of due) {
    try {
      await conn.query(f.sql);
    } catch (err) {
      throw new Error(`function file ${f.name} failed, nothing was applied: ${(err as Error).message}`, { cause: err });
    }
  }
  const { rows } = await conn.query<{ name: string }>(
    `WITH code AS (SELECT * FROM unnest($1::text[], $2::text[]) AS c(name, sha256)),
          gone AS (DELETE FROM genfill.function_files f WHERE NOT EXISTS (SELECT 1 FROM code WHERE code.name = f.name))
     INSERT INTO genfill.function_files AS f (name, sha256) SELECT name, sha256 FROM code
     ON CONFLICT (name) DO UPDATE SET sha256 = EXCLUDED.sha256, applied_at = now(), applied_by = session_user
      WHERE f.sha256 <> EXCLUDED.sha256
     RETURNING f.name`,
    [files.map((f) => f.name), files.map((f) => f.sha256)],
  );
  return rows.map((r) => r.name).sort();
}

interface KindRow {
  kind: string;
  service: string;
  /** The arguments' JSON Schema as text, keys sorted (canonicalJson). */
  args: string;
}

/** JSON with every object's keys sorted: one spelling per value, as jsonb compares them. */
function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}

async function recordedRequestKinds(conn: Conn): Promise<KindRow[]> {
  const { rows } = await conn.query<{ kind: string; service: string; args: unknown }>('SELECT kind, service, args_schema AS args FROM genfill.request_kinds ORDER BY kind');
  return rows.map((r) => ({ kind: r.kind, service: r.service, args: canonicalJson(r.args) }));
}

/** How genfill.request_kinds differs from the code's kinds (`+kind` missing, `-kind` unknown, `~kind` another service or arguments' schema). */
function requestKindDrift(recorded: KindRow[]): string[] {
  const db = new Map(recorded.map((k) => [k.kind, k]));
  return [
    ...REQUEST_KIND_NAMES.filter((k) => !db.has(k)).map((k) => `+${k}`),
    ...recorded.filter((k) => !(REQUEST_KIND_NAMES as string[]).includes(k.kind)).map((k) => `-${k.kind}`),
    ...REQUEST_KIND_NAMES.filter((k) => db.has(k) && (db.get(k)!.service !== serviceOf(k) || db.get(k)!.args !== canonicalJson(requestArgsSchema(k)))).map(
      (k) => `~${k}`,
    ),
  ].sort();
}

/**
 * Make genfill.request_kinds the code's kinds, writing only when they differ (a migrate that
 * changes nothing takes no lock on it). A kind the code no longer knows is deleted; while
 * requests of it are recorded, the foreign key refuses — say so, rather than losing them.
 */
async function syncRequestKinds(conn: Conn): Promise<string[]> {
  const drift = requestKindDrift(await recordedRequestKinds(conn));
  if (drift.length === 0) return [];
  const gone = drift.filter((d) => d.startsWith('-')).map((d) => d.slice(1));
  const { rows: held } = await conn.query<{ kind: string; n: number }>(
    'SELECT kind, count(*)::int AS n FROM genfill.requests WHERE kind = ANY($1::text[]) GROUP BY kind ORDER BY kind',
    [gone],
  );
  if (held.length > 0) {
    throw new SchemaVersionError(
      `genfill.requests holds requests of kinds this genfill does not know (${held.map((h) => `${h.kind}: ${h.n}`).join(', ')}): ` +
        'run a genfill that knows them, or add a migration that archives those requests',
    );
  }
  await conn.query('DELETE FROM genfill.request_kinds WHERE kind = ANY($1::text[])', [gone]);
  await conn.query(
    `INSERT INTO genfill.request_kinds AS k (kind, service, args_schema) SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[])
     ON CONFLICT (kind) DO UPDATE SET service = EXCLUDED.service, args_schema = EXCLUDED.args_schema
      WHERE k.service <> EXCLUDED.service OR k.args_schema <> EXCLUDED.args_schema`,
    [REQUEST_KIND_NAMES, REQUEST_KIND_NAMES.map(serviceOf), REQUEST_KIND_NAMES.map((k) => JSON.stringify(requestArgsSchema(k)))],
  );
  return drift;
}

/** How the recorded function files differ from this code's, or null when they are the same. */
function functionFileDrift(recorded: RecordedFile[]): string | null {
  const code = new Map(knownFunctionFiles().map((f) => [f.name, f.sha256]));
  const db = new Map(recorded.map((f) => [f.name, f.sha256]));
  const changed = [...code].filter(([n, sha]) => db.has(n) && db.get(n) !== sha).map(([n]) => n);
  const missing = [...code.keys()].filter((n) => !db.has(n));
  const unknown = [...db.keys()].filter((n) => !code.has(n));
  const list = (names: string[]) => names.slice(0, 5).join(', ') + (names.length > 5 ? ` and ${names.length - 5} more` : '');
  const parts = [
    changed.length > 0 ? `differ: ${list(changed)}` : '',
    missing.length > 0 ? `never applied: ${list(missing)}` : '',
    unknown.length > 0 ? `unknown to this genfill: ${list(unknown)}` : '',
  ].filter(Boolean);
  return parts.length > 0 ? parts.join('; ') : null;
}

export async function migrate(db: Db, o: { settings?: OwnerSettings } = {}): Promise<MigrateResult> {
  return withTransaction(db, async (conn) => {
    await conn.query(`SELECT pg_advisory_xact_lock(${MIGRATE_LOCK})`);
    await conn.query('CREATE SCHEMA IF NOT EXISTS genfill');
    await conn.query(`
      CREATE TABLE IF NOT EXISTS genfill.migrations (
        version    integer PRIMARY KEY,
        name       text NOT NULL,
        sha256     text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now(),
        applied_by text NOT NULL DEFAULT session_user
      )`);
    const applied = (await appliedMigrations(conn)) ?? [];
    refuseNewer(applied);
    const known = knownMigrations();
    for (const a of applied) {
      const k = known[a.version - 1];
      if (k && k.sha256 !== a.sha256) {
        throw new SchemaVersionError(
          `migration ${a.name} was changed after it was applied (sha256 ${a.sha256.slice(0, 12)} in the database, ${k.sha256.slice(0, 12)} here): migrations are add-only`,
        );
      }
    }
    const done: string[] = [];
    for (const m of known.slice(applied.length)) {
      await conn.query('INSERT INTO genfill.migrations (version, name, sha256) VALUES ($1, $2, $3)', [m.version, m.name, m.sha256]);
      try {
        await conn.query(m.sql);
      } catch (err) {
        throw new Error(`migration ${m.name} failed, nothing was applied: ${(err as Error).message}`, { cause: err });
      }
      done.push(m.name);
    }
    const functions = await applyFunctionFiles(conn, done.length > 0);
    const requestKinds = await syncRequestKinds(conn);
    const settings = await writeSettings(conn, o.settings ?? {});
    return { applied: done, version: known.length, functions, requestKinds, settings };
  });
}

/** Every command but `migrate` calls this first: the schema must be exactly what we know. */
export async function assertSchemaCurrent(db: Db): Promise<void> {
  const conn = await db.connect();
  try {
    const applied = await appliedMigrations(conn);
    if (applied === null || applied.length === 0) {
      throw new SchemaVersionError('the genfill registry is not installed in this database: run `genfill migrate` first');
    }
    refuseNewer(applied);
    if (applied.length < LATEST_VERSION) {
      throw new SchemaVersionError(
        `the database schema is at version ${applied.length}, this genfill needs ${LATEST_VERSION}: run \`genfill migrate\``,
      );
    }
    const drift = functionFileDrift((await recordedFunctionFiles(conn)) ?? []);
    if (drift !== null) {
      throw new SchemaVersionError(
        `the registry's SQL functions are not this genfill's (${drift}): run \`genfill migrate\``,
      );
    }
    const kinds = requestKindDrift(await recordedRequestKinds(conn));
    if (kinds.length > 0) {
      throw new SchemaVersionError(`the registry's request kinds are not this genfill's (${kinds.join(', ')}): run \`genfill migrate\``);
    }
  } finally {
    conn.release();
  }
}
